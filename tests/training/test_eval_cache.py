"""``eval_cache``: the untrained team's held-out evaluation is computed once per distinct setting
and reused, without changing what a run trains."""

from __future__ import annotations

import json

import torch

from teamplay.training.play.evaluation import untrained_eval_key
from tests.training.test_trainer import make_trainer


def _adapters(trainer) -> dict[str, torch.Tensor]:
    return {f"{a}.{i}": p.detach().clone() for a, ps in trainer.learner.params.items() for i, p in enumerate(ps)}


def _with_eval(tmp_path, folder, overrides):
    labels: list[str] = []
    trainer = make_trainer(tmp_path / folder, {"steps": 1, "eval_cache": str(tmp_path / "cache"), **overrides})
    trainer.eval_items = trainer.items[:4]
    trainer.on_eval = labels.append
    return trainer, labels


def test_runs_of_one_setting_evaluate_the_untrained_team_once(tmp_path):
    first, seen_first = _with_eval(tmp_path, "a", {})
    first.train()
    assert seen_first == ["before", "after"]
    assert len(list((tmp_path / "cache").iterdir())) == 1
    # another credit method and learning rate: the same untrained team, read from the cache, and
    # the same training as without a cache (the skipped evaluation moved no random state)
    other, seen_other = _with_eval(tmp_path, "b", {"credit": {"method": "shapley"}, "optim": {"lr": 0.02}})
    other.train()
    assert seen_other == ["after"]
    plain, _ = _with_eval(tmp_path, "c", {"credit": {"method": "shapley"}, "optim": {"lr": 0.02},
                                         "eval_cache": None})
    plain.train()
    a, b = _adapters(other), _adapters(plain)
    # exact: the same training with and without the cache: same ops, same kernels
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    def before(folder):
        rows = [json.loads(line) for line in (tmp_path / folder / "run" / "metrics.jsonl").read_text().splitlines()]
        return next(r["heldout"] for r in rows if r["step"] == 0)

    assert before("b") == before("a")
    assert {k: v for k, v in before("c").items() if k not in ("seconds", "tokens_per_second")} == \
        {k: v for k, v in before("a").items() if k not in ("seconds", "tokens_per_second")}
    # another seed is another untrained evaluation
    seeded, seen_seeded = _with_eval(tmp_path, "d", {"seed": 1})
    seeded.train()
    assert seen_seeded == ["before", "after"] and len(list((tmp_path / "cache").iterdir())) == 2


def test_the_key_ignores_what_cannot_change_an_untrained_team():
    base = {"model": {"name": "m"}, "seed": 0, "eval_task": {"name": "arith"}, "credit": {"method": "grpo"}}
    assert untrained_eval_key(base) == untrained_eval_key({**base, "credit": {"method": "shapley"},
                                                           "optim": {"lr": 1.0}, "steps": 99})
    assert untrained_eval_key(base) != untrained_eval_key({**base, "seed": 1})
    assert untrained_eval_key(base) != untrained_eval_key({**base, "eval_task": {"name": "gsm8k"}})


def test_a_warm_started_team_is_not_the_cold_team():
    # its evaluation "before" the first step is of the fine-tuned adapters: never a cold run's cache entry
    base = {"model": {"name": "m"}, "seed": 0, "eval_task": {"name": "arith"}, "warm_start": None}
    warm = {**base, "warm_start": {"source": "teacher", "steps": 20}}
    assert untrained_eval_key(base) == untrained_eval_key({k: v for k, v in base.items() if k != "warm_start"})
    assert untrained_eval_key(warm) != untrained_eval_key(base)
    assert untrained_eval_key(warm) != untrained_eval_key({**warm, "warm_start": {"source": "teacher", "steps": 40}})
    # what the warm start samples and steps with is part of it; the credit method is not
    assert untrained_eval_key(warm) != untrained_eval_key({**warm, "optim": {"weight_decay": 0.1}})
    assert untrained_eval_key(warm) == untrained_eval_key({**warm, "credit": {"method": "shapley"}})


def test_an_unreadable_cache_entry_is_evaluated_again_with_a_warning(tmp_path):
    import pytest

    from teamplay.errors import TeamplayWarning
    from teamplay.training.play.evaluation import EvalMetrics, cached_untrained_eval

    metrics = EvalMetrics(episodes=4, team_accuracy=0.5, role_accuracy={"solver": 0.5}, any_agent_right=0.5,
                          initial_accuracy=0.5, wrong_to_right=0.0, right_to_wrong=0.0, tokens_per_problem=3.0,
                          calls_per_problem=1.0)
    calls = []

    def compute():
        calls.append(1)
        return metrics

    config = {"seed": 3}
    assert cached_untrained_eval(tmp_path, config, compute) == metrics
    assert cached_untrained_eval(tmp_path, config, compute) == metrics and len(calls) == 1
    (entry,) = tmp_path.iterdir()
    entry.write_text("{half a file")
    with pytest.warns(TeamplayWarning, match="unreadable cached evaluation"):
        assert cached_untrained_eval(tmp_path, config, compute) == metrics
    # exact: the stored metrics, read back
    assert len(calls) == 2 and json.loads(entry.read_text())["team_accuracy"] == 0.5


def test_learning_curve_on_the_first_held_out_problems(tmp_path):
    """``eval_curve_limit``: the intermediate evaluations use the first N problems, and the run logs
    ``heldout_curve`` on those N before training, at every ``eval_every`` step and after training;
    the untrained curve point is cached apart from the whole-set evaluation."""
    trainer, seen = _with_eval(tmp_path, "curve", {"steps": 2, "eval_every": 1, "eval_curve_limit": 2})
    trainer.train()
    assert seen == ["before", "before (curve)", "step 1", "after", "after (curve)"]
    rows = [json.loads(line) for line in (tmp_path / "curve" / "run" / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in rows if r["step"] == 0)
    assert first["heldout"]["episodes"] == 4 and first["heldout_curve"]["episodes"] == 2
    middle = next(r for r in rows if r["step"] == 1 and "reward_mean" in r)
    assert middle["heldout"]["episodes"] == 2 and middle["heldout_curve"] == middle["heldout"]
    last = next(r for r in rows if "heldout_final" in r)
    assert last["step"] == 2 and last["heldout_final"]["episodes"] == 4 and last["heldout_curve"]["episodes"] == 2
    assert len(list((tmp_path / "cache").iterdir())) == 2  # the whole set and the curve's first 2
    again, seen_again = _with_eval(tmp_path, "again", {"steps": 1, "eval_curve_limit": 2, "optim": {"lr": 0.02}})
    again.train()
    assert seen_again == ["after", "after (curve)"]  # both untrained evaluations read from the cache
