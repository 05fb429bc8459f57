"""Smoke tests of the benchmark suite: every benchmark's quickest path on the tiny random model,
and the rewriting of BENCHMARKS.md regions. No figure is asserted: timings belong in the
benchmarks, never in tests."""

from __future__ import annotations

import pytest

from benchmarks import (
    credit_fraction,
    lora_memory,
    rollout_batching,
    rollout_overhead,
    token_credit_step,
    trainer_vs_trl,
)
from benchmarks.__main__ import main
from benchmarks.common import Result, marker, replace_region
from tests.tiny import save_tiny


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(save_tiny(tmp_path_factory.mktemp("tiny") / "model"))


def _check(result: Result, name: str) -> None:
    assert result.name == name
    lines = result.table.splitlines()
    assert lines[0].startswith("| ") and set(lines[1]) <= set("|-")
    assert len(lines) >= 3  # a header, the rule, at least one row
    assert result.headline


def test_rollout_batching_quick(tiny_model):
    result = rollout_batching.run(quick=True, model=tiny_model)
    _check(result, "rollout_batching")
    (comparison,) = result.data["comparisons"]
    # greedy: batching must not change a single token; one lock-step call vs one call per job
    assert comparison["identical"] == comparison["episodes"] == 4
    assert comparison["generate_calls_batched"] == 1 and comparison["generate_calls_sequential"] == 4


def test_prompt_prefix_quick(tiny_model):
    from benchmarks import prompt_prefix

    result = prompt_prefix.run(quick=True, model=tiny_model)
    _check(result, "prompt_prefix")
    (team,) = result.data["teams"].values()
    # greedy: sharing the prefix must not change a token of the 4 held-out episodes
    assert team["problems"] == 4 and team["identical"] == 4 and team["calls"] == 12


def test_rollout_overhead_quick(tiny_model):
    result = rollout_overhead.run(quick=True, model=tiny_model)  # raises if the variants' tokens differ
    _check(result, "rollout_overhead")
    assert result.data["prompts"] == 4


def test_credit_fraction_quick(tiny_model):
    result = credit_fraction.run(quick=True, model=tiny_model)
    _check(result, "credit_fraction")
    gen = result.data["generation"]
    assert gen["episodes"] == 2 and gen["messages"] == 8  # 1 problem x 2 episodes x 4 solvers
    assert set(result.data["fractions"]) == {"shapley_exact_8_agents", "grpo", "gspo", "shapley",
                                             "shapley_prm", "shape_max"}


def test_trainer_vs_trl_quick(tiny_model):
    pytest.importorskip("trl", reason="trainer_vs_trl compares against TRL (pip install 'trl>=1.16')")
    result = trainer_vs_trl.run(quick=True, model=tiny_model)  # raises if the length was not forced
    _check(result, "trainer_vs_trl")
    assert len(result.data["teamplay_step_seconds"]) == len(result.data["trl_step_seconds"]) == 2


@pytest.mark.slow  # four fresh interpreters importing torch: about 20-30 s
def test_lora_memory_quick(tiny_model):
    result = lora_memory.run(quick=True, model=tiny_model)
    _check(result, "lora_memory")
    assert set(result.data["peak_rss_kib"]) == set(lora_memory.MODES)


def test_main_quick_rewrites_only_its_region(tmp_path):
    out = tmp_path / "BENCH.md"
    out.write_text(f"# Title\n\nProse before.\n\n{marker('cosac_bandit', False)}\nold table\n"
                   f"{marker('cosac_bandit', True)}\n\nProse after.\n", encoding="utf-8")
    main(["cosac_bandit", "--quick", "--output", str(out)])
    first = out.read_text(encoding="utf-8")
    assert first.startswith("# Title\n\nProse before.\n\n") and first.endswith("\n\nProse after.\n")
    assert "old table" not in first and "| K | COSAC |" in first
    assert "`python -m benchmarks cosac_bandit --quick`" in first  # the command that made the region
    main(["cosac_bandit", "--quick", "--output", str(out)])
    assert out.read_text(encoding="utf-8") == first  # same seeds, same table: idempotent


def test_main_rejects_unknown_names(capsys):
    with pytest.raises(SystemExit):
        main(["rollout_batchin"])
    assert "unknown benchmark(s) ['rollout_batchin']" in capsys.readouterr().err


def test_replace_region_keeps_prose_and_appends_missing_sections():
    text = f"intro\n{marker('a', False)}\nx\n{marker('a', True)}\noutro\n"
    assert replace_region(text, "a", "new\n") == f"intro\n{marker('a', False)}\nnew\n{marker('a', True)}\noutro\n"
    appended = replace_region("intro\n", "b", "table")
    assert appended == f"intro\n\n## b\n\n{marker('b', False)}\ntable\n{marker('b', True)}\n"


@pytest.mark.parametrize("broken", [
    "{end}\n{start}\n",  # out of order
    "{start}\n{start}\n{end}\n",  # repeated start
    "{start}\nno end\n",  # missing end
])
def test_replace_region_refuses_broken_markers(broken):
    text = broken.format(start=marker("a", False), end=marker("a", True))
    with pytest.raises(ValueError, match="bench:a"):
        replace_region(text, "a", "new")


def test_replay_cost_quick():
    from benchmarks import replay_cost

    result = replay_cost.run(quick=True)
    _check(result, "replay_cost")
    pr = {(d["scheme"], d["k"]): d for d in result.data["rows"] if d["team"] == "pr"}
    # equal-length messages: at k=1 the only replayed turn of proposer/reviewer (3 rounds) is the
    # proposal after a removed review: 1 of 3 rollout turns per episode -> 1/3; from scratch the
    # first proposal is generated again: 2/3. k samples cost k times as much.
    assert pr["exact", 1]["reuse"]["ratio"] == pytest.approx(1 / 3)
    assert pr["exact", 1]["scratch"]["ratio"] == pytest.approx(2 / 3)
    assert pr["exact", 2]["reuse"]["ratio"] == pytest.approx(2 / 3)


def test_token_credit_step_quick(tiny_model):
    result = token_credit_step.run(quick=True, model=tiny_model)
    _check(result, "token_credit_step")
    counts = result.data["token_credit_messages"]
    assert all(n == 0 for n in counts["message-level `grpo`"])  # the baseline really is message-level


@pytest.mark.slow  # 3 methods x 2 seeds of 1 tiny training step: about 30-60 s
def test_credit_arena_quick_path(tiny_model, tmp_path):
    from benchmarks import credit_arena

    # three of the applicable methods (each run trains a tiny model: the smoke test keeps it to 6 runs)
    result = credit_arena.run(model=tiny_model, folder=tmp_path / "arena", sizes=(1, 1, 2, 2, 2),
                              only=("grpo", "shapley (replay)", "cosac"))
    _check(result, "credit_arena")
    assert list(result.data["labels"].values()) == ["grpo", "shapley (replay)", "cosac"]
    # every listed method passes the trainer's checks for both settings (cosac included: reviews
    # are labelled by their verdicts), so none is refused
    assert result.data["refused"] == {}
    for setting in ("controlled", "full"):
        ok, refused = credit_arena.applicable_methods(credit_arena.arena_config(setting, True, tiny_model))
        assert refused == {} and list(ok) == list(credit_arena.ARENA_METHODS)
    for point in result.data["results"]["points"]:
        assert point["seeds"] == [0, 1]
        assert point["metrics"]["heldout/team_accuracy"]["n"] == 2
        m = point["metrics"]
        replay = m.get("budget/replay_tokens", {"values": [0.0, 0.0]})["values"]
        # the budget per seed: rollout tokens plus the counterfactual tokens replays generated
        assert m["budget/generated_tokens"]["values"] == [
            t + r for t, r in zip(m["budget/tokens"]["values"], replay, strict=True)]
        # every run stopped at the shared token budget (or at the step cap, if it came first)
        base = result.data["config"]
        for spent, steps in zip(m["budget/generated_tokens"]["values"], m["budget/steps"]["values"], strict=True):
            assert spent >= base["token_budget"] or steps == base["steps"]
    assert [line.split(" |")[0] for line in result.table.splitlines()[2:]] == ["| grpo", "| shapley (replay)",
                                                                               "| cosac"]


@pytest.mark.slow  # one tiny run of the full setting: about 10-20 s
def test_credit_arena_full_setting_runs_its_message_level_methods(tiny_model, tmp_path):
    from benchmarks import credit_arena

    assert credit_arena.SETTING_METHODS["full"] == credit_arena.MESSAGE_METHODS
    assert not any("token" in label for label in credit_arena.MESSAGE_METHODS)
    assert {"grpo", "shapley (masking)", "shapley (replay)", "continuation", "tracer_roles",
            "cosac"} <= set(credit_arena.MESSAGE_METHODS)
    base = credit_arena.arena_config("full", False, tiny_model)
    assert base["eval_task"]["limit"] >= 200 and base["eval_task"]["distinct"]
    result = credit_arena.run(model=tiny_model, setting="full", folder=tmp_path / "full", sizes=(1, 1, 2, 3, 1),
                              only=("grpo",))
    _check(result, "credit_arena_full")
    (point,) = result.data["results"]["points"]
    assert point["metrics"]["heldout/team_accuracy"]["n"] == 1
    left_out = next(n for n in result.notes if n.startswith("Not in this setting"))
    assert "shapley (replay)" in left_out and "grpo + token aem" in left_out
    with pytest.raises(ValueError, match="unknown arena method.*shapely"):
        credit_arena.run(model=tiny_model, setting="full", folder=tmp_path / "x", only=("shapely",))


def test_credit_fidelity_quick_path(tiny_model, tmp_path):
    from benchmarks import credit_fidelity

    settings = ["noisy teammate q=0.5", "free-riding reviewer"]
    result = credit_fidelity.run(quick=True, model=tiny_model, settings=settings,
                                 methods=["grpo", "continuation", "tracer_roles"], output=tmp_path / "cf")
    assert result.name == "credit_fidelity" and result.headline.startswith("Pearson r")
    by_name = {r["setting"]: r for r in result.data["results"]}
    assert list(by_name) == settings
    noisy, free = by_name["noisy teammate q=0.5"], by_name["free-riding reviewer"]
    assert noisy["oracle"].startswith("closed form") and free["oracle"].startswith("Monte Carlo")
    assert noisy["keep_mismatches"] == 0  # a kept answer scores as the solver's answer did
    # tracer_roles is for proposer/reviewer only: skipped with its reason in the chain
    assert "proposer_reviewer" in noisy["methods"]["tracer_roles"]["skipped"]
    assert "skipped" not in free["methods"]["tracer_roles"]
    for row in (noisy["methods"]["grpo"], free["methods"]["continuation"]):
        assert row["n"] > 0 and row["tokens_per_episode"] >= 0
    # a second run reuses the stored settings (resumable) and gives the same table
    again = credit_fidelity.run(quick=True, model=tiny_model, settings=settings,
                                methods=["grpo", "continuation", "tracer_roles"], output=tmp_path / "cf")
    assert again.table == result.table
