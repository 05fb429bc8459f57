"""Token-level credit in the trainer: mixed token/message roles in one step, the scalar-equivalent
case, the token statistics pass, and `teamplay train` runs of every token method on a tiny model."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from teamplay.agents.roles import Role, Team
from teamplay.cli import app
from teamplay.credit.token import token_methods
from teamplay.errors import ConfigError
from teamplay.training.learn.token_stats import compute_token_stats
from tests.tiny import save_tiny
from tests.training.fixtures import ConstantTask
from tests.training.test_trainer import LETTERS, make_trainer

TEAM = Team(roles=(Role(name="proposer"), Role(name="reviewer")))


def test_token_method_for_one_role_and_message_credit_for_the_other_in_one_step(tmp_path):
    trainer = make_trainer(tmp_path, {"steps": 1, "log_episodes": 1000, "protocol": {"options": {"rounds": 2}},
                                      "rollout": {"problems_per_step": 2, "group_size": 4},
                                      "credit": {"token": {"method": "dgpo", "options": {"mix": 1.0},
                                                           "roles": ["proposer"]}}},
                           team=TEAM, protocol="proposer_reviewer")
    captured = {}
    real_update = trainer.learner.update

    def spy(samples, step):
        captured["samples"] = samples
        return real_update(samples, step)

    trainer.learner.update = spy  # the update stage's Learner seam
    result = trainer.step()
    metrics = result.metrics
    samples = captured["samples"]
    roles = {s.role for s in samples}
    assert roles == {"proposer", "reviewer"}
    # dgpo is per message: the update applies it from its own forward pass (no statistics pass)
    assert all((s.token_rule is not None) == (s.role == "proposer") and s.token_advantages is None for s in samples)
    checked = 0
    for (ep, adv), rows in zip(result.credited, result.token_advantages, strict=True):
        for t, (msg, row) in enumerate(zip(ep.messages, rows, strict=True)):
            if msg.role == "proposer" and msg.completion_ids:
                assert row is not None and len(row) == len(msg.completion_ids)
                # conservation: the mean token advantage is the message advantage
                assert np.mean(row) == pytest.approx(adv[t], abs=1e-9)
                checked += 1
            else:
                assert row is None
    assert checked == metrics["token_credit_messages"] == sum(s.role == "proposer" for s in samples)
    assert metrics["optimizer_steps"] >= 1 and np.isfinite(metrics["loss"])
    # with mix 1 and a fresh LoRA (B = 0, policy == reference) there is no deviation: uniform tokens
    assert metrics["token_adv_relative_spread"] == pytest.approx(0.0, abs=1e-6)
    logged = [ep for ep in trainer.episode_log(result) if ep.get("token_advantages")]
    assert logged and all(
        (tok is None) == (msg["role"] == "reviewer" or not msg["completion_ids"])
        for ep in logged for msg, tok in zip(ep["messages"], ep["token_advantages"], strict=True))
    tok = trainer.team_model.tokenizer
    for ep in logged:  # the logged pieces (for the report's token shading) rebuild each message's text
        for msg, pieces, advs in zip(ep["messages"], ep["token_pieces"], ep["token_advantages"], strict=True):
            if pieces is not None:
                assert len(pieces) == len(advs) == len(msg["completion_ids"])
                assert "".join(pieces) == tok.decode(msg["completion_ids"], skip_special_tokens=True)


#: 4 groups of 8: with 2 groups of 4 the tiny model's sampled first tokens can leave every reward
#: equal (no update at all, which would make every comparison below vacuous)
STEP_ROLLOUT = {"problems_per_step": 4, "group_size": 8}


def _train_one_step(tmp_path, credit, objective=None):
    overrides = {"steps": 1, "credit": credit, "optim": {"minibatch_size": 64}, "rollout": STEP_ROLLOUT}
    if objective:
        overrides["objective"] = objective
    trainer = make_trainer(tmp_path, overrides)
    before = [p.detach().clone() for p in trainer.team_model.trainable_parameters()]
    trainer.train()
    after = [p.detach().clone() for p in trainer.team_model.trainable_parameters()]
    # exact: asserts a difference: the step did update
    assert not all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    return after


@pytest.mark.parametrize("objective", [None, {"name": "gspo"}])
def test_uniform_token_advantages_update_exactly_like_message_credit(tmp_path, objective):
    # AEM with strength 0 returns the message advantage on every token: the token path ([B, L]
    # advantages, GSPO-token for gspo) must then give the same adapters as the scalar path.
    scalar = _train_one_step(tmp_path / "a", {"method": "grpo"}, objective)
    token = _train_one_step(tmp_path / "b", {"method": "grpo", "token": {"method": "aem",
                                                                          "options": {"strength": 0.0}}},
                            objective)
    moved = _train_one_step(tmp_path / "c", {"method": "grpo", "token": {"method": "aem",
                                                                          "options": {"strength": 4.0}}},
                            objective)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(scalar, token, strict=True))
    assert not all(torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(scalar, moved, strict=True))


def _dgpo_step(tmp_path, resolve_in_update: bool):
    trainer = make_trainer(tmp_path, {"steps": 1, "optim": {"minibatch_size": 64}, "log_episodes": 100,
                                      "rollout": STEP_ROLLOUT,
                                      "credit": {"token": {"method": "dgpo", "options": {"mix": 1.0}}}})
    torch.manual_seed(5)
    with torch.no_grad():  # move the adapter off the reference, so the Hellinger weights are not uniform
        for p in trainer.team_model.trainable_parameters():
            p.add_(0.05 * torch.randn_like(p))
    if not resolve_in_update:
        trainer.tokens.rule = None  # the statistics pass first (the route of a method without a row rule)
    result = trainer.step()
    return result, [p.detach().clone() for p in trainer.team_model.trainable_parameters()]


def test_dgpo_from_the_update_pass_equals_the_statistics_pass(tmp_path):
    # one epoch, one minibatch: the update's forward pass sees the behaviour policy, so the token
    # advantages (and the adapters after the step) must equal those of a separate statistics pass
    in_update, after_a = _dgpo_step(tmp_path / "a", True)
    prepass, after_b = _dgpo_step(tmp_path / "b", False)
    rows_a = [r for rows in in_update.token_advantages for r in rows if r is not None]
    rows_b = [r for rows in prepass.token_advantages for r in rows if r is not None]
    assert len(rows_a) == len(rows_b) > 0
    for a, b in zip(rows_a, rows_b, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    assert in_update.metrics["token_adv_relative_spread"] > 1e-3  # not the uniform case
    assert all(torch.allclose(a, b, atol=1e-6, rtol=0) for a, b in zip(after_a, after_b, strict=True))


def test_token_stats_pass_matches_the_scoring_path(tmp_path):
    trainer = make_trainer(tmp_path, {"steps": 1})
    episodes = trainer.runner.run([__import__("teamplay.training.play.rollout", fromlist=["RolloutJob"]).RolloutJob(
        item=trainer.items[0], group_id="g")], seed=0)
    msgs = [m for m in episodes[0].messages if m.completion_ids]
    stats = compute_token_stats(trainer.team_model, msgs, {"entropies", "ref_logprobs", "hellinger"}, 1.0)
    tm = trainer.team_model
    logp, _ = tm.completion_logprobs([list(m.prompt_ids) for m in msgs], [list(m.completion_ids) for m in msgs],
                                     adapter=msgs[0].adapter, temperature=1.0)
    for k, (m, s) in enumerate(zip(msgs, stats, strict=True)):
        n = len(m.completion_ids)
        np.testing.assert_allclose(s.logprobs, m.logprobs, atol=1e-5)  # behaviour = current policy here
        np.testing.assert_allclose(s.current_logprobs, m.logprobs, atol=1e-4)  # no update since the rollout
        np.testing.assert_allclose(s.ref_logprobs, logp[k, :n].detach().numpy(), atol=1e-5)  # fresh LoRA: policy == ref
        np.testing.assert_allclose(s.hellinger, 0.0, atol=1e-6)  # same distributions
        assert (s.entropies > 0).all() and (s.entropies <= np.log(tm.model.config.vocab_size) + 1e-6).all()
    hint = tm.tokenizer.encode("(The reference answer is q.)\n", add_special_tokens=False)
    teacher = compute_token_stats(tm, msgs, {"teacher_logprobs"}, 1.0, hints=[hint] * len(msgs))
    direct, _ = tm.completion_logprobs([list(m.prompt_ids) + hint for m in msgs],
                                       [list(m.completion_ids) for m in msgs], adapter=msgs[0].adapter)
    for k, (m, s) in enumerate(zip(msgs, teacher, strict=True)):
        np.testing.assert_allclose(s.teacher_logprobs, direct[k, :len(m.completion_ids)].detach().numpy(), atol=1e-5)
    assert not np.allclose(teacher[0].teacher_logprobs, stats[0].logprobs, atol=1e-4)  # the hint changes them
    texts = compute_token_stats(tm, msgs, {"text_offsets"}, 1.0)
    for m, s in zip(msgs, texts, strict=True):
        assert s.entropies is None and s.text == tm.tokenizer.decode(list(m.completion_ids), skip_special_tokens=True)
        assert (np.diff(s.token_ends) >= 0).all() and s.token_ends[-1] == len(s.text)
        # every prefix of tokens decodes to the text up to its end
        j = len(m.completion_ids) // 2
        assert s.text.startswith(tm.tokenizer.decode(list(m.completion_ids[:j + 1]), skip_special_tokens=True)[
            :s.token_ends[j]])


class _CountingModel:
    """Wraps a TeamModel and counts ``completion_logprobs`` calls by adapter (None = reference)."""

    def __init__(self, team_model):
        self.inner = team_model
        self.calls: list[str | None] = []

    def completion_logprobs(self, *args, adapter, **kwargs):
        self.calls.append(adapter)
        return self.inner.completion_logprobs(*args, adapter=adapter, **kwargs)

    def reference_logprobs(self, *args, **kwargs):
        self.calls.append(None)
        return self.inner.reference_logprobs(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_entropies_recorded_at_generation_replace_the_policy_pass(tmp_path):
    # s_trace reads entropies, so the training rollouts ask the backend to record them
    trainer = make_trainer(tmp_path, {"steps": 1, "credit": {"token": {"method": "s_trace"}}})
    from teamplay.training.play.rollout import RolloutJob

    episodes = trainer.runner.run([RolloutJob(item=trainer.items[0], group_id="g")], seed=0)
    msgs = [m for m in episodes[0].messages if m.completion_ids]
    assert msgs and all(len(m.entropies) == len(m.completion_ids) for m in msgs)  # the HF backend records them
    bare = [dataclasses.replace(m, entropies=()) for m in msgs]  # as a backend without entropies sends them
    counting = _CountingModel(trainer.team_model)
    scored = compute_token_stats(counting, bare, {"entropies"}, 1.0)
    assert counting.calls == [msgs[0].adapter]  # one policy pass for the bare messages
    for m, s in zip(msgs, scored, strict=True):  # sampled at T=1, top-p 1: the same distribution
        np.testing.assert_allclose(m.entropies, s.entropies, atol=1e-4)
    counting.calls.clear()
    recorded = compute_token_stats(counting, msgs, {"entropies"}, 1.0)
    assert counting.calls == []  # s_trace / aem-style needs: no model pass at all
    # exact: recorded entropies, copied (no model pass)
    assert all(np.array_equal(s.entropies, m.entropies) for m, s in zip(msgs, recorded, strict=True))
    compute_token_stats(counting, msgs, {"entropies", "ref_logprobs"}, 1.0)
    assert counting.calls == [None]  # ep_grpo: only the reference pass
    counting.calls.clear()
    compute_token_stats(counting, msgs, {"entropies", "hellinger"}, 1.0)
    assert sorted(counting.calls, key=str) == sorted([msgs[0].adapter, None], key=str)  # dgpo: policy + reference


def test_rollouts_record_entropies_only_for_a_method_that_reads_them_from_the_messages(tmp_path):
    from teamplay.training.wiring.sampling import rollout_sampling

    s_trace = make_trainer(tmp_path / "s", {"steps": 1, "credit": {"token": {"method": "s_trace"}}})
    dgpo = make_trainer(tmp_path / "d", {"steps": 1, "credit": {"token": {"method": "dgpo"}}})
    assert s_trace.runner.sampling.entropies  # read from the messages
    assert not dgpo.runner.sampling.entropies  # computed from the update's own forward pass
    # the Ray workers' rollouts too: every learner applies it
    assert not rollout_sampling(dgpo.cfg.sampling, dgpo.cfg.credit.token).entropies
    plain = make_trainer(tmp_path / "g", {"steps": 1}).cfg
    assert not rollout_sampling(plain.sampling, plain.credit.token).entropies


def test_config_refusals(tmp_path):
    with pytest.raises(ConfigError, match="unknown token credit method"):
        make_trainer(tmp_path, {"credit": {"token": {"method": "nope"}}})
    with pytest.raises(ConfigError, match="credit.token.roles: critic is not a role"):
        make_trainer(tmp_path, {"credit": {"token": {"method": "aem", "roles": ["critic"]}}})
    with pytest.raises(ConfigError, match="replaces the KL penalty"):
        make_trainer(tmp_path, {"credit": {"token": {"method": "dgpo"}}, "objective": {"kl_beta": 0.1}})


def _train_via_cli(tmp_path, protocol: dict, credit: dict, group_size: int, steps: int) -> list[dict]:
    """``teamplay train`` of a tiny model on arith; returns the lines of its metrics.jsonl."""
    model = save_tiny(tmp_path / "tiny")
    config = tmp_path / "train.yaml"
    config.write_text(json.dumps({
        "model": {"name": str(model), "lora": {"r": 4, "alpha": 8}},
        "backend": {"max_prompt_tokens": 1024},
        "task": {"name": "arith", "split": "train", "limit": 8},
        "protocol": protocol, "credit": credit,
        "rollout": {"problems_per_step": 2, "group_size": group_size},
        "sampling": {"max_new_tokens": 4, "temperature": 1.0},
        "steps": steps, "checkpoint_every": 5, "tensorboard": False,
        "output_dir": str(tmp_path / "run"),
    }))
    result = CliRunner().invoke(app, ["train", "--config", str(config)])
    assert result.exit_code == 0, result.output
    return [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("method", sorted(token_methods()))
def test_teamplay_train_runs_every_token_method(tmp_path, method):
    lines = _train_via_cli(tmp_path, {"name": "single"}, {"method": "grpo", "token": {"method": method}},
                           group_size=4, steps=2)
    assert [x["step"] for x in lines] == [1, 2]


@pytest.mark.parametrize("zero_variance", [0.0, 0.5])
def test_ep_grpo_progress_signal_trains_on_equal_reward_groups_only_when_asked(tmp_path, zero_variance):
    # every completion scores 1: all groups have zero reward variance, so GRPO has no gradient
    trainer = make_trainer(tmp_path, {"steps": 1, "rollout": {"problems_per_step": 2, "group_size": 4},
                                      "credit": {"token": {"method": "ep_grpo",
                                                           "options": {"zero_variance": zero_variance}}}},
                           task=ConstantTask(LETTERS))
    before = [p.detach().clone() for p in trainer.team_model.trainable_parameters()]
    [metrics] = trainer.train().history
    assert metrics["zero_variance_groups"] == 2
    after = trainer.team_model.trainable_parameters()
    # exact: a weight no update touches keeps its bits
    unchanged = all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    if zero_variance == 0:
        assert metrics["samples"] == 0 and unchanged
    else:
        assert metrics["samples"] == 8 and metrics["token_credit_messages"] == 8
        assert metrics["optimizer_steps"] == 1 and not unchanged


def test_teamplay_train_runs_cal_grpo_on_proposer_reviewer(tmp_path):
    lines = _train_via_cli(tmp_path, {"name": "proposer_reviewer", "options": {"rounds": 2}},
                           {"method": "cal_grpo", "token": {"method": "aem", "roles": ["proposer"]}},
                           group_size=3, steps=1)
    assert len(lines) == 1
