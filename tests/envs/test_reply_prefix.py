"""Answer-first replies and the running answer: ``reply_prefix`` reaches every model request of
``sequential`` and ``vote`` (and proposer/reviewer's per-stage prefixes still do), and a chain's
requests carry its current output (the latest link's answer) as ``metadata["pending_answer"]``."""

from __future__ import annotations

import pytest

from teamplay.agents.backends.scripted import ScriptedBackend, format_answer
from teamplay.config import ProtocolConfig
from teamplay.envs.tasks import get_task
from teamplay.records import SamplingParams
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.wiring.envs import env_factory


def _requests(protocol: ProtocolConfig, answer=lambda r: format_answer("7")):
    seen = []

    def policy(request):
        seen.append(request)
        return answer(request)

    task = get_task("arith", level=1, max_operand=10)
    item = task.load("train", limit=1, seed=0)[0]
    make_env, _ = env_factory(task, protocol, None)
    RolloutRunner(make_env, ScriptedBackend(policy), SamplingParams()).run([RolloutJob(item=item, group_id="g")])
    return seen


@pytest.mark.parametrize("name", ["sequential", "vote"])
def test_reply_prefix_reaches_every_request(name: str) -> None:
    seen = _requests(ProtocolConfig(name=name, options={"reply_prefix": "The answer is"}))
    assert len(seen) == 3 and {r.reply_prefix for r in seen} == {"The answer is"}
    assert {r.reply_prefix for r in _requests(ProtocolConfig(name=name))} == {""}


def test_chain_requests_carry_the_running_answer_and_custom_instructions() -> None:
    answers = iter(["The answer is \\boxed{3}.", "no idea", "The answer is \\boxed{5}."])
    seen = _requests(ProtocolConfig(name="sequential", options={"first_instruction": "Give the answer.",
                                                                "next_instruction": "Now you."}),
                     answer=lambda r: next(answers))
    # the running answer is the chain's current output, its latest link's answer: 3 for the second
    # agent, none for the third (the second gave no answer, and a chain's output is its last link)
    assert [r.metadata["pending_answer"] for r in seen] == [None, "3", None]
    assert [r.chat[-1].content for r in seen] == ["Give the answer.", "Now you.", "Now you."]


def test_proposer_reviewer_prefixes_by_stage() -> None:
    seen = _requests(ProtocolConfig(name="proposer_reviewer", options={
        "rounds": 3, "verdict_prefix": "Verdict:", "proposal_prefix": "The answer is"}))
    assert [(r.stage, r.reply_prefix) for r in seen] == [
        ("propose", "The answer is"), ("review", "Verdict:"), ("propose", "The answer is")]


@pytest.mark.parametrize(("name", "option"), [("sequential", "reply_prefix"), ("vote", "reply_prefix"),
                                              ("proposer_reviewer", "proposal_prefix"),
                                              ("proposer_reviewer", "verdict_prefix"),
                                              ("review", "proposal_prefix"), ("review", "verdict_prefix")])
def test_every_reply_prefix_is_the_start_of_one_line(name: str, option: str) -> None:
    # one prefix type (``ReplyPrefix``, the verdict kind on top of it) checks every prefix option alike
    from teamplay.envs.protocols.registry import get_protocol

    options = type(get_protocol(name)).Options
    with pytest.raises(ValueError, match="spans lines; a reply prefix is the start"):
        options(**{option: "Verdict:\nThe answer is"})
    with pytest.raises(ValueError, match="at most 64 characters"):
        options(**{option: "x" * 65})
