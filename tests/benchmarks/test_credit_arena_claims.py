"""The credit arena's claim settings (issue 39): gcpo, parallel_shapley and tracer. Their configs, the
metrics their tables read, their tables worked by hand from stored-result shapes, ``--table-only``
from stored per-seed results, and their quick paths on a tiny model (slow)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import arena_results, credit_arena
from benchmarks.arena_results import load_result, save_result
from teamplay.credit.values.generative_judge import check_judge_template
from tests.tiny import save_tiny

ROOT = Path(__file__).resolve().parents[2]
T975_2, T80_2 = 4.302653, 1.060660  # Student's t quantiles, 2 degrees of freedom (3 seeds)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(save_tiny(tmp_path_factory.mktemp("tiny") / "model"))


def test_claims_are_stored_settings_with_calibrated_sizes_and_every_method_applies(tiny_model):
    assert set(credit_arena.CLAIMS) <= set(credit_arena.STORED_SETTINGS) & set(credit_arena.SETTINGS)
    for setting in credit_arena.CLAIMS:
        steps, problems, group, heldout, seeds, every = sizes = credit_arena.sizes_of(setting, "default")
        assert seeds >= 5 and steps % every == 0 and heldout >= 64
        assert credit_arena.sizes_of(setting, "full")[4] >= 10
        base = credit_arena.arena_config(setting, tiny_model, sizes)
        assert base["eval_task"]["distinct"] and base["eval_task"]["limit"] == heldout
        assert base["eval_curve_limit" if heldout > 64 else "eval_every"] == (64 if heldout > 64 else every)
        ok, refused = credit_arena.applicable_methods(base, credit_arena.SETTING_METHODS[setting])
        assert refused == {} and list(ok) == list(credit_arena.SETTING_METHODS[setting])
        assert list(ok)[0] == "grpo"
        # the quick sizes build too (the --quick path)
        credit_arena.arena_config(setting, tiny_model, credit_arena.sizes_of(setting, "quick"))


def test_gcpo_is_one_reasoning_solver_whose_group_is_the_team_and_pass_at_the_group(tiny_model):
    sizes = credit_arena.sizes_of("gcpo", "default")
    base = credit_arena.arena_config("gcpo", tiny_model, sizes)
    assert base["protocol"] == {"name": "single"} and base["team"]["roles"] == [
        {"name": "solver", "prompt": credit_arena.SOLVER_PROMPT}]
    assert base["eval_samples"] == base["rollout"]["group_size"] == sizes[2] == 4  # pass@4 of a group of 4
    assert base["sampling"]["max_new_tokens"] == base["eval_sampling"]["max_new_tokens"] == 32
    assert base["sampling"]["temperature"] == credit_arena.TEMPERATURE
    assert credit_arena.ARENA_METHODS["coverage"] == {"method": "coverage"}  # the method's own defaults


def test_parallel_shapley_has_two_working_paths_two_free_riders_and_a_frozen_judge(tiny_model):
    base = credit_arena.arena_config("parallel_shapley", tiny_model, credit_arena.sizes_of("parallel_shapley",
                                                                                           "default"))
    assert base["protocol"] == {"name": "paths", "options": {"n_paths": 4, "paths_see": "earlier",
                                                             "reply_prefix": "The answer is",
                                                             "instruction": "Give the answer."}}
    roles = {r["name"]: r for r in base["team"]["roles"]}
    assert list(roles) == ["path_a", "path_b", "copier", "silent", "judge"]
    assert roles["path_a"]["adapter"] == roles["path_b"]["adapter"] == "path"  # one shared adapter
    assert roles["copier"]["policy"] == "scripted:copier(agent=path_a_0)" and roles["silent"]["policy"] == (
        "scripted:silent")
    assert roles["judge"] == {"name": "judge", "trainable": False}  # the model, never trained
    judge = credit_arena.ARENA_METHODS["shapley (judge)"]
    assert judge["options"]["value"] == "judge" and judge["options"]["judge_max_new_tokens"] == 10
    assert check_judge_template(judge["options"]["judge_template"]) == credit_arena.JUDGE_TEMPLATE
    assert credit_arena.ARENA_METHODS["shapley (masking)"]["options"] == {"value": "masking"}


def test_tracer_is_the_pr_team_with_priced_review_controllers_only(tiny_model):
    sizes = credit_arena.sizes_of("tracer", "default")
    tracer = credit_arena.arena_config("tracer", tiny_model, sizes)
    pr = credit_arena.arena_config("pr", tiny_model, sizes)
    assert {**tracer, "controllers": None} == {**pr, "controllers": None}  # all else is pr's team
    controllers = tracer["controllers"]
    assert controllers["stages"] == ["review"]  # the second proposal cannot be skipped
    assert controllers["enabled"] and controllers["price_per_token"] == credit_arena.PRICE_PER_TOKEN > 0


def _write_rows(run_dir: Path, rows: list[dict]) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_claim_metrics_average_credit_shares_over_the_steps_that_credited(tmp_path):
    _write_rows(tmp_path / "run", [
        {"step": 0, "heldout": {"team_accuracy": 0.25, "tokens_per_problem": 12.5}},
        {"step": 1, "reward_mean": 0.5, "credit_share": {"path_a": 0.5, "silent": 0.5}},
        {"step": 2, "reward_mean": 0.0, "credit_share": {"path_a": 0.0, "silent": 0.0}},  # no signal: left out
        {"step": 3, "reward_mean": 1.0, "credit_share": {"path_a": 0.75, "judge": 0.25}},
        {"step": 3, "heldout_final": {"team_accuracy": 0.5}}])
    m = credit_arena.claim_metrics(tmp_path / "run")
    # path_a: (0.5 + 0.75) / 2; silent: (0.5 + 0) / 2 (no message in step 3: 0); judge: (0 + 0.25) / 2
    # exact: means of halves and quarters are exact
    assert m == {"train/credit_share/path_a": 0.625, "train/credit_share/silent": 0.25,
                 "train/credit_share/judge": 0.125, "untrained/tokens_per_problem": 12.5}


def _result(setting: str, per_seed: dict[str, dict[int, dict[str, float]]]) -> dict:
    """A stored-result shape of ``setting`` with the given per-seed metrics (3 seeds)."""
    sizes = credit_arena.sizes_of(setting, "default")
    return {"setting": setting, "size": "default", "sizes": (*sizes[:4], 3, sizes[5]), "config": {"steps": 1},
            "refused": {}, "per_seed": per_seed, "runs_total": 3 * len(per_seed), "command": "cmd", "machine": "m",
            "curves": {label: {s: [(0, 0.1), (sizes[0], m["heldout/team_accuracy"])] for s, m in seeds.items()}
                       for label, seeds in per_seed.items()},
            "tokens": {label: {s: {sizes[0]: 100.0} for s in seeds} for label, seeds in per_seed.items()}}


def _row(table: str, label: str) -> dict[str, str]:
    lines = table.splitlines()
    header = [c.strip() for c in lines[0].split("|")[1:-1]]
    row = next(line for line in lines[2:] if line.startswith(f"| {label} |"))
    return dict(zip(header, (c.strip() for c in row.split("|")[1:-1]), strict=True))


def test_gcpo_table_by_hand(tmp_path):
    def m(acc, gain, pass_k, distinct):
        return {"heldout/team_accuracy": acc, "heldout_gain/team_accuracy": gain, credit_arena.PASS_K: pass_k,
                "heldout_sampled_gain/pass_at_k": 0.1, credit_arena.DISTINCT: distinct, "train/updates": 10.0,
                "budget/generated_tokens": 1000.0}
    result = _result("gcpo", {
        "grpo": {0: m(0.3, 0.1, 0.5, 1.0), 1: m(0.4, 0.2, 0.6, 1.5), 2: m(0.5, 0.3, 0.7, 2.0)},
        "coverage": {0: m(0.4, 0.2, 0.6, 1.5), 1: m(0.5, 0.3, 0.6, 2.0), 2: m(0.6, 0.4, 0.9, 2.5)}})
    table, notes, headline = credit_arena.claim_markdown(result)
    cov = _row(table, "coverage")
    # pass@1: +0.1 on every seed (no spread); pass@4: differences 0.1, 0, 0.2 (mean 0.1, sd 0.1):
    # half 4.302653 * 0.1 / sqrt(3) = 0.248, MDE (4.302653 + 1.060660) * 0.1 / sqrt(3) = 0.310
    assert cov["Δ pass@1 (greedy) vs grpo (paired; MDE)"] == "+0.100 ± 0.000 (MDE 0.000)"
    assert cov["Δ pass@4 vs grpo (paired; MDE)"] == (f"+0.100 ± {T975_2 * 0.1 / math.sqrt(3):.3f} "
                                                      f"(MDE {(T975_2 + T80_2) * 0.1 / math.sqrt(3):.3f})")
    assert cov["Δ distinct right solutions / problem vs grpo (paired; MDE)"] == "+0.50 ± 0.00 (MDE 0.00)"
    assert cov["pass@4"] == f"0.700 ± {T975_2 * math.sqrt(0.03) / math.sqrt(3):.3f}"  # 0.6, 0.6, 0.9: sd sqrt(.03)
    assert _row(table, "grpo")["Δ pass@4 vs grpo (paired; MDE)"] == "—" and cov["training tokens"] == "1000 ± 0"
    # the untrained solver is each run's final value minus its gain: pass@1 0.2, pass@4 0.4, 0.5, 0.6
    assert notes[1] == f"The untrained solver: pass@1 0.200 ± 0.000, pass@4 0.500 ± {T975_2 * 0.1 / math.sqrt(3):.3f}."
    # grpo's gains 0.1, 0.2, 0.3: mean 0.2 ± 0.248, an interval that reaches below 0
    assert notes[2].startswith("Floor: grpo's gain in pass@1 (greedy) over the untrained team is +0.200 ± 0.248 "
                               "(NOT beyond its interval") and "Ceiling: none (" in notes[2]
    assert notes[3] == ("Paired differences beyond their intervals: coverage is above grpo on pass@1 (greedy); "
                        "coverage is above grpo on distinct right solutions / problem; the other 1 overlap 0.")
    assert headline == ("gcpo: grpo gain +0.200 ± 0.248 (3 seeds); coverage - grpo: pass@1 (greedy) +0.100 ± 0.000, "
                        "pass@4 +0.100 ± 0.248, distinct right solutions / problem +0.50 ± 0.00.")
    # a stored result gives the same table (the JSON round trip: seeds as strings, curves as lists)
    again = load_result(save_result(result, tmp_path / "gcpo.json"))
    assert credit_arena.stored_markdown(again) == (table, notes, headline)


def test_parallel_shapley_table_shows_the_free_riders_credit_and_the_judge_tokens():
    grpo = {f"train/credit_share/{role}": 0.2 for role in credit_arena.PATH_ROLES}
    judged = {"train/credit_share/path_a": 0.3, "train/credit_share/path_b": 0.3, "train/credit_share/copier": 0.25,
              "train/credit_share/silent": 0.0, "train/credit_share/judge": 0.15, "budget/judge_tokens": 1240.0}

    def m(acc, extra):
        return {"heldout/team_accuracy": acc, "heldout_gain/team_accuracy": 0.1, "budget/tokens": 72.0, **extra}
    result = _result("parallel_shapley", {"grpo": {s: m(0.3, grpo) for s in range(3)},
                                          "shapley (judge)": {s: m(0.3 + 0.05 * s, judged) for s in range(3)}})
    table, notes, headline = credit_arena.claim_markdown(result)
    row = _row(table, "shapley (judge)")
    # silent: 0 - 0.2 on every seed; copier 0.25 - 0.2
    assert row["credit share silent"] == "0.000 ± 0.000" and row["credit share copier"] == "0.250 ± 0.000"
    assert row["Δ credit share silent vs grpo (paired; MDE)"] == "-0.200 ± 0.000 (MDE 0.000)"
    assert row["Δ credit share copier vs grpo (paired; MDE)"] == "+0.050 ± 0.000 (MDE 0.000)"
    # grpo ran no judge: its counter is 0, not missing; the credit judge's tokens count in the budget
    assert _row(table, "grpo")["judge tokens"] == "0 ± 0" and row["judge tokens"] == "1240 ± 0"
    assert "frozen adapter" in notes[0] and "Ceiling: none (" in notes[1]
    assert "shapley (judge) is below grpo on credit share silent" in notes[2]
    assert headline.startswith("parallel_shapley: grpo gain +0.100 ± 0.000 (3 seeds); shapley (judge) - grpo: ")


def test_tracer_table_reports_tokens_at_equal_accuracy_and_the_review():
    def m(acc, tokens, speaks):
        return {"heldout/team_accuracy": acc, "heldout_gain/team_accuracy": 0.15, credit_arena.TOKENS: tokens,
                credit_arena.REVIEW_SPEAKS: speaks, "heldout/team/verdict_accuracy": 0.6,
                "untrained/tokens_per_problem": 15.0, "budget/counterfactual_tokens": 30.0}
    result = _result("tracer", {"grpo": {s: m(0.3, 15.0, 1.0) for s in range(3)},
                                "tracer_roles": {s: m(0.3, 12.0 - s, 0.5) for s in range(3)}})
    table, notes, headline = credit_arena.claim_markdown(result)
    row = _row(table, "tracer_roles")
    # tokens 12, 11, 10 against 15: differences -3, -4, -5 (mean -4, sd 1): half 4.302653 / sqrt(3) = 2.484
    assert row["Δ tokens / problem vs grpo (paired; MDE)"] == (f"-4.0 ± {T975_2 / math.sqrt(3):.1f} "
                                                               f"(MDE {(T975_2 + T80_2) / math.sqrt(3):.1f})")
    assert row["Δ team acc. vs grpo (paired; MDE)"] == "+0.000 ± 0.000 (MDE 0.000)"
    assert row["reviews spoken"] == "0.50 ± 0.00" and row["counterfactual review tokens"] == "30 ± 0"
    assert notes[1] == ("The untrained team (its controllers have seen no state, so every review speaks) used "
                        "15.0 ± 0.0 tokens per problem.")
    assert "tracer_roles is below grpo on tokens / problem" in notes[3]
    assert headline.endswith("tracer_roles - grpo: team acc. +0.000 ± 0.000, tokens / problem -4.0 ± 2.5.")


def test_table_only_writes_a_claims_region_from_its_stored_results(tmp_path, monkeypatch, capsys):
    result = _result("tracer", {label: {s: {"heldout/team_accuracy": 0.3 + 0.01 * s, "heldout_gain/team_accuracy":
                                            0.1, "untrained/tokens_per_problem": 15.0} for s in range(3)}
                                for label in ("grpo", "tracer_roles")})
    save_result(result, arena_results.result_path("tracer", folder=tmp_path / "results"))
    monkeypatch.setattr(credit_arena, "result_path",
                        lambda setting, size="default", more=False: arena_results.result_path(
                            setting, size, more, folder=tmp_path / "results"))
    monkeypatch.setattr(credit_arena, "FIGURES", tmp_path / "figures")
    monkeypatch.setattr("benchmarks.common.DEFAULT_OUTPUT", tmp_path / "BENCHMARKS.md")
    before = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    credit_arena.main(["--setting", "tracer", "--table-only"])
    assert "## tracer" in capsys.readouterr().out
    written = (tmp_path / "BENCHMARKS.md").read_text(encoding="utf-8")
    body = credit_arena.split_region(load_result(arena_results.result_path("tracer", folder=tmp_path / "results")))
    assert f"<!-- bench:credit_arena_tracer:start -->\n{body}" in written
    assert body.startswith("Command: `cmd` (m).") and "| tracer_roles | 3 |" in body
    assert (tmp_path / "figures" / "credit_arena_tracer.png").stat().st_size > 1000
    assert (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8") == before


@pytest.mark.slow  # per claim: its methods x 2 seeds of its tiny quick sizes (30-70 s each)
@pytest.mark.parametrize("setting", credit_arena.CLAIMS)
def test_quick_path_of_a_claim_stores_results_that_give_the_same_table(setting, tiny_model, tmp_path):
    result = credit_arena.run_setting(setting, tiny_model, size="quick", folder=tmp_path / "arena")
    labels = credit_arena.SETTING_METHODS[setting]
    assert result["refused"] == {} and result["runs_total"] == 2 * len(labels)
    for label in labels:
        assert sorted(result["per_seed"][label]) == [0, 1]  # paired: every method ran both seeds
        for m in result["per_seed"][label].values():
            assert m["budget/steps"] == credit_arena.sizes_of(setting, "quick")[0]
            assert m["untrained/tokens_per_problem"] > 0
            if setting == "gcpo":  # pass@2 of the held-out set sampled twice, before and after
                assert m["heldout_sampled/samples/k"] == 2 and 0 <= m[credit_arena.PASS_K] <= 1
                assert "heldout_sampled_gain/pass_at_k" in m
            if setting == "tracer":
                assert 0 <= m[credit_arena.REVIEW_SPEAKS] <= 1
    if setting == "parallel_shapley":  # the credit judge generates: its tokens count, grpo's none
        judged, grpo = result["per_seed"]["shapley (judge)"][0], result["per_seed"]["grpo"][0]
        assert judged["budget/judge_tokens"] > 0 and "budget/judge_tokens" not in grpo
        assert judged["budget/generated_tokens"] == judged["budget/tokens"] + judged["budget/judge_tokens"]
        # masking credits the frozen judge alone: nothing trains
        assert all(m["train/updates"] == 0 for m in result["per_seed"]["shapley (masking)"].values())
    stored = {**result, "command": f"python -m benchmarks.credit_arena --setting {setting}", "machine": "test"}
    again = load_result(save_result(stored, tmp_path / f"{setting}.json"))
    table, notes, headline = credit_arena.stored_markdown(again)
    assert (table, notes, headline) == credit_arena.stored_markdown(result)
    assert table.splitlines()[2].startswith("| grpo | 2 |") and headline.startswith(f"{setting}: grpo gain")


@pytest.mark.slow  # the --quick command line of gcpo: 2 methods x 2 seeds of 2 tiny steps; writes nothing
def test_quick_command_line_prints_a_claims_table_and_writes_nothing(tiny_model, tmp_path, capsys):
    before = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    credit_arena.main(["--quick", "--setting", "gcpo", "--model", tiny_model, "--output", str(tmp_path)])
    out = capsys.readouterr().out
    assert "## gcpo" in out and "| coverage | 2 |" in out and "Ceiling: none (" in out
    assert (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8") == before
    assert not credit_arena.result_path("gcpo", "quick").exists()


def test_committed_claim_tables_are_the_ones_the_committed_results_give():
    """Each claim whose per-seed results are committed has, in BENCHMARKS.md, the region that
    ``--table-only`` writes from them (then the learning-curve figure's line)."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    stored = [s for s in credit_arena.CLAIMS if arena_results.result_path(s).is_file()]
    assert set(credit_arena.CLAIMS) <= set(stored)  # every claim has been run and stored
    for setting in stored:
        result = load_result(arena_results.result_path(setting))
        assert result["setting"] == setting
        body = credit_arena.split_region(result)
        assert f"bench:{credit_arena.region_name(setting)}:start -->\n{body}" in text, setting
