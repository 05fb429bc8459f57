"""The credit arena's team-size settings (``split``): their sizes, the statistics of their tables,
the committed per-seed results, and that BENCHMARKS.md holds exactly the tables those results give."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks import credit_arena
from benchmarks.arena_results import RESULTS, load_result, mde, save_result, t_quantile, tokens_to_reach
from benchmarks.common import replace_region
from tests.tiny import save_tiny

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(save_tiny(tmp_path_factory.mktemp("tiny") / "model"))


def test_every_team_size_trains_and_is_measured_on_the_same_answers(tiny_model):
    for setting, k in credit_arena.SPLIT_K.items():
        steps, problems, group, heldout, seeds, every = credit_arena.sizes_of(setting, "default")
        base = credit_arena.arena_config(setting, tiny_model, (steps, problems, group, heldout, seeds, every))
        assert problems * k * group == 32 and heldout * k == 200  # answers per step, held-out answers
        assert base["protocol"] == {"name": "split", "options": {"n_agents": k, "reply_prefix": "The answer is",
                                                                 "instruction": "Give the answer."}}
        assert base["task"]["options"]["k"] == base["eval_task"]["options"]["k"] == k
        assert base["eval_curve_limit"] * k == 64 and steps % every == 0 and seeds >= 3
        roles = base["team"]["roles"]
        if setting in credit_arena.PER_ROLE:  # one adapter per solver: K roles of one solver each
            assert [r["name"] for r in roles] == [f"solver{i + 1}" for i in range(k)] and "count" not in roles[0]
            assert {**base, "team": None} == {**credit_arena.arena_config(setting.removesuffix("_roles"), tiny_model, (
                steps, problems, group, heldout, seeds, every)), "team": None}  # all else as the shared setting's
        else:
            assert roles == [{"name": "solver", "prompt": credit_arena.SOLVER_PROMPT, "count": k}]
        ok, refused = credit_arena.applicable_methods(base, ("grpo", "oracle", "cosac", "loto (masking)"))
        assert list(ok) == ["grpo", "oracle", "loto (masking)"] and list(refused) == ["cosac"]


def test_mde_and_t_quantiles_by_hand():
    # t quantiles: the tables' values (0.975 and 0.8, df 2 and 4)
    assert t_quantile(0.975, 2) == pytest.approx(4.302653, abs=1e-5)
    assert t_quantile(0.8, 4) == pytest.approx(0.940965, abs=1e-5)
    # differences 0.1, 0.3, 0.1: sd 0.1154701; (4.302653 + 1.060660) * 0.1154701 / sqrt(3)
    assert mde([0.1, 0.3, 0.1]) == pytest.approx(5.363313 * 0.1154701 / math.sqrt(3), rel=1e-5)
    assert math.isnan(mde([0.2]))
    assert tokens_to_reach([(0, 0.1), (4, 0.2)], {4: 10.0}, 0.5) != tokens_to_reach([(0, 0.5)], {}, 0.5)


@pytest.mark.slow  # 2 methods x 2 seeds of 2 tiny training steps of a 2-solver split team
def test_split_quick_path_stores_results_that_give_the_same_table(tiny_model, tmp_path):
    result = credit_arena.run_setting("split_k2", tiny_model, folder=tmp_path / "arena", sizes=(2, 1, 2, 2, 2, 1))
    assert result["refused"] == {} and result["runs_total"] == 4
    for label in ("grpo", "oracle"):
        assert sorted(result["per_seed"][label]) == [0, 1]
        for seed in (0, 1):
            assert sorted(result["tokens"][label][seed]) == [1, 2]  # generated tokens after each step
            assert result["per_seed"][label][seed]["train/messages_updated"] >= 0
    # oracle makes no counterfactual tokens: both methods generated exactly their rollouts
    for label in ("grpo", "oracle"):
        m = result["per_seed"][label][0]
        assert m["budget/generated_tokens"] == m["budget/tokens"]
    stored = {**result, "command": "python -m benchmarks.credit_arena --setting split_k2", "machine": "test"}
    again = load_result(save_result(stored, tmp_path / "split_k2.json"))
    assert credit_arena.split_markdown(again) == credit_arena.split_markdown(result)
    table = credit_arena.split_markdown(again)[0].splitlines()
    assert table[2].startswith("| grpo | 2 |") and table[3].startswith("| oracle | 2 |")


@pytest.mark.slow  # the --quick command line: 2 methods x 2 seeds of 2 tiny steps; writes nothing
def test_quick_command_line_prints_the_split_table_and_writes_nothing(tiny_model, tmp_path, capsys):
    before = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    credit_arena.main(["--quick", "--setting", "split_k2", "--model", tiny_model, "--output", str(tmp_path)])
    out = capsys.readouterr().out
    assert "## split_k2" in out and "| oracle | 2 |" in out and "Ceiling: oracle - grpo" in out
    assert (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8") == before
    assert not credit_arena.result_path("split_k2", "quick").exists()


def test_committed_tables_are_the_ones_the_committed_results_give():
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    stored = sorted([*RESULTS.glob("split_k*.json"), *RESULTS.glob("chain_k*.json")])
    assert stored, "no committed per-seed results of the split and chain settings"
    results = []
    for path in stored:
        result = load_result(path)
        assert path.name.startswith(result["setting"])
        region = credit_arena.region_name(result["setting"]) + ("_more" if path.stem.endswith("-more") else "")
        body = credit_arena.split_region(result)
        # the region holds the regenerated body (then the learning-curve figure's line)
        assert f"bench:{region}:start -->\n{body}" in text, path.name
        if not path.stem.endswith("-more"):
            results.append(result)
    summary = credit_arena.summary_region(results)
    assert replace_region(text, "credit_arena_split_summary", summary) == text


def _result(seeds_by_method: dict[str, list[int]], config: dict | None = None) -> dict:
    """A stored-result shape with one metric per run (the accuracy: seed / 10, +0.1 for oracle)."""
    def acc(label: str, s: int) -> float:
        return s / 10 + (0.1 if label == "oracle" else 0.0)

    return {"setting": "split_k8", "size": "default", "sizes": (12, 1, 4, 25, 3, 4),
            "config": config or {"steps": 12, "model": {"lora": {"target_modules": ["q_proj", "v_proj"]}}},
            "refused": {}, "machine": "machine A", "command": "cmd",
            "per_seed": {m: {s: {"heldout/team_accuracy": acc(m, s)} for s in seeds}
                         for m, seeds in seeds_by_method.items()},
            "curves": {m: {s: [(0, 0.1), (12, acc(m, s))] for s in seeds} for m, seeds in seeds_by_method.items()},
            "tokens": {m: {s: {12: 100.0 + s} for s in seeds} for m, seeds in seeds_by_method.items()},
            "runs_total": len(seeds_by_method) * 3}


def test_more_seeds_join_the_stored_ones_paired_and_labelled_by_machine(tmp_path):
    from benchmarks.arena_results import machine_summary, merge_results, seeds_held

    stored = load_result(save_result(_result({"grpo": [0, 1, 2], "oracle": [0, 1, 2]}), tmp_path / "a.json"))
    # seed 5 stopped part-way (only grpo finished): it is not added, so every stored seed stays paired
    new = _result({"grpo": [3, 4, 5], "oracle": [3, 4]}, config={"steps": 12, "model": {"lora": {
        "target_modules": ("q_proj", "v_proj")}}})  # a tuple in a fresh config equals its stored JSON list
    merged = load_result(save_result(merge_results(stored, new, "machine B"), tmp_path / "b.json"))
    assert seeds_held(merged) == {0, 1, 2, 3, 4} and sorted(merged["per_seed"]["grpo"]) == [0, 1, 2, 3, 4]
    assert merged["per_seed"]["oracle"][4]["heldout/team_accuracy"] == pytest.approx(0.5)
    assert merged["per_seed"]["grpo"][1] == stored["per_seed"]["grpo"][1]  # stored seeds kept as they were
    # exact: stored values read back unchanged
    assert merged["curves"]["oracle"][3] == [(0, 0.1), (12, pytest.approx(0.4))] and merged["tokens"]["grpo"][4] == {
        12: 104.0}
    assert merged["sizes"][4] == 5 and merged["runs_total"] == 10 and merged["sizes"][:4] == (12, 1, 4, 25)
    assert merged["machines"] == {0: "machine A", 1: "machine A", 2: "machine A", 3: "machine B", 4: "machine B"}
    assert machine_summary(merged) == "seeds 0, 1, 2: machine A; seeds 3, 4: machine B"
    assert machine_summary(stored) == "machine A"
    table = credit_arena.split_markdown(merged)[0]
    assert "| oracle | 5 |" in table and "+0.100 ± 0.000" in table  # every paired difference is +0.1


def test_more_seeds_join_a_stored_file_whatever_order_it_lists_the_methods_in(tmp_path):
    """A stored file lists its methods sorted (JSON with sorted keys); a run lists them in the setting's
    order (chain: grpo, cosac). The same methods are the same comparison."""
    from benchmarks.arena_results import merge_results, seeds_held

    stored = load_result(save_result(_result({"grpo": [0, 1, 2], "cosac": [0, 1, 2]}), tmp_path / "a.json"))
    assert list(stored["per_seed"]) == ["cosac", "grpo"]  # what made the order differ
    merged = merge_results(stored, _result({"grpo": [3, 4], "cosac": [3, 4]}), "machine B")
    assert seeds_held(merged) == {0, 1, 2, 3, 4} and merged["runs_total"] == 10


def test_more_seeds_are_refused_for_another_comparison():
    from benchmarks.arena_results import merge_results

    stored = _result({"grpo": [0, 1, 2], "oracle": [0, 1, 2]})
    with pytest.raises(ValueError, match="config differs"):
        merge_results(stored, _result({"grpo": [3], "oracle": [3]}, config={"steps": 16}), "B")
    with pytest.raises(ValueError, match="another comparison"):
        merge_results(stored, _result({"grpo": [3], "loto": [3]}), "B")
    with pytest.raises(ValueError, match=r"seeds \[2\] are stored already"):
        merge_results(stored, _result({"grpo": [2, 3], "oracle": [2, 3]}), "B")


def test_chain_settings_are_cosacs_sequential_team_with_grpo_and_cosac(tiny_model):
    for setting, k in credit_arena.CHAIN_K.items():
        sizes = credit_arena.sizes_of(setting, "default")
        base = credit_arena.arena_config(setting, tiny_model, sizes)
        assert base["protocol"]["name"] == "sequential" and base["protocol"]["options"]["n_agents"] == k
        assert base["team"]["roles"] == [{"name": "solver", "prompt": credit_arena.SOLVER_PROMPT, "count": k}]
        assert base["task"]["name"] == "arith" and base["eval_task"]["limit"] == 200 and sizes[4] >= 3
        ok, refused = credit_arena.applicable_methods(base, credit_arena.SETTING_METHODS[setting])
        assert list(ok) == ["grpo", "cosac"] and refused == {}


@pytest.mark.slow  # 2 methods x 2 seeds of 2 tiny training steps of a 2-solver chain
def test_chain_quick_path_stores_results_that_give_the_same_table(tiny_model, tmp_path):
    result = credit_arena.run_setting("chain_k2", tiny_model, folder=tmp_path / "arena", sizes=(2, 1, 2, 2, 2, 1))
    assert result["runs_total"] == 4 and sorted(result["per_seed"]["cosac"]) == [0, 1]
    stored = {**result, "command": "python -m benchmarks.credit_arena --setting chain_k2", "machine": "test"}
    again = load_result(save_result(stored, tmp_path / "chain_k2.json"))
    table, notes, headline = credit_arena.split_markdown(again)
    assert (table, notes, headline) == credit_arena.split_markdown(result)
    assert table.splitlines()[3].startswith("| cosac | 2 |")
    assert "Ceiling: none" in notes[1] and headline.startswith("chain_k2: grpo gain")
