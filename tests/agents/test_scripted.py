"""Scripted policies, their answer format against the real task extractors, and the backend registry."""

import dataclasses

import pytest

from teamplay.agents.backends import BACKENDS, get_backend
from teamplay.agents.backends.scripted import ScriptedBackend, format_answer, same_answer, wrong_answer
from teamplay.errors import ConfigError
from teamplay.records import ChatMessage, Message, SamplingParams, TaskItem, TurnRequest

PARAMS = SamplingParams()
ITEM = TaskItem(id="arith/test/0", prompt="What is 7 + 11?", reference="18")


def turn(stage="solve", pending=None, item=ITEM, agent="solver_0", round_=0, chat=None, seed=None):
    metadata = {} if stage == "solve" else {"pending_answer": pending, "pending_agent": "proposer_0"}
    chat = chat or (ChatMessage("system", "sys"), ChatMessage("user", item.prompt if item else "?"),
                    ChatMessage("user", "Answer."))
    return TurnRequest(agent=agent, role=agent.rsplit("_", 1)[0], stage=stage, round=round_, chat=chat,
                       adapter="solver", item=item, metadata=metadata,
                       expects="verdict" if stage in ("review", "check") else "answer", seed=seed)


def say(policy, request, **kwargs):
    return ScriptedBackend(policy, **kwargs).generate([request], PARAMS)[0].text


def test_truthful_answers_and_reviews():
    assert say("truthful", turn()) == "The answer is \\boxed{18}."
    assert say("truthful", turn("review", pending="18")) == "RIGHT"
    assert say("truthful", turn("review", pending="18.0")) == "RIGHT"
    assert say("truthful", turn("review", pending="19")) == "WRONG"
    assert say("truthful", turn("review", pending=None)) == "WRONG"
    # a proposer also sees pending_answer in its metadata: it still answers
    assert say("truthful", turn("propose", pending="19")) == "The answer is \\boxed{18}."


def test_every_verdict_stage_is_judged_not_only_review():
    # a user's protocol may call its verdict stage anything; the request says what is expected
    assert say("truthful", turn("check", pending="18")) == "RIGHT"
    assert say("wrong", turn("check", pending="18")) == "WRONG"
    assert say("truthful", turn("critique", pending="19")) == "The answer is \\boxed{18}."


def test_random_policy_varies_with_the_episode_seed():
    texts = {say("random", turn(seed=s)) for s in range(6)}
    assert len(texts) > 1  # the episodes of a group differ ...
    assert say("random", turn(seed=3)) == say("random", turn(seed=3))  # ... and each reproduces


def test_wrong_and_contrarian():
    assert say("wrong", turn()) == "The answer is \\boxed{19}."
    assert say("wrong", turn("review", pending="18")) == "WRONG"
    assert say("wrong", turn("review", pending="5")) == "RIGHT"
    assert say("contrarian", turn()) == "The answer is \\boxed{19}."
    assert say("contrarian", turn("review", pending="18")) == "WRONG"
    assert say("contrarian", turn("review", pending="5")) == "WRONG"


def test_wrong_answer_differs_from_the_reference():
    assert [wrong_answer(r) for r in ("18", "1,000", "-2.5", "A", "D", "\\frac{1}{2}")] == \
        ["19", "1001", "-1.5", "B", "A", "\\frac{1}{2}+1"]


def test_custom_judge_for_review_verdicts():
    lenient = ScriptedBackend("truthful", is_correct=lambda answer, item: True)
    assert lenient.generate([turn("review", pending="7")], PARAMS)[0].text == "RIGHT"
    assert same_answer(" 18 ", ITEM) and not same_answer("1 8x", ITEM)


def test_echo_random_and_custom_callables():
    chat = (ChatMessage("system", "s"), ChatMessage("user", "problem"),
            ChatMessage("user", "[proposer_0, round 1]: 42"), ChatMessage("user", "Review it."))
    assert say("echo", turn(chat=chat)) == "[proposer_0, round 1]: 42"
    assert say("echo", turn()) == ITEM.prompt
    a = say("random", turn(), seed=1)
    assert a == say("random", turn(), seed=1)
    texts = {say("random", turn(agent=f"solver_{i}"), seed=1) for i in range(5)}
    assert len(texts) == 5  # different agents get different text
    out = ScriptedBackend(lambda r: f"{r.agent}:{r.round}").generate([turn(round_=3)], PARAMS)[0]
    assert out.text == "solver_0:3" and out.adapter == "solver" and out.completion_ids == ()


def test_copier_restates_the_latest_visible_answer_bare_and_silent_answers_nothing():
    seen = (Message("solver_0", "solver", 0, "solve", "7 + 11 = 18, so \\boxed{18}.", answer="18"),
            Message("solver_1", "solver", 0, "solve", "\\boxed{19}", answer="19"),
            Message("solver_2", "solver", 0, "solve", "no idea", answer=None))

    def path(agent="copier_0", transcript=seen, stage="solve"):
        return dataclasses.replace(turn(stage, agent=agent), transcript=transcript)

    assert say("copier", path()) == "The answer is \\boxed{19}."  # the latest answer of any other agent
    assert say("copier(agent=solver_0)", path()) == "The answer is \\boxed{18}."  # its work is not copied
    assert say("copier(agent=solver_0)", path(agent="solver_0")) == "I have no answer."  # never itself
    assert say("copier", path(transcript=())) == "I have no answer."  # a simultaneous round: nothing to copy
    assert say("copier", path(transcript=seen[2:])) == "I have no answer."
    assert say("copier", path(stage="review")) == "RIGHT"
    assert {say("silent", path(stage=s)) for s in ("solve", "review")} == {"I have nothing to add."}
    with pytest.raises(ConfigError, match="copier.*unknown option 'who'; copier takes \\['agent'\\]"):
        ScriptedBackend("copier(who=solver_0)")
    with pytest.raises(ConfigError, match="agent=3 is out of range"):
        ScriptedBackend("copier(agent=3)")


def test_errors():
    with pytest.raises(ConfigError, match="unknown scripted policy 'genius'.*truthful"):
        ScriptedBackend("genius")
    with pytest.raises(ConfigError, match="needs TurnRequest.item"):
        say("truthful", turn(item=None))


@pytest.mark.parametrize(("task_name", "reference"), [
    ("arith", "18"), ("gsm8k", "1000"), ("gsm8k", "-3.5"), ("math", "\\frac{3}{4}"),
    ("math", "2\\sqrt{2}"), ("gpqa", "C"),
])
def test_answer_format_is_parsed_by_every_task(task_name, reference):
    tasks = pytest.importorskip("teamplay.envs.tasks")
    task = tasks.get_task(task_name)
    item = TaskItem(id=f"{task_name}/test/0", prompt="?", reference=reference)
    assert task.score(format_answer(reference), item) == 1.0
    assert task.score(format_answer(wrong_answer(reference)), item) == 0.0


def test_registry():
    assert sorted(BACKENDS) == ["hf", "scripted", "vllm"]
    assert isinstance(get_backend("scripted", policy="echo"), ScriptedBackend)
    with pytest.raises(ConfigError, match=r"backend.name: unknown backend 'tgi'; known: hf, scripted, vllm"):
        get_backend("tgi")
