"""The Byzantine benchmark's quick path: every rule under every attack, and the honest reference."""

from __future__ import annotations

from benchmarks.federated_byzantine import ATTACKS, RULES, run


def test_quick_run_covers_every_rule_and_attack():
    result = run(quick=True)
    assert result.name == "federated_byzantine" and result.headline.startswith("1 of 5 sites misbehaving")
    lines = result.table.splitlines()
    assert len(lines) == 2 + len(RULES)
    mean = result.data["mean"]
    assert set(mean) == set(RULES) and all(set(row) == set(ATTACKS) for row in mean.values())
    # the reference is the all-honest FedAvg run itself: distance 0 exactly
    assert mean["FedAvg (mean)"]["honest"]["distance"] == 0.0
    # -10 x one site's delta drags the plain mean further than any robust rule
    worst = mean["FedAvg (mean)"]["x(-10)"]["distance"]
    assert all(mean[name]["x(-10)"]["distance"] < worst for name in RULES if name != "FedAvg (mean)")
