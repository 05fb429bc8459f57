"""The credit-fidelity table in BENCHMARKS.md is the one its committed measurements give: every
utterance's true advantage and every method's advantage are stored per setting, and the table
(correlations, intervals, paired differences to grpo) is recomputed from them alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import credit_fidelity
from benchmarks.common import replace_region

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # 11 settings x up to 16 methods, 1000 cluster resamples each (about a minute)
def test_committed_fidelity_table_is_the_one_the_committed_measurements_give():
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    region = credit_fidelity.stored_region()
    assert replace_region(text, "credit_fidelity", region) == text


def test_every_setting_and_method_is_stored_with_its_advantages():
    measured, info = credit_fidelity.stored_measurements()
    assert [m["setting"] for m in measured] == [s.name for s in credit_fidelity.SETTINGS]
    assert info["command"] == "python -m benchmarks credit_fidelity" and info["jobs"] >= 1
    for m in measured:
        n = len(m["utterances"]["oracle"])
        assert n == len(m["utterances"]["problem"]) == len(m["utterances"]["agent"]) > 0
        assert set(m["methods"]) == set(credit_fidelity.METHODS)
        for label, row in m["methods"].items():
            assert "skipped" in row or len(row["advantages"]) == n, (m["setting"], label)


def test_the_influence_table_is_the_one_its_measurements_give():
    # influence came after the committed run: measured beside grpo and continuation on two settings
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert replace_region(text, "credit_fidelity_influence", credit_fidelity.influence_region()) == text
    for setting in credit_fidelity.INFLUENCE_SETTINGS:
        path = credit_fidelity.setting_file(credit_fidelity.INFLUENCE_RESULTS,
                                            next(s for s in credit_fidelity.SETTINGS if s.name == setting))
        result = json.loads(path.read_text(encoding="utf-8"))["result"]
        assert list(result["methods"]) == list(credit_fidelity.INFLUENCE_METHODS)
        n = len(result["utterances"]["oracle"])
        assert all(len(row["advantages"]) == n for row in result["methods"].values())
