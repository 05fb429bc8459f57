"""Smoke tests of the benchmark suite: every benchmark's quickest path on the tiny random model,
and the rewriting of BENCHMARKS.md regions. No figure is asserted: timings belong in the
benchmarks, never in tests."""

from __future__ import annotations

import numpy as np
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


def test_rollout_gain_quick(tiny_model):
    from benchmarks import rollout_gain
    from teamplay.agents.backends.hf import HFBackend

    result = rollout_gain.run(quick=True, model=tiny_model)
    _check(result, "rollout_gain")
    assert set(result.data["best"]) == set(rollout_gain.VARIANTS)
    assert all(len(r) == 1 and r[0] > 0 for r in result.data["tokens_per_second"].values())
    assert result.data["resolved_dtypes"]["float32"] == "float32"
    assert HFBackend.dedupe_prompts is True  # the variant's switch does not outlive it


def test_rollout_speed_quick(tiny_model):
    from benchmarks import rollout_speed

    result = rollout_speed.run(quick=True, model=tiny_model)
    _check(result, "rollout_speed")
    # 1 problem x 2 episodes of proposer/reviewer (3 rounds): 3 lock-step calls; 2 dtypes x 2 batches
    assert result.data["episodes"] == 2 and result.data["calls"] == 3
    rates = result.data["tokens_per_second"]
    # runner merged, runner through peft, runner before the sampler and cache, raw peft, raw plain
    assert len(rates) == 20 and all(v > 0 for v in rates.values())
    assert result.data["resolved_dtypes"]["float32"] == "torch.float32"
    # float32 decoding, merged or through peft, and the trainer's forward pass agree on every token
    # (the bound of test_hf_backend)
    assert result.data["fidelity"]["float32"]["merged"]["max_abs_dev"] < 1e-4
    assert result.data["fidelity"]["float32"]["peft"]["max_abs_dev"] < 1e-4


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
    # influence generates nothing: a proposal is read by the reviewer, a review by the proposer, the
    # last proposal by no one: 2 of 3 messages, two queries each; shared rows never exceed them
    cost = pr["influence", None]["influence"]
    assert cost["queries"] == 2 * 2 * cost["messages"] // 3
    assert 0 < cost["rows"] <= cost["queries"]


def test_token_credit_step_quick(tiny_model):
    result = token_credit_step.run(quick=True, model=tiny_model)
    _check(result, "token_credit_step")
    counts = result.data["token_credit_messages"]
    assert all(n == 0 for n in counts["message-level `grpo`"])  # the baseline really is message-level


@pytest.mark.slow  # 2 methods x 2 seeds of 2 tiny training steps: about 30-60 s
def test_credit_arena_quick_path(tiny_model, tmp_path):
    from benchmarks import credit_arena

    # two methods x two paired seeds of the noisy-teammate setting, 2 steps, a curve point per step
    result = credit_arena.run(model=tiny_model, settings=("noisy_q05",), folder=tmp_path / "arena",
                              only=("grpo", "continuation"), sizes=(2, 1, 2, 3, 2, 1))
    assert result.name == "credit_arena" and result.headline.startswith("noisy_q05: grpo gain")
    data = result.data["noisy_q05"]
    assert data["refused"] == {} and data["runs_total"] == 4
    for label in ("grpo", "continuation"):
        assert sorted(data["per_seed"][label]) == [0, 1]  # paired: both methods ran seeds 0 and 1
        for seed, curve in data["curves"][label].items():
            assert [step for step, _ in curve] == [0, 1, 2]  # before, every step, after
            m = data["per_seed"][label][seed]
            # the curve's subset (the first 3 of 3 held-out problems here) is the whole set
            assert curve[-1][1] == pytest.approx(m["heldout/team_accuracy"])
            assert m["heldout_gain/team_accuracy"] == pytest.approx(curve[-1][1] - curve[0][1])
    # the same training episodes for every method; continuation's replays add generated tokens
    grpo, cont = data["per_seed"]["grpo"][0], data["per_seed"]["continuation"][0]
    assert grpo["budget/steps"] == cont["budget/steps"] == 2
    assert grpo["replay_episodes"] == 0 and grpo["budget/generated_tokens"] == grpo["budget/tokens"]
    # (the tiny model may give groups of equal rewards, which need no replay: the identity still holds)
    assert cont["budget/generated_tokens"] == cont["budget/tokens"] + cont.get("budget/replay_tokens", 0.0)
    table = result.table.splitlines()
    assert any(line.startswith("| continuation | 2 |") for line in table)
    assert any(n.startswith("Calibration: grpo's gain") for n in result.notes)
    # the learning-curve figure of the finished runs
    png = credit_arena.figure(data, tmp_path / "curves.png")
    assert png is not None and png.stat().st_size > 1000
    # running again resumes the stored sweep: nothing new is trained, the table is the same
    again = credit_arena.run(model=tiny_model, settings=("noisy_q05",), folder=tmp_path / "arena",
                             only=("grpo", "continuation"), sizes=(2, 1, 2, 3, 2, 1))
    assert again.table == result.table
    # --table-only collects what the folder holds and trains nothing
    held = credit_arena.run_setting("noisy_q05", tiny_model, folder=tmp_path / "arena" / "noisy_q05",
                                    only=("grpo", "continuation"), sizes=(2, 1, 2, 3, 2, 1), train=False)
    assert credit_arena.markdown(held)[0] == result.table.split("\n\n", 1)[1]


def test_credit_arena_settings_and_statistics(tiny_model):
    from benchmarks import credit_arena

    # the stored settings (split, chain, claims) are tested in their own files
    for setting in (s for s in credit_arena.SETTINGS if s not in credit_arena.STORED_SETTINGS):
        base = credit_arena.arena_config(setting, tiny_model, credit_arena.sizes_of(setting, "default"))
        assert base["eval_task"]["limit"] >= 200 and base["eval_task"]["distinct"]
        assert base["eval_every"] and base["steps"] % base["eval_every"] == 0
        assert base["eval_curve_limit"] == 64  # the learning curve's fixed subset
        ok, refused = credit_arena.applicable_methods(base, credit_arena.SETTING_METHODS[setting])
        assert refused == {} and list(ok) == list(credit_arena.SETTING_METHODS[setting])
        assert credit_arena.sizes_of(setting, "default")[4] >= 5  # at least 5 paired seeds
    with pytest.raises(ValueError, match="unknown arena method.*shapely"):
        credit_arena.run_setting("noisy_q0", tiny_model, only=("grpo", "shapely"))
    with pytest.raises(ValueError, match="keep grpo"):
        credit_arena.run_setting("noisy_q0", tiny_model, only=("continuation",))
    # paired differences: seed by seed, over the seeds both hold (hand-worked)
    mean, half, n = credit_arena.paired_difference({0: 0.5, 1: 0.7, 2: 0.9}, {0: 0.4, 1: 0.4, 2: 0.8})
    assert n == 3 and mean == pytest.approx(0.5 / 3)  # differences 0.1, 0.3, 0.1
    # sd of (0.1, 0.3, 0.1) = 0.11547; t(0.975, 2) = 4.3027; half = 4.3027 * 0.11547 / sqrt(3)
    assert half == pytest.approx(4.302653 * 0.1154701 / 3 ** 0.5, rel=1e-5)
    assert credit_arena.curve_area([(0, 0.2), (4, 0.4), (8, 0.4)]) == pytest.approx(0.35)
    assert credit_arena.curve_area([(0, 0.3)]) == pytest.approx(0.3)


def test_credit_arena_pr_is_the_demo_team_and_reports_review_and_speaking(tiny_model):
    from benchmarks import credit_arena

    base = credit_arena.arena_config("pr", tiny_model, credit_arena.sizes_of("pr", "default"))
    assert base["protocol"]["name"] == "proposer_reviewer" and base["controllers"]["enabled"]
    assert [r["name"] for r in base["team"]["roles"]] == ["proposer", "reviewer"]  # both trained
    noisy = credit_arena.arena_config("noisy_q0", tiny_model, credit_arena.sizes_of("noisy_q0", "default"))
    assert "controllers" not in noisy

    # a finished pr result (two seeds per method): review and speak-rate columns, paired differences
    def metrics(acc, speak):
        return {"heldout/team_accuracy": acc, "heldout_gain/team_accuracy": acc - 0.1,
                "heldout/team/verdict_accuracy": 0.5, "heldout/speak_rate/reviewer_0/review": speak}
    result = {"setting": "pr", "sizes": credit_arena.sizes_of("pr", "default"), "refused": {}, "runs_total": 4,
              "per_seed": {"grpo": {0: metrics(0.3, 1.0), 1: metrics(0.4, 1.0)},
                           "cosac": {0: metrics(0.35, 0.5), 1: metrics(0.45, 0.25)}},
              "curves": {"grpo": {0: [(0, 0.1)], 1: [(0, 0.1)]}, "cosac": {0: [(0, 0.1)], 1: [(0, 0.1)]}}}
    table, notes, headline = credit_arena.markdown(result)
    header, _, grpo, cosac = table.splitlines()
    assert "verdict acc." in header and "speaks reviewer_0/review" in header
    cells = [c.strip() for c in cosac.split("|")[1:-1]]
    assert cells[header.split("|")[1:-1].index(" speaks reviewer_0/review ")].startswith("0.38")
    # cosac is 0.05 above grpo on both seeds: a paired difference with zero spread
    assert "+0.050 ± 0.000" in cosac and headline.startswith("pr: grpo gain")


def test_credit_fidelity_quick_path(tiny_model, tmp_path):
    from benchmarks import credit_fidelity

    settings = ["noisy teammate q=0.5", "free-riding reviewer"]
    result = credit_fidelity.run(quick=True, model=tiny_model, settings=settings,
                                 methods=["grpo", "continuation", "tracer_roles", "influence"], output=tmp_path / "cf")
    assert result.name == "credit_fidelity" and result.headline.startswith("Pearson r")
    by_name = {r["setting"]: r for r in result.data["results"]}
    assert list(by_name) == settings
    noisy, free = by_name["noisy teammate q=0.5"], by_name["free-riding reviewer"]
    assert noisy["oracle"].startswith("closed form") and free["oracle"].startswith("Monte Carlo")
    assert noisy["keep_mismatches"] == 0  # a kept answer scores as the solver's answer did
    # tracer_roles is for proposer/reviewer only: skipped with its reason in the chain
    assert "proposer_reviewer" in noisy["methods"]["tracer_roles"]["skipped"]
    assert "skipped" not in free["methods"]["tracer_roles"]
    for row in (noisy["methods"]["grpo"], free["methods"]["continuation"], noisy["methods"]["influence"]):
        assert row["n"] > 0 and row["tokens_per_episode"] >= 0
    # influence scores a listener with the model: none plays the scripted dialogue
    assert "no model" in free["methods"]["influence"]["skipped"]
    # a second run reuses the stored settings (resumable) and gives the same table
    again = credit_fidelity.run(quick=True, model=tiny_model, settings=settings,
                                methods=["grpo", "continuation", "tracer_roles", "influence"], output=tmp_path / "cf")
    assert again.table == result.table


def test_credit_fidelity_share_out_balances_and_keeps_noisy_settings_together():
    from benchmarks import credit_fidelity

    every = list(credit_fidelity.SETTINGS)
    groups = credit_fidelity.share_out(every, 2)
    assert sorted(n for g in groups for n in g) == sorted(s.name for s in every)  # each setting once
    noisy = {s.name for s in every if s.noisy_q is not None}
    assert sum(1 for g in groups if noisy & set(g)) == 1  # one process estimates p for all of them
    cost = [sum(credit_fidelity.COST.get(n, 1.0) for n in g) for g in groups]
    assert len(groups) == 2 and max(cost) - min(cost) <= 2.0
    assert credit_fidelity.share_out(every[-1:], 4) == [[every[-1].name]]  # never an idle worker
    with pytest.raises(SystemExit, match="jobs must be >= 1"):
        credit_fidelity.run(quick=True, settings=[every[-1].name], jobs=0)


def test_credit_fidelity_two_processes_give_the_numbers_of_one(tmp_path):
    from benchmarks import credit_fidelity

    settings = ["helpful reviewer", "free-riding reviewer"]  # scripted: no model to load
    kwargs = dict(quick=True, settings=settings, methods=["grpo", "continuation"])
    one = credit_fidelity.run(**kwargs, output=tmp_path / "one", jobs=1)
    two = credit_fidelity.run(**kwargs, output=tmp_path / "two", jobs=2)
    for a, b in zip(one.data["results"], two.data["results"], strict=True):
        assert a["setting"] == b["setting"]
        for label in ("grpo", "continuation"):
            # exact: the same numpy code on the same scripted episodes, in another process
            assert a["methods"][label]["pearson"] == b["methods"][label]["pearson"]
            assert a["methods"][label]["n"] == b["methods"][label]["n"] > 0


def test_serve_throughput_quick(tiny_model):
    pytest.importorskip("fastapi", reason="serve_throughput needs the serve extra (pip install 'teamplay[serve]')")
    from benchmarks import serve_throughput

    result = serve_throughput.run(quick=True, model=tiny_model)
    _check(result, "serve_throughput")
    data = result.data
    assert data["eval"]["episodes"] == 4
    assert [r["clients"] for r in data["serve"]] == [1, 4]
    assert all(r["requests"] == 4 and r["failures"] == 0 for r in data["serve"])
    one, four = data["serve"]
    # proposer/reviewer, 3 turns an episode: one client's 4 requests in turn take 12 lock-step turns;
    # 4 clients' requests join each other's turns (continuous batching), at least the 3 of one episode
    assert one["turns"] == 12 and 3 <= four["turns"] <= 12


def test_credit_fidelity_on_a_scripted_split_team_ranks_the_oracle_above_broadcast(tmp_path):
    """The additive team with scripted solvers (each right half the time, coins independent): masking
    Shapley gives the oracle's advantages exactly (both c_i / K through the same group rule), and
    both agree with the Monte Carlo A* better than broadcast grpo, pooled and within each group,
    paired on the same resamples. Scripted coins: the same numbers on every machine."""
    from benchmarks import credit_fidelity

    setting = credit_fidelity.Setting(
        "split scripted", {"name": "split", "options": {"n_agents": 4}},
        ({"name": "solver", "policy": "scripted:noisy_proposer(p_right=0.5)", "count": 4},),
        sizes=(4, 4, 16), quick_sizes=(4, 4, 16), extra={"tuple": 4})
    measured = credit_fidelity.measure(setting, quick=True, methods=["grpo", "oracle (additive)", "shapley (masking)",
                                                                     "oracle (spoiler)"])
    assert len(measured["utterances"]["oracle"]) == 4 * 4 * 4  # problems x episodes x solvers, all spoken
    rows = measured["methods"]
    assert "split" in rows["oracle (spoiler)"]["skipped"] or "sequential" in rows["oracle (spoiler)"]["skipped"]
    np.testing.assert_allclose(rows["shapley (masking)"]["advantages"], rows["oracle (additive)"]["advantages"],
                               atol=2e-6)  # both stored to 6 decimals
    stats = credit_fidelity.summarise(measured)["methods"]
    oracle, grpo = stats["oracle (additive)"], stats["grpo"]
    assert oracle["pearson"] > grpo["pearson"] and oracle["within"] > grpo["within"]
    assert oracle["vs_grpo"]["pearson"] == pytest.approx(oracle["pearson"] - grpo["pearson"], abs=1e-12)
    assert oracle["vs_grpo"]["within_ci"][0] > 0  # the paired interval lies above 0
    assert grpo["vs_grpo"] is None


def test_head_scoring_quick():
    from benchmarks import head_scoring

    result = head_scoring.run(quick=True)
    _check(result, "head_scoring")
    for runs in result.data["runs"].values():
        plain, fused = runs["plain"][0], runs["fused"][0]
        # the same inputs (seeded) through both paths: the same log-probs up to float32 rounding
        assert fused["checksum"] == pytest.approx(plain["checksum"], rel=1e-5)
        assert fused["seconds"] > 0 and plain["seconds"] > 0


def test_update_speed_quick(tiny_model):
    from benchmarks import update_speed

    result = update_speed.run(quick=True, model=tiny_model)
    _check(result, "update_speed")
    timed = result.data["float32"]
    assert timed["samples"] >= 1 and set(timed["best"]) == set(update_speed.VARIANTS)
    # the variants run the same update: equal losses up to float summation order (2e-5 as in
    # tests/training/test_update_shared_prompts.py)
    losses = list(timed["loss"].values())
    assert max(losses) - min(losses) <= 2e-5


def test_async_overlap_quick_and_resumable(tiny_model, tmp_path):
    from benchmarks import async_overlap

    result = async_overlap.run(quick=True, model=tiny_model, output=tmp_path)
    _check(result, "async_overlap")
    runs = result.data["runs"]
    assert [(r["max_staleness"], r["seed"]) for r in runs] == [(0, 0), (1, 0)]
    assert all(0 <= r["overlap"] <= 1 and r["steps"] == 2 for r in runs)
    assert runs[0]["overlap"] == 0  # exact: at staleness 0 the generator waits for every update
    # a second invocation reuses every stored run (nothing is measured again)
    stored = sorted(p.name for p in tmp_path.iterdir())
    assert stored == ["staleness0_seed0.json", "staleness1_seed0.json"]
    again = async_overlap.run(quick=True, model=tiny_model, output=tmp_path)
    assert again.data["runs"] == runs
