"""``eval_samples``: pass@k and the distinct right solutions of a held-out set played k times with the
training decoding; hand-worked statistics, the run's metrics lines and flattened metrics, the cache
of the untrained team's sampled evaluation, and the refusals."""

from __future__ import annotations

import json

import pytest

from teamplay.config import TrainConfig, build_config
from teamplay.errors import ConfigError
from teamplay.records import Episode, Message
from teamplay.training.experiments.sweep import run_metrics
from teamplay.training.play.evaluation import pass_at_k, sample_metrics, solution_text
from tests.training.test_trainer import make_trainer


def _episode(problem: str, text: str, reward: float) -> Episode:
    return Episode(problem, f"{problem}#eval", ("solver_0",), (Message("solver_0", "solver", 0, "solve", text),),
                   None, reward)


def test_pass_at_k_by_hand():
    # 4 samples, 2 right: pass@2 = 1 - C(2, 2) / C(4, 2) = 1 - 1/6; pass@4 = 1; pass@1 = 2/4
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6, abs=1e-12)
    # exact: 1 - 0/1, 1 - 2/4 and 1 - 1/1: exact
    assert pass_at_k(4, 2, 4) == 1.0 and pass_at_k(4, 2, 1) == 0.5 and pass_at_k(3, 0, 3) == 0.0
    with pytest.raises(ValueError, match="0 <= c <= n and 1 <= k <= n"):
        pass_at_k(3, 4, 2)
    with pytest.raises(ValueError, match="n=3, c=1, k=4"):
        pass_at_k(3, 1, 4)


def test_sample_metrics_by_hand():
    episodes = [
        # problem a: three right samples, two of them the same text up to whitespace; one wrong
        _episode("a", "7 + 5 = 12. The answer is 12.", 1.0), _episode("a", "7 + 5  =  12.\nThe answer is 12.", 1.0),
        _episode("a", "The answer is 12.", 1.0), _episode("a", "The answer is 13.", 0.0),
        # problem b: none right
        *(_episode("b", f"The answer is {n}.", 0.0) for n in (1, 2, 3, 4)),
        # problem c: one right of four
        _episode("c", "The answer is 9.", 1.0), *(_episode("c", "I do not know.", 0.0) for _ in range(3)),
    ]
    assert solution_text(episodes[1]) == solution_text(episodes[0]) == "7 + 5 = 12. The answer is 12."
    m = sample_metrics(episodes)
    # pass@4 per problem: 1, 0, 1 -> 2/3; distinct right texts: 2, 0, 1 -> 1; share over a and c:
    # (2/3 + 1/1) / 2 = 5/6
    assert m["k"] == 4 and m["pass_at_k"] == pytest.approx(2 / 3, abs=1e-12)
    assert m["distinct_correct_texts"] == pytest.approx(1.0, abs=1e-12)
    assert m["distinct_correct_share"] == pytest.approx(5 / 6, abs=1e-12)
    # k is the fewest samples of a problem: a's 4 samples give pass@3 = 1 - C(1, 3) / C(4, 3) = 1
    three = sample_metrics(episodes[:4] + episodes[8:11])
    assert three["k"] == 3 and three["pass_at_k"] == pytest.approx((1.0 + 1.0) / 2, abs=1e-12)
    # no right sample anywhere: no share; one episode of a problem: no sample statistics at all
    assert sample_metrics(episodes[4:8])["distinct_correct_share"] is None
    assert sample_metrics(episodes[:4] + [episodes[8]]) is None


def _rows(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_run_logs_its_sampled_evaluations_and_the_untrained_one_is_cached(tmp_path):
    labels: list[str] = []
    overrides = {"steps": 1, "eval_samples": 3, "eval_cache": str(tmp_path / "cache"),
                 "rollout": {"problems_per_step": 1, "group_size": 2}, "eval_sampling": {"max_new_tokens": 2}}
    trainer = make_trainer(tmp_path / "a", overrides, on_eval=labels.append)
    trainer.eval_items = trainer.items[:2]
    trainer.train()
    assert labels == ["before", "before (sampled)", "after", "after (sampled)"]
    rows = _rows(tmp_path / "a" / "run")
    first, last = rows[0], rows[-1]
    # the greedy evaluation plays each problem once, the sampled one three times
    assert first["heldout"]["episodes"] == 2 and "samples" not in first["heldout"]["extra"]
    assert first["heldout_sampled"]["episodes"] == 6 and first["heldout_sampled"]["extra"]["samples"]["k"] == 3
    assert last["heldout_final"]["episodes"] == 2 and last["heldout_sampled_final"]["episodes"] == 6
    m = run_metrics(tmp_path / "a" / "run")
    after, before = last["heldout_sampled_final"]["extra"]["samples"], first["heldout_sampled"]["extra"]["samples"]
    assert m["heldout_sampled/samples/pass_at_k"] == after["pass_at_k"]  # exact: the logged value, copied
    assert m["heldout_sampled_gain/pass_at_k"] == pytest.approx(after["pass_at_k"] - before["pass_at_k"])
    assert m["heldout_sampled/team_accuracy"] == last["heldout_sampled_final"]["team_accuracy"]
    assert "heldout_sampled/episodes" not in m and "heldout_sampled/seconds" not in m
    # the greedy and the sampled untrained evaluations are two cache entries; a run of another credit
    # method reads both (only the trained team is evaluated), and gets the same before-training line
    assert len(list((tmp_path / "cache").iterdir())) == 2
    labels.clear()
    other = make_trainer(tmp_path / "b", {**overrides, "credit": {"method": "shapley"}}, on_eval=labels.append)
    other.eval_items = other.items[:2]
    other.train()
    assert labels == ["after", "after (sampled)"]
    assert _rows(tmp_path / "b" / "run")[0]["heldout_sampled"] == first["heldout_sampled"]


def test_greedy_samples_are_refused_in_one_line(tmp_path):
    data = {"output_dir": str(tmp_path / "run"), "eval_samples": 4, "rollout": {"group_size": 1},
            "sampling": {"temperature": 0.0}}
    with pytest.raises(ConfigError, match="eval_samples: 4 samples .* are copies of one greedy episode") as info:
        build_config(TrainConfig, data)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="eval_samples"):
        build_config(TrainConfig, {**data, "eval_samples": 1, "sampling": {"temperature": 0.7}})
    assert build_config(TrainConfig, {**data, "sampling": {"temperature": 0.7}}).eval_samples == 4
