"""Where credit paid: the exact paired test, the cooperation settings' configs (a held-out set with
no twin in training, one optimiser step per training step), and that the README and the docs page
hold exactly the table the committed per-seed results give."""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks import cooperation, credit_paid
from benchmarks.arena_results import load_result, save_result
from teamplay.config import TrainConfig, build_config
from teamplay.training.wiring.checks import check_run
from teamplay.training.wiring.envs import load_items
from tests.tiny import save_tiny

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(save_tiny(tmp_path_factory.mktemp("tiny") / "model"))


def test_sign_flip_p_by_hand():
    # 0.3, 0.1, -0.05, 0.2 (sum 0.55): of 16 signings only all-plus (0.65), the observed (0.55)
    # and their negations reach |sum| >= 0.55
    assert cooperation.sign_flip_p([0.3, 0.1, -0.05, 0.2]) == 4 / 16  # exact: a count of 4 over 16
    assert cooperation.sign_flip_p([0.1] * 6) == 2 / 64  # exact: the smallest p at 6 seeds
    assert cooperation.sign_flip_p([1.0, -1.0]) == 1.0  # exact: every signing reaches |0|
    assert math.isnan(cooperation.sign_flip_p([]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-20, 20), min_size=1, max_size=7), st.integers(1, 5))
def test_sign_flip_p_is_the_share_of_signings_at_least_as_extreme(diffs, scale):
    # against a count written out on integers (exact arithmetic), scaled to hundredths as the
    # accuracy differences are: the float sums' ties must be kept by the slack
    values = [d * scale / 100 for d in diffs]
    observed = abs(sum(d * scale for d in diffs))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=len(diffs))
               if abs(sum(s * d * scale for s, d in zip(signs, diffs, strict=True))) >= observed)
    p = cooperation.sign_flip_p(values)
    assert p == hits / 2 ** len(diffs)  # exact: both are a count over 2^n
    assert cooperation.sign_flip_p([-v for v in values]) == p  # exact: the same count
    assert p >= 2 / 2 ** len(diffs) or not any(diffs)


def test_fair_split_has_a_clean_distinct_held_out_set_and_one_optimiser_step_per_step(tiny_model):
    for setting, answers in (("split_k4_fair", 160), ("split_k8_fair", 160)):
        k = cooperation.SETTINGS[setting][0]
        sizes = cooperation.SIZES[setting]["default"]
        base = cooperation.base_config(setting, tiny_model, sizes)
        cfg = build_config(TrainConfig, {**base, "credit": {"method": "oracle"}})
        check_run(cfg)
        steps, problems, group, heldout, seeds, _ = sizes
        assert heldout * k == answers and problems * k * group == cfg.optim.minibatch_size == 32
        assert seeds >= 6  # the exact test can reach p < 0.05 only from 6 paired seeds (2 / 2^6)
        task, held = load_items(cfg.eval_task)
        _, train = load_items(cfg.task)
        parts = [p["prompt"] for item in held for p in item.metadata["parts"]]
        key = task.base.twin_key
        from teamplay.envs.tasks.catalog.tuples import part
        held_keys = [key(part(item, j)) for item in held for j in range(k)]
        train_keys = {key(part(item, j)) for item in train for j in range(k)}
        assert len(parts) == len(set(held_keys)) == answers  # distinct, twins counted as one
        assert not set(held_keys) & train_keys  # no held-out sum or its commuted twin in training


def test_split_audit_controls_build_and_only_the_replayed_baseline_needs_replays(tiny_model):
    base = cooperation.base_config("split_k8_fair", tiny_model, cooperation.SIZES["split_k8_fair"]["default"])
    controls = ("oracle (mean only)", "oracle (positive part)", "oracle (baseline of 8 more)")
    needs = {label: check_run(build_config(TrainConfig, {**base, "credit": cooperation.METHODS[label]})).credit_needs
             for label in controls}
    assert needs == {"oracle (mean only)": frozenset(), "oracle (positive part)": frozenset(),
                     "oracle (baseline of 8 more)": frozenset({"replay"})}


@pytest.mark.parametrize("setting", ["relay_k2", "relay_k3"])
def test_relay_setting_builds_and_is_refused_nothing(tiny_model, setting):
    k = cooperation.SETTINGS[setting][0]
    base = cooperation.base_config(setting, tiny_model, cooperation.SIZES[setting]["default"])
    for label in cooperation.SETTINGS[setting][1]:
        check_run(build_config(TrainConfig, {**base, "credit": cooperation.METHODS[label]}))
    steps, problems, group, heldout, seeds, _ = cooperation.SIZES[setting]["default"]
    assert base["optim"]["minibatch_size"] == problems * group * k  # a step's messages in one minibatch
    assert base["eval_withhold_messages"] and seeds >= 6
    cfg = build_config(TrainConfig, {**base, "credit": {"method": "grpo"}})
    # the K = 2 relay is evaluated sampled at the training temperature (greedy, it starts at the ceiling)
    assert cfg.eval_sampling.temperature == (cfg.sampling.temperature if setting == "relay_k2" else 0.0)  # exact: set
    _, held = load_items(cfg.eval_task)
    _, train = load_items(cfg.task)
    held_keys = {tuple(sorted(item.metadata["operands"])) for item in held}
    assert len(held) == len(held_keys) == heldout  # distinct held-out problems
    assert not held_keys & {tuple(sorted(item.metadata["operands"])) for item in train}
    with pytest.raises(ValueError, match="unknown setting"):
        cooperation.base_config("relay_k9", tiny_model, (1, 1, 1, 1, 1, 1))


def test_information_use_pairs_each_seed_before_and_after():
    result = _result([0.0, 0.0])
    for label, seeds in result["per_seed"].items():
        for seed, m in seeds.items():
            m["untrained/" + cooperation.NEEDED] = 0.25
            m["heldout/" + cooperation.NEEDED] = 0.25 + (0.5 if label == "oracle" else 0.0) + 0.1 * seed
    lines = cooperation.information_use(result)
    # differences 0 and 0.1: every signing is as extreme, p 1
    assert lines[0].startswith("grpo 0.250 ± 0.000 -> 0.300 ± 0.635 (+0.050 ± 0.635, p 1.000)")
    assert lines[1].startswith("oracle 0.250 ± 0.000 -> 0.800")
    assert cooperation.information_use(_result([0.1])) == []  # the split settings measure none


def _result(diffs: list[float]) -> dict:
    seeds = range(len(diffs))
    acc = {"grpo": [0.2] * len(diffs), "oracle": [0.2 + d for d in diffs]}
    return {"setting": "split_k8_fair", "size": "default", "sizes": (12, 1, 4, 20, len(diffs), 4), "config": {},
            "refused": {}, "machine": "machine A", "command": "cmd", "runs_total": 2 * len(diffs),
            "per_seed": {m: {s: {"heldout/team_accuracy": acc[m][s], "heldout_gain/team_accuracy": 0.1 + 0.01 * s,
                                 "train/updates": 12.0, "budget/generated_tokens": 100.0}
                             for s in seeds} for m in acc},
            "curves": {m: {s: [(0, 0.1), (12, acc[m][s])] for s in seeds} for m in acc},
            "tokens": {m: {s: {12: 100.0} for s in seeds} for m in acc}}


def test_table_shows_the_t_interval_and_the_exact_p_and_survives_storage(tmp_path):
    result = _result([0.05, 0.04, 0.06, 0.05, 0.03, 0.07])
    text, notes, headline = cooperation.table(result)
    assert "| oracle | 6 | 0.250 ± 0.015 | +0.050 ± 0.015 | 0.031 |" in text
    assert "oracle - grpo +0.050 ± 0.015 (p 0.031)" in headline
    stored = load_result(save_result(result, tmp_path / "r.json"))
    assert cooperation.table(stored) == (text, notes, headline)


def test_within_seed_spread_pairs_a_rerun_with_its_stored_seed():
    stored, again = _result([0.05, 0.04, 0.06]), _result([0.05, 0.04, 0.02])
    again["per_seed"] = {m: {2: seeds[2]} for m, seeds in again["per_seed"].items()}
    spread = cooperation.within_seed_spread(stored, again)
    assert spread["grpo"] == (2, 0.2, 0.2)  # exact: the same stored literal on both sides
    assert spread["oracle"][0] == 2 and spread["oracle"][1] - spread["oracle"][2] == pytest.approx(0.04, abs=1e-12)


def test_readings_follow_both_tests():
    learns, fails = (0.1, 0.05), (0.02, 0.05)
    assert credit_paid.reading(fails, (0.2, 0.01), 0.01, 0.02).startswith("floor fails")
    assert credit_paid.reading(learns, (0.05, 0.02), 0.031, 0.03) == "**paid**"
    # every seed up at 5 seeds: a t interval above 0, but p = 0.0625 at best
    assert credit_paid.reading(learns, (0.008, 0.007), 0.125, 0.009).startswith("not settled")
    assert credit_paid.reading(learns, (-0.05, 0.02), 0.031, 0.03).startswith("not settled")
    assert credit_paid.reading(learns, (-0.05, 0.02), 0.2, 0.03) == "worse than grpo"
    assert credit_paid.reading(learns, (0.01, 0.05), 0.6, 0.07) == "null (could find ±0.07)"
    # a method that never stepped, and one whose runs equal grpo's seed for seed, read as such first
    assert credit_paid.reading(learns, (-0.1, 0.1), 0.125, 0.17, steps=0.0) == "void: no optimiser step"
    assert credit_paid.reading(learns, (0.0, 0.0), 1.0, 0.0, steps=9.0, diffs=[0.0] * 6) == "same as grpo (every seed)"
    assert credit_paid.reading(learns, (0.01, 0.05), 0.6, 0.07, steps=9.0, diffs=[0.0, 0.06]).startswith("null")


def test_readme_and_docs_hold_the_table_the_committed_results_give():
    for path, links in ((credit_paid.README, True), (credit_paid.DOCS_PAGE, False)):
        text = path.read_text(encoding="utf-8")
        assert credit_paid.replace_in(text, credit_paid.table(links)) == text, path.name
    # every committed comparison is in it, K = 4's audited claim among them
    docs = credit_paid.table(links=False)
    assert "| additive, K = 4 (`benchmarks/results/credit_arena/split_k4.json`) | oracle | 5 |" in docs
    assert "0.125 | not settled" in docs
    # the README shows the clean reruns, not the sittings they superseded; both show the calibrations
    assert "split_k4.json" not in credit_paid.table() and "split_k4_fair.json" in credit_paid.table()
    assert "| untrained: answerer right 0 of 64 | — | — | null by calibration (rate ≤ 4.6%) |" in docs


def test_upper_bound_is_the_exact_binomial_one():
    assert abs(credit_paid.upper_bound_95(0, 64) - (1 - 0.05 ** (1 / 64))) < 1e-12  # bisection to 2^-60
    assert abs(credit_paid.upper_bound_95(0, 21) - (1 - 0.05 ** (1 / 21))) < 1e-12
    # 3 of 10: the rate whose tail P(X <= 3) is 0.05 (a known value, 0.6066)
    assert abs(credit_paid.upper_bound_95(3, 10) - 0.6066) < 1e-4
    assert credit_paid.upper_bound_95(5, 5) == 1.0  # exact: every trial a success
    with pytest.raises(ValueError, match="successes"):
        credit_paid.upper_bound_95(3, 2)


def test_committed_cooperation_regions_are_the_ones_their_results_give():
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    stored = (p for p in cooperation.RESULTS.glob("*.json") if not p.stem.endswith("-rerun"))
    for path in sorted(p for p in stored if p != credit_paid.CALIBRATION):
        result = load_result(path)
        tag = cooperation.tag_of(path, result)
        name = cooperation.region_name(result["setting"], tag)
        assert f"bench:{name}:start -->\n{cooperation.region(result, tag)}" in text, path.name


@pytest.mark.slow  # 2 methods x 2 seeds of 2 tiny steps of the K = 8 team, and of the relay
def test_quick_path_stores_results_that_give_the_same_table(tiny_model, tmp_path):
    for setting in ("split_k8_fair", "relay_k3"):
        result = cooperation.run_setting(setting, tiny_model, size="quick", folder=tmp_path / setting)
        labels = cooperation.SETTINGS[setting][1]
        assert result["runs_total"] == 2 * len(labels)
        for label in labels:
            assert sorted(result["per_seed"][label]) == [0, 1]
            for m in result["per_seed"][label].values():
                assert m["budget/steps"] == 2 and m["train/updates"] <= 2  # one minibatch per step
                assert "untrained/team_accuracy" in m
        stored = load_result(save_result({**result, "command": "c", "machine": "m"}, tmp_path / "r.json"))
        assert cooperation.table(stored) == cooperation.table({**result, "command": "c", "machine": "m"})


@pytest.mark.slow  # 3 methods x 1 seed of 2 tiny steps of the K = 4 chain
def test_seeds_train_only_the_seeds_a_stored_comparison_lacks_and_join_it(tiny_model, tmp_path):
    """``--seeds N``: a comparison split over sittings. The sitting trains only the missing seeds (in
    a folder of its own) and ``merge_results`` adds them to the stored ones, paired and by machine."""
    from benchmarks.arena_results import merge_results, seeds_held

    first = cooperation.run_setting("chain_k4", tiny_model, size="quick", folder=tmp_path / "first", seeds=[0])
    later = cooperation.run_setting("chain_k4", tiny_model, size="quick", folder=tmp_path / "later", seeds=[1])
    labels = cooperation.SETTINGS["chain_k4"][1]
    assert later["runs_total"] == len(labels) and all(sorted(later["per_seed"][m]) == [1] for m in labels)
    stored = load_result(save_result({**first, "command": "c", "machine": "A"}, tmp_path / "r.json"))
    merged = merge_results(stored, later, "B")
    assert seeds_held(merged) == {0, 1} and merged["machines"] == {0: "A", 1: "B"}
    # the default folder of a --seeds sitting names its seeds, so it never resumes another plan
    planned = cooperation.run_setting("chain_k4", tiny_model, size="quick", train=False, seeds=[3, 4])
    assert planned["folder"].endswith("cooperation-chain_k4-quick-seeds3-4") and planned["per_seed"]["grpo"] == {}


def test_the_warm_relay_and_its_no_channel_arm_differ_in_the_channel_only(tiny_model, tmp_path):
    """Both arms fine-tune the same warm start (a seed's methods share it through the sweep's cache)
    and train and evaluate the same way; the arm withholds every message."""
    warm = cooperation.run_setting("relay_k3_warm", tiny_model, size="quick", folder=tmp_path / "w", train=False)
    arm = cooperation.run_setting("relay_k3_warm_nochannel", tiny_model, size="quick", folder=tmp_path / "n",
                                  train=False)
    assert warm["config"]["warm_start"]["cache"] == str(tmp_path / "w" / "warm-starts")
    assert arm["config"]["protocol"].pop("channel") is False and "channel" not in warm["config"]["protocol"]
    for config in (warm["config"], arm["config"]):
        config["warm_start"].pop("cache")
    assert warm["config"] == arm["config"]
    assert warm["config"]["warm_start"]["answer_format"] == "plain"  # 6 tokens hold a plain two-digit sum
    assert set(cooperation.SETTINGS["relay_k3_warm"][1]) >= {"grpo", "dr_mas", "shapley (masking)", "influence"}
    assert cooperation.SETTINGS["relay_k3_warm_nochannel"][1] == ("grpo",)
    assert "no channel" in cooperation.relay_start("relay_k3_warm_nochannel")


@pytest.mark.slow  # two tiny seeds of grpo, each after a warm start of 24 steps (about 25 s)
def test_the_no_channel_arm_trains_after_its_warm_start(tiny_model, tmp_path):
    result = cooperation.run_setting("relay_k3_warm_nochannel", tiny_model, size="quick", folder=tmp_path / "n")
    assert sorted(result["per_seed"]["grpo"]) == [0, 1]
    for seed in (0, 1):
        warm = tmp_path / "n" / "runs" / f"credit.method=grpo__seed{seed}" / "warm_start"
        steps = [json.loads(line)["step"] for line in (warm / "metrics.jsonl").read_text().splitlines()]
        assert steps[-1] == cooperation.WARM_START["steps"]  # the whole warm start ran before RL
    assert len(list((tmp_path / "n" / "warm-starts").iterdir())) == 2  # one shared warm start per seed


def test_cooperation_settings_named_like_arena_ones_get_rows_of_their_own():
    """The arena's chain_k4 and the cooperation benchmark's are different comparisons (about 19
    updates a run against one optimiser step a step): their rows in "Where credit paid" must differ."""
    for setting, name in credit_paid.COOPERATION_TEAMS.items():
        assert setting in cooperation.SETTINGS
        assert name != credit_paid.TEAMS.get(setting)


def test_a_comparison_short_of_its_planned_seeds_is_one_row_in_progress(monkeypatch):
    """A sitting's first seeds are stored so the next sitting can add the rest; until the planned 8
    are in, "Where credit paid" shows the comparison as in progress, with no difference read off it."""
    def result(seeds):
        per_seed = {m: {s: {"heldout/team_accuracy": 0.5, "heldout_gain/team_accuracy": 0.1} for s in seeds}
                    for m in cooperation.CHAIN_METHODS}
        return {"setting": "chain_k4", "size": "default", "per_seed": per_seed, "command": "c"}

    path = cooperation.RESULTS / "chain_k4.json"
    monkeypatch.setattr(credit_paid, "stored_results", lambda: [(path, result([0, 1]))])
    assert credit_paid.rows() == [["[chain, K = 4 (one step a step)](benchmarks/results/cooperation/chain_k4.json)",
                                   "all", "2", "—", "—", "—", "in progress: 2 of 8 paired seeds stored"]]
    monkeypatch.setattr(credit_paid, "stored_results", lambda: [(path, result(range(8)))])
    assert [row[1] for row in credit_paid.rows()] == ["loto (masking)", "shapley (masking)"]


def split_result(differences: dict[int, float], command: str) -> dict:
    """A stored split_k4_fair comparison whose oracle - grpo difference on seed s is differences[s]
    (grpo at 0.25 on every seed, gaining 0.1 over the untrained team)."""
    def seed(accuracy: float) -> dict[str, float]:
        return {"heldout/team_accuracy": accuracy, "heldout_gain/team_accuracy": 0.1, "train/updates": 12.0}
    per_seed = {"grpo": {s: seed(0.25) for s in differences},
                "oracle": {s: seed(0.25 + d) for s, d in differences.items()}}
    return {"setting": "split_k4_fair", "size": "default", "sizes": (12, 2, 4, 40, 6, 4), "per_seed": per_seed,
            "curves": {}, "tokens": {}, "command": command, "machine": "m"}


@pytest.mark.parametrize(("again", "verdict"), [
    ({100: 0.02, 101: 0.04, 102: 0.03, 103: 0.02, 104: 0.05, 105: 0.03}, "held"),  # every new seed up: p 0.031
    ({100: 0.05, 101: -0.01, 102: 0.03, 103: 0.0, 104: 0.02}, "not confirmed (same sign)"),  # up, not settled
    ({100: 0.02, 101: -0.04, 102: 0.0, 103: 0.01, 104: -0.02}, "did not hold"),  # a wash below 0
])
def test_a_replication_on_new_seeds_says_whether_the_first_sitting_held(tmp_path, monkeypatch, again, verdict):
    """The replication's own row right after the comparison it trained again, then both sittings
    pooled (disjoint seeds, so n adds up), read with whether the first sitting held (the new seeds
    alone paid again), was not confirmed (same sign, not settled alone) or did not hold."""
    folder = tmp_path / "benchmarks" / "results" / "cooperation"
    first = save_result(split_result({s: 0.03 for s in range(6)}, "python -m benchmarks.cooperation"),
                        folder / "split_k4_fair.json")
    command = f"python -m benchmarks.cooperation --setting split_k4_fair --replicate 100-{max(again)}"
    replication = save_result(split_result(again, command), folder / "split_k4_fair-replication.json")
    monkeypatch.setattr(credit_paid, "ROOT", tmp_path)
    monkeypatch.setattr(credit_paid, "COOPERATION_RESULTS", folder)
    monkeypatch.setattr(credit_paid, "stored_results", lambda: [(p, load_result(p)) for p in (replication, first)])
    rows = credit_paid.rows()
    assert [(r[0].split("](")[0], r[2]) for r in rows] == [
        ("[additive, K = 4 (clean rerun)", "6"),
        (f"[additive, K = 4 (clean rerun), new seeds 100-{max(again)}", str(len(again))),
        ("[additive, K = 4 (clean rerun), both pooled", str(6 + len(again)))]
    assert rows[0][-1] == "**paid**"  # the first sitting: every seed +0.03, exact p 2 / 2^6
    assert (rows[1][-1] == "**paid**") is (verdict == "held")
    assert rows[2][-1].endswith(f"; first sitting {verdict}")
    pooled_mean = (0.03 * 6 + sum(again.values())) / (6 + len(again))
    assert rows[2][4].startswith(f"{pooled_mean:+.3f}")


def test_a_replication_of_an_unsettled_comparison_says_whether_the_new_seeds_settle_it(tmp_path, monkeypatch):
    folder = tmp_path / "benchmarks" / "results" / "cooperation"
    first = save_result(split_result({0: 0.05, 1: -0.02, 2: 0.0, 3: 0.01, 4: -0.01, 5: 0.02}, "c"),
                        folder / "split_k4_fair.json")
    again = {100 + s: 0.03 for s in range(6)}
    command = "python -m benchmarks.cooperation --setting split_k4_fair --replicate 100-105"
    replication = save_result(split_result(again, command), folder / "split_k4_fair-replication.json")
    monkeypatch.setattr(credit_paid, "ROOT", tmp_path)
    monkeypatch.setattr(credit_paid, "COOPERATION_RESULTS", folder)
    monkeypatch.setattr(credit_paid, "stored_results", lambda: [(p, load_result(p)) for p in (first, replication)])
    rows = credit_paid.rows()
    assert rows[0][-1] != "**paid**" and rows[1][-1] == "**paid**"  # 6 mixed seeds; 6 new ones all up
    assert rows[2][-1].endswith("; new seeds settle it alone")


def test_replicate_takes_a_range_of_at_least_two_seeds():
    assert cooperation.seed_range("100-107") == range(100, 108)
    for bad in ("100", "100-100", "a-b", "107-100"):
        with pytest.raises(argparse.ArgumentTypeError):
            cooperation.seed_range(bad)


def test_a_replication_that_reuses_a_seed_is_refused():
    with pytest.raises(ValueError, match="new seeds"):
        credit_paid.pooled(split_result({0: 0.1, 1: 0.1}, "c"), split_result({1: 0.0, 100: 0.0}, "c"))


def test_a_probe_that_reaches_the_share_it_needs_is_calibrated_and_one_that_does_not_is_null(tmp_path, monkeypatch):
    probes = [{"team": "t1", "event": "groups with unequal rewards", "successes": 4, "trials": 16, "needed": 0.25,
               "state": "warm-started"},
              {"team": "t2", "event": "groups with unequal rewards", "successes": 3, "trials": 16, "needed": 0.25},
              {"team": "t3", "event": "answerer right", "successes": 0, "trials": 64}]
    path = cooperation.RESULTS / "calibration-test.json"  # only its name is read off the folder
    monkeypatch.setattr(credit_paid, "CALIBRATION", path)
    monkeypatch.setattr(type(path), "is_file", lambda self: True)
    monkeypatch.setattr(type(path), "read_text", lambda self, encoding=None: json.dumps({"probes": probes}))
    rows = credit_paid.calibration_rows()
    assert [r[3] for r in rows] == ["warm-started: groups with unequal rewards 4 of 16",
                                    "untrained: groups with unequal rewards 3 of 16",
                                    "untrained: answerer right 0 of 64"]
    assert rows[0][6] == "calibrated (25% ≥ 25%)"  # 4 of 16 is exactly the share needed
    assert rows[1][6].startswith("null by calibration") and rows[2][6] == "null by calibration (rate ≤ 4.6%)"
