"""The federated benchmark's statistics and honesty checks, on hand-made results (no model)."""

from __future__ import annotations

import pytest

from benchmarks.federated import mean_ci, summarize

SIZE = {"clients": 2, "rounds": 2, "local_steps": 1, "seeds": 2, "eval": 8, "problems": 2}


def test_mean_ci_by_hand():
    # [0.2, 0.4]: mean 0.3, sample std 0.1414, se 0.1; t(1 dof, 95%) = 12.706 -> half-width 1.2706
    mean, half = mean_ci([0.2, 0.4])
    assert mean == pytest.approx(0.3) and half == pytest.approx(1.2706, rel=1e-4)
    assert mean_ci([0.5]) == (0.5, 0.0)  # exact: one value: its mean is itself, no interval


def test_summary_reports_orderings_as_measured():
    results = {
        "centralized": [{"accuracy": 0.5, "bytes": 0.0}],
        "fedavg": [{"accuracy": 0.375, "bytes": 2e6}],
        "fedgrpo": [{"accuracy": 0.25, "bytes": 2e6}],
        "fedgrpo -sparse": [{"accuracy": 0.25, "bytes": 2.5e6}],
        "fedgrpo B=1%": [{"accuracy": 0.25, "bytes": 4e4}],
    }
    result = summarize(results, SIZE)
    # Fed-GRPO below FedAvg here: the headline must say so; dense bytes differ: not identical
    assert "Fed-GRPO vs FedAvg: lower" in result.headline
    assert "identical to dense upload in accuracy and bytes: no" in result.headline
    assert "B=1% uploads 50.0x less" in result.headline  # 2 MB / 0.04 MB
    assert "| fedgrpo B=1% | 1 | 0.250 ± 0.000 | 0.040 ± 0.000 |" in result.table
