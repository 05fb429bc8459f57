"""A message cut at max_new_tokens is never graded by a number its cut text happens to hold (unless
the config asks for it), and evaluations count cut messages."""

from __future__ import annotations

import pytest

from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.team_model import TeamModel
from teamplay.config import EvalConfig, TrainConfig, build_config
from teamplay.envs.tasks import ArithTask
from teamplay.envs.team_env import TeamEnv
from teamplay.records import ChatMessage, Generation, Message, SamplingParams, TaskItem, TurnRequest
from teamplay.training.play.evaluation import summarize
from tests.tiny import tiny_model_and_tokenizer

ITEM = TaskItem(id="p", prompt="What is 3 + 11?", reference="14")


def play(text: str, cut: bool, score_cut_messages: bool):
    env = TeamEnv(ArithTask(), "single", items=[ITEM], score_cut_messages=score_cut_messages)
    env.reset(seed=0)
    env.step(Generation(text=text, cut=cut))
    return env.driver.episode()


def test_a_cut_message_is_unscored_where_the_config_says_so():
    # "3. 14 +": the reply was cut while listing steps; its last number is 14, the right answer by chance
    unscored = play("Step 3. 14 +", cut=True, score_cut_messages=False)
    assert unscored.messages[0].cut and unscored.messages[0].answer is None
    assert unscored.final_answer is None and unscored.reward == 0.0
    scored = play("Step 3. 14 +", cut=True, score_cut_messages=True)  # as runs recorded before the option
    assert scored.messages[0].answer == "14" and scored.reward == 1.0
    finished = play("3 + 11 = 14. The answer is 14.", cut=False, score_cut_messages=False)
    assert not finished.messages[0].cut and finished.reward == 1.0


def test_cut_survives_the_episode_log_and_older_logs_read_as_not_cut():
    message = play("Step 3. 14 +", cut=True, score_cut_messages=False).messages[0]
    assert Message.from_dict(message.to_dict()) == message
    older = {key: value for key, value in message.to_dict().items() if key != "cut"}
    assert Message.from_dict(older).cut is False
    assert "cut" not in play("The answer is 14.", cut=False, score_cut_messages=False).messages[0].to_dict()


def test_the_evaluation_reports_the_share_of_cut_messages():
    episodes = [play("Step 3. 14 +", cut=True, score_cut_messages=False),
                play("The answer is 14.", cut=False, score_cut_messages=False),
                play("The answer is 15.", cut=False, score_cut_messages=False)]
    metrics = summarize(episodes, {"p": ITEM}, ArithTask())
    assert metrics.extra["cut_messages"] == pytest.approx(1 / 3, abs=1e-12)
    assert metrics.team_accuracy == pytest.approx(1 / 3, abs=1e-12)


def test_eval_leaves_cut_messages_unscored_by_default_and_training_scores_them():
    assert build_config(EvalConfig, {}).protocol.score_cut_messages is False
    assert build_config(EvalConfig, {"protocol": {"name": "vote"}}).protocol.score_cut_messages is False
    given = build_config(EvalConfig, {"protocol": {"name": "vote", "score_cut_messages": True}})
    assert given.protocol.score_cut_messages is True
    assert build_config(EvalConfig, given.model_dump(mode="json")) == given
    assert build_config(TrainConfig, {"protocol": {"name": "vote"}}).protocol.score_cut_messages is True


def _request() -> TurnRequest:
    return TurnRequest(agent="solver_0", role="solver", stage="solve", round=0, adapter="solver",
                       chat=(ChatMessage("system", "You solve problems."), ChatMessage("user", "What is 3 + 11?")))


def test_the_hf_backend_marks_a_completion_cut_at_the_limit_and_not_one_that_stopped():
    model, tokenizer = tiny_model_and_tokenizer(seed=0)
    backend = HFBackend(TeamModel(model, tokenizer, ("solver",)))
    (limited,) = backend.generate([_request()], SamplingParams(max_new_tokens=4))
    assert len(limited.completion_ids) == 4 and limited.completion_ids[-1] not in backend.stop_ids
    assert limited.cut
    # every token a stop token: generation ends after its first token, at the limit of 1, uncut
    model.generation_config.eos_token_id = list(range(model.config.vocab_size))
    (stopped,) = backend.generate([_request()], SamplingParams(max_new_tokens=1))
    assert len(stopped.completion_ids) == 1 and not stopped.cut
