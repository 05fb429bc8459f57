"""The warm start (``warm_start:``, ``teamplay sft``): teacher episodes, the loss mask, rejection
filtering, the refusal of an untaught role, resume, and SFT-then-RL equal to RL from the saved
adapters. Tiny random model, CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from teamplay.cli import app
from teamplay.config import TrainConfig, build_config
from teamplay.envs.protocols import get_protocol
from teamplay.envs.tasks.catalog.relay_sum import RelaySumTask
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from teamplay.records import SamplingParams
from teamplay.training.learn.losses import SftObjective
from teamplay.training.learn.update import PolicyUpdater
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.play.warm_data import TeacherBackend, passing, sft_samples, stop_token
from teamplay.training.run.trainer import Trainer
from tests.tiny import save_tiny, tiny_train_config
from tests.training.fixtures import tiny_team_model

cli = CliRunner()


def relay_teacher_episodes(team_model, n: int = 3, answer_format: str = "boxed"):
    """``n`` relay (K = 3) episodes of a team of adders, with the tiny model's token ids."""
    task = RelaySumTask(n_operands=2)
    items = task.load("test", limit=n)
    backend = TeacherBackend(team_model.tokenizer, {"informant": "adder", "answerer": "adder"}, 2048,
                             stop_token(team_model), answer_format=answer_format)
    runner = RolloutRunner(lambda: TeamEnv(task, "relay", team=get_protocol("relay").default_team()), backend,
                           SamplingParams())
    return runner.run([RolloutJob(item=item, group_id=f"g{k}") for k, item in enumerate(items)]), items


@pytest.fixture(scope="module")
def relay_model():
    return tiny_team_model(get_protocol("relay").default_team())


def test_teacher_episodes_solve_the_relay_and_carry_the_models_tokens(relay_model):
    episodes, items = relay_teacher_episodes(relay_model)
    tok = relay_model.tokenizer
    assert [ep.reward for ep in episodes] == [1.0, 1.0, 1.0]  # adders: every operand reaches the sum
    for ep, item in zip(episodes, items, strict=True):
        assert ep.final_answer == item.reference
        assert [m.role for m in ep.messages] == ["informant", "informant", "answerer"]
        for m in ep.messages:
            assert m.adapter == m.role and m.prompt_ids and m.completion_ids[-1] == tok.eos_token_id
            assert tok.decode(m.completion_ids[:-1]) == m.text  # the byte-level tokenizer round-trips
            # the prompt is the chat template's rendering of what the agent saw, ending in the reply header
            assert tok.decode(m.prompt_ids).endswith("<|im_start|>assistant\n")
        # the answerer's prompt holds both informants' messages: context, never targets
        answer_prompt = tok.decode(ep.messages[2].prompt_ids)
        assert all(m.text in answer_prompt for m in ep.messages[:2])


def test_plain_teachers_state_the_same_answers_unboxed_and_still_solve_the_relay(relay_model):
    """answer_format plain: the same episodes, each answer sentence without its box (the targets two
    to four tokens shorter), still parsed: the adders' team is still right on every problem."""
    boxed, items = relay_teacher_episodes(relay_model)
    plain, _ = relay_teacher_episodes(relay_model, answer_format="plain")
    tok = relay_model.tokenizer
    assert [ep.reward for ep in plain] == [1.0, 1.0, 1.0]
    for b, p, item in zip(boxed, plain, items, strict=True):
        assert p.final_answer == item.reference
        for mb, mp in zip(b.messages, p.messages, strict=True):
            assert "\\boxed{" in mb.text and "\\boxed" not in mp.text
            assert mp.text == mb.text.replace("\\boxed{", "").replace("}", "")
            assert len(mp.completion_ids) < len(mb.completion_ids)
            assert tok.decode(mp.completion_ids[:-1]) == mp.text


def test_answer_format_is_a_teachers_option_only(tiny_path, tmp_path):
    with pytest.raises(ConfigError, match="warm_start.answer_format: rewrites a teacher's answers"):
        build_config(TrainConfig, relay_config(tiny_path, tmp_path, warm_start={
            "source": "rejection", "answer_format": "plain"}))
    cfg = build_config(TrainConfig, relay_config(tiny_path, tmp_path, warm_start={"answer_format": "plain"}))
    assert cfg.warm_start.answer_format == "plain"


def test_only_the_warm_roles_messages_are_samples(relay_model):
    episodes, _ = relay_teacher_episodes(relay_model)
    samples = sft_samples(episodes, roles=["answerer"], adapters=["informant", "answerer"])
    assert [s.role for s in samples] == ["answerer"] * 3
    assert [s.completion_ids for s in samples] == [ep.messages[2].completion_ids for ep in episodes]
    both = sft_samples(episodes, roles=["informant", "answerer"], adapters=["informant", "answerer"])
    assert len(both) == 9 and all(s.advantage == 1.0 for s in both)


def test_sft_loss_is_the_nll_of_the_role_tokens_only(relay_model, tmp_path):
    """The update's loss on the answerer's messages equals the causal-LM loss with every prompt token
    (the problem, the informants' messages) labelled -100, averaged per message; the informants'
    adapter gets no gradient from it."""
    episodes, _ = relay_teacher_episodes(relay_model)
    samples = sft_samples(episodes, roles=["answerer"], adapters=["informant", "answerer"])
    cfg = build_config(TrainConfig, tiny_train_config(tmp_path / "m", tmp_path / "run", protocol={"name": "relay"}))
    cfg = cfg.model_copy(update={"objective": SftObjective(),
                                 "sampling": cfg.sampling.model_copy(update={"temperature": 1.0})})
    params = {a: relay_model.adapter_parameters(a) for a in ("informant", "answerer")}
    updater = PolicyUpdater(cfg, relay_model, params, torch.optim.SGD([p for ps in params.values() for p in ps], lr=0))
    for p in relay_model.trainable_parameters():
        p.grad = None
    loss, _, _ = updater.loss("answerer", samples, 1.0)
    loss.backward()
    expected = []
    with relay_model.using("answerer"), torch.no_grad():
        for s in samples:
            ids = torch.tensor([list(s.prompt_ids) + list(s.completion_ids)])
            labels = torch.tensor([[-100] * len(s.prompt_ids) + list(s.completion_ids)])
            expected.append(float(relay_model.model(input_ids=ids, labels=labels).loss))
    assert float(loss.detach()) == pytest.approx(sum(expected) / len(expected), rel=1e-5)
    assert all(p.grad is None or not p.grad.any() for p in params["informant"])
    assert any(p.grad is not None and p.grad.any() for p in params["answerer"])


def test_rejection_keeps_the_episodes_at_or_above_the_threshold(relay_model):
    episodes, _ = relay_teacher_episodes(relay_model)
    mixed = [episodes[0], episodes[1].__class__(**{**episodes[1].__dict__, "reward": 0.0}),
             episodes[2].__class__(**{**episodes[2].__dict__, "reward": 0.5})]
    assert passing(mixed, 0.5) == [mixed[0], mixed[2]]
    assert passing(mixed, 1.0) == [mixed[0]]
    assert passing(mixed, 0.0) == mixed


# ------------------------------------------------------------------------------ runs of the tiny model
@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


def relay_config(model: Path, out: Path, **fields) -> dict:
    warm = {"steps": 4, "episodes": 4, "batch_size": 3, "lr": 0.01, "checkpoint_every": 2, "evaluate": False}
    return tiny_train_config(model, out, task_name="relay_sum", steps=2,
                             **{"protocol": {"name": "relay"}, "warm_start": warm, **fields})


def adapters_of(checkpoint: Path) -> dict[str, torch.Tensor]:
    return {f"{a.name}/{k}": v for a in sorted((checkpoint / "adapters").iterdir()) if a.is_dir()
            for k, v in load_file(a / "adapter_model.safetensors").items()}


def latest(folder: Path) -> Path:
    return sorted((folder / "checkpoints").iterdir())[-1]


def test_warm_start_changes_only_the_warm_roles_adapters(tiny_path, tmp_path):
    cfg = build_config(TrainConfig, relay_config(tiny_path, tmp_path / "run"))
    cfg = cfg.model_copy(update={"warm_start": cfg.warm_start.model_copy(update={"roles": ["answerer"]})})
    trainer = Trainer(cfg)
    before = {a: [p.detach().clone() for p in trainer.team_model.adapter_parameters(a)]
              for a in ("informant", "answerer")}
    base = [p.detach().clone() for n, p in trainer.team_model.model.named_parameters() if "lora_" not in n]
    result = trainer.warm_start.run(trainer.items)
    trainer.close()
    assert result.steps == 4 and result.examples == 4  # one answerer message per episode
    after = {a: trainer.team_model.adapter_parameters(a) for a in ("informant", "answerer")}
    untouched = zip(before["informant"], after["informant"], strict=True)
    assert all(torch.equal(b, p) for b, p in untouched)  # exact: an adapter no update touches is bit for bit
    trained = zip(before["answerer"], after["answerer"], strict=True)
    assert any(not torch.equal(b, p) for b, p in trained)  # exact: any change counts: the warm role was updated
    now = [p for n, p in trainer.team_model.model.named_parameters() if "lora_" not in n]
    assert all(torch.equal(b, p) for b, p in zip(base, now, strict=True))  # exact: the frozen base is never written
    lines = [json.loads(x) for x in (tmp_path / "run/warm_start/metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [0, 1, 2, 3, 4]
    assert lines[0]["episodes"] == lines[0]["kept"] == 4 and lines[0]["reward_played"] == 1.0
    assert lines[0]["examples_by_role"] == {"answerer": 4}
    # the loss falls on a set this small at lr 0.01 (a teacher's text is deterministic)
    assert lines[-1]["loss"] < lines[1]["loss"]


def test_teachers_demonstrate_through_the_channel_in_a_no_channel_arm(tiny_path, tmp_path):
    """protocol.channel false withholds messages from the run's own episodes (tested with the
    driver), not from the warm start's teachers: the arm fine-tunes on the demonstrations its channel
    arm fine-tunes on, the same episodes giving the same adapters."""
    for name, channel in (("with", True), ("without", False)):
        config = relay_config(tiny_path, tmp_path / name, protocol={"name": "relay", "channel": channel})
        trainer = Trainer(build_config(TrainConfig, config))
        assert trainer.make_env().driver.channel is channel  # the run's own episodes follow the config
        trainer.warm_start.run(trainer.items)
        trainer.close()
    episodes = {name: (tmp_path / name / "warm_start/episodes.jsonl").read_text() for name in ("with", "without")}
    assert episodes["without"] == episodes["with"]
    # the teachers' answerer read both informants' numbers and was right on every problem
    lines = [json.loads(x) for x in (tmp_path / "without/warm_start/metrics.jsonl").read_text().splitlines()]
    assert lines[0]["reward_played"] == 1.0
    a, b = adapters_of(latest(tmp_path / "with/warm_start")), adapters_of(latest(tmp_path / "without/warm_start"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # exact: same samples, same steps


def test_paused_and_resumed_warm_start_equals_one_straight_run(tiny_path, tmp_path):
    straight = Trainer(build_config(TrainConfig, relay_config(tiny_path, tmp_path / "a")))
    straight.warm_start.run(straight.items)
    straight.close()
    paused = build_config(TrainConfig, relay_config(tiny_path, tmp_path / "b"))
    first = Trainer(paused)
    assert first.warm_start.run(first.items, steps=3).steps == 3  # checkpoint step 3 (a pause), not 4
    first.close()
    second = Trainer(paused)  # a new process would build all of this again
    result = second.warm_start.run(second.items)
    second.close()
    assert result.steps == 4 and result.ran
    a, b = adapters_of(latest(tmp_path / "a/warm_start")), adapters_of(latest(tmp_path / "b/warm_start"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # exact: same seed and operations
    lines = {p: [json.loads(x) for x in (tmp_path / p / "warm_start/metrics.jsonl").read_text().splitlines()]
             for p in ("a", "b")}
    assert lines["a"] == lines["b"]
    again = Trainer(paused)  # finished: nothing runs again, the adapters are loaded
    assert not again.warm_start.run(again.items).ran
    again.close()


def rl_lines(run: Path) -> list[dict]:
    drop = {"seconds", "rollout_seconds", "credit_seconds"}
    return [{k: v for k, v in json.loads(x).items() if k not in drop and not k.endswith("_seconds")}
            for x in (run / "metrics.jsonl").read_text().splitlines()]


def test_sft_then_rl_in_one_run_equals_rl_from_the_saved_sft_adapters(tiny_path, tmp_path):
    one = build_config(TrainConfig, relay_config(tiny_path, tmp_path / "one"))
    Trainer(one).train()
    sft = build_config(TrainConfig, relay_config(tiny_path, tmp_path / "sft"))
    trainer = Trainer(sft)
    trainer.warm_start.run(trainer.items)
    trainer.close()
    config = relay_config(tiny_path, tmp_path / "rl")
    del config["warm_start"]
    config["model"]["checkpoint"] = str(tmp_path / "sft/warm_start")
    Trainer(build_config(TrainConfig, config)).train()
    # the same RL: every metric of every step (timings aside) and every adapter tensor, exactly
    assert rl_lines(tmp_path / "one") == rl_lines(tmp_path / "rl")
    a, b = adapters_of(latest(tmp_path / "one")), adapters_of(latest(tmp_path / "rl"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # exact: same seed and operations
    # the run's report shows the warm start: its loss curve and its set
    from teamplay.report.command import report_command

    page = report_command([tmp_path / "one"], compare=False, output=tmp_path / "report").read_text()
    assert "Warm start before RL" in page and 'id="fig-warm_start_loss"' in page and "<img" in page
    # and the warm start did something: RL from fresh adapters ends elsewhere
    config["model"].pop("checkpoint")
    config["output_dir"] = str(tmp_path / "cold")
    Trainer(build_config(TrainConfig, config)).train()
    cold = adapters_of(latest(tmp_path / "cold"))
    assert any(not torch.equal(a[k], cold[k]) for k in a)  # exact: any change counts: a cold start ends elsewhere


# ------------------------------------------------------------------------------ refusals, one line each
def test_a_role_without_a_teacher_is_refused_at_load(tiny_path, tmp_path):
    with pytest.raises(ConfigError, match="role 'judge' of protocol 'paths' has no teacher"):
        build_config(TrainConfig, tiny_train_config(tiny_path, tmp_path, protocol={"name": "paths"}, warm_start={}))
    # given one, it loads
    build_config(TrainConfig, tiny_train_config(tiny_path, tmp_path, protocol={"name": "paths"},
                                                warm_start={"teachers": {"judge": "truthful"}}))


def one_error(result) -> str:
    """The one ``error:`` line of a failed command (transformers' own weight-loading bar aside)."""
    lines = [line for line in result.output.splitlines() if line.strip() and "Loading weights" not in line]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    return lines[0]


def test_sft_refuses_an_untaught_role_in_one_line(tiny_path, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(tiny_train_config(tiny_path, tmp_path / "run", protocol={"name": "paths"})))
    line = one_error(cli.invoke(app, ["sft", "-c", str(config)]))
    assert "role 'judge' of protocol 'paths' has no teacher" in line
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_rejection_with_nothing_passing_is_one_line(tiny_path, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(json.dumps(relay_config(tiny_path, tmp_path / "run")))
    # the random tiny model never sums two numbers: no episode reaches reward 1
    line = one_error(cli.invoke(app, ["sft", "-c", str(config), "--source", "rejection",
                                      "--set", "warm_start.threshold=1.0"]))
    assert "none of the 4 episodes reached team reward 1" in line


def test_threshold_with_a_teacher_is_refused(tiny_path, tmp_path):
    with pytest.raises(ConfigError, match="warm_start.threshold: filters the team's own episodes"):
        build_config(TrainConfig, relay_config(tiny_path, tmp_path, warm_start={"threshold": 0.5}))


def test_overwrite_deletes_the_warm_start_and_a_warm_start_alone_is_no_run(tmp_path):
    from teamplay.training.store.run_folder import claim_run_folder, holds_run

    (tmp_path / "warm_start/checkpoints/step-000002").mkdir(parents=True)
    assert not holds_run(tmp_path)  # `teamplay sft` first, then `teamplay train` into the same folder
    claim_run_folder(tmp_path, resume=None, overwrite=True).release()
    assert not (tmp_path / "warm_start").exists()


def test_a_scripted_proposer_plays_itself_and_the_reviewer_learns_faithful_verdicts(tmp_path):
    """review with a scripted noisy proposer: the teacher team is that proposer and a truthful reviewer;
    only the reviewer is warm-started, its completions the verdict after review's "Verdict:" prefix."""
    from teamplay.agents.roles import Role, Team
    from teamplay.envs.tasks import get_task
    from teamplay.training.run.warm_start import warm_roles
    from teamplay.training.wiring.checks import check_warm_start

    team = Team(roles=(Role(name="proposer", policy="scripted:noisy_proposer(p_right=0.5)"), Role(name="reviewer")))
    cfg = build_config(TrainConfig, tiny_train_config(tmp_path, tmp_path, protocol={"name": "review"},
                                                      team=team.model_dump(mode="json"), warm_start={}))
    check_warm_start(cfg.warm_start, "review", team)
    assert warm_roles(cfg.warm_start, team) == ["reviewer"]
    with pytest.raises(ConfigError, match="proposer is played by a scripted policy"):
        check_warm_start(cfg.warm_start.model_copy(update={"roles": ["proposer"]}), "review", team)
    model = tiny_team_model(team)
    task = get_task("arith")
    items = task.load("test", limit=8)
    backend = TeacherBackend(model.tokenizer, {"proposer": "noisy_proposer(p_right=0.5)", "reviewer": "truthful"},
                             2048, stop_token(model))
    runner = RolloutRunner(lambda: TeamEnv(task, "review", team=team), backend, SamplingParams())
    episodes = runner.run([RolloutJob(item=item, group_id=f"g{k}") for k, item in enumerate(items)])
    samples = sft_samples(episodes, ["reviewer"], ["reviewer"])
    verdicts = [model.tokenizer.decode(s.completion_ids[:-1]) for s in samples]
    assert set(verdicts) == {" RIGHT", " WRONG"}  # p_right 0.5 on 8 problems: both (seeded, so always)
    for ep in episodes:  # the truthful reviewer is faithful: RIGHT exactly when the proposal is right
        proposal, review = ep.messages[0], next(m for m in ep.messages if m.role == "reviewer")
        right = proposal.answer == items[int(ep.group_id[1:])].reference
        assert review.text == "Verdict: " + ("RIGHT" if right else "WRONG")
        assert proposal.completion_ids == ()  # the scripted proposer writes text only: never a target


def test_a_shared_cache_fine_tunes_once_and_the_runs_equal_runs_without_it(tiny_path, tmp_path):
    """warm_start.cache: the first run fine-tunes and stores its warm start; a run of another credit
    method with the same warm start copies it, and both end exactly as runs without the cache."""
    cache = tmp_path / "warm_cache"

    def config(out: str, method: str, shared: bool) -> TrainConfig:
        raw = relay_config(tiny_path, tmp_path / out, credit={"method": method})
        if shared:
            raw["warm_start"] = {**raw["warm_start"], "cache": str(cache)}
        return build_config(TrainConfig, raw)

    first = Trainer(config("a", "grpo", True))
    assert first.warm_start.run(first.items).ran  # nothing cached yet: it fine-tunes
    first.close()
    assert len(list(cache.iterdir())) == 1  # one finished warm start, no partial copy left
    second = Trainer(config("b", "loto", True))
    taken = second.warm_start.run(second.items)
    second.close()
    assert taken.cached and not taken.ran and taken.steps == 4
    a, b = adapters_of(latest(tmp_path / "a/warm_start")), adapters_of(latest(tmp_path / "b/warm_start"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # exact: the same files
    # whole runs: with the cache (the warm start copied) and without it (fine-tuned again), the same RL
    Trainer(config("c", "loto", True)).train()
    Trainer(config("d", "loto", False)).train()
    assert rl_lines(tmp_path / "c") == rl_lines(tmp_path / "d")
    c, d = adapters_of(latest(tmp_path / "c")), adapters_of(latest(tmp_path / "d"))
    assert all(torch.equal(c[k], d[k]) for k in c)  # exact: same seed and operations
    # another warm start (other steps) is another entry; where the cache lives is not part of the run
    other = build_config(TrainConfig, relay_config(tiny_path, tmp_path / "e", warm_start={
        "steps": 2, "episodes": 4, "batch_size": 3, "lr": 0.01, "checkpoint_every": 2, "evaluate": False,
        "cache": str(cache)}))
    trainer = Trainer(other)
    assert trainer.warm_start.run(trainer.items).ran
    trainer.close()
    assert len(list(cache.iterdir())) == 2
