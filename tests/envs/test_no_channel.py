"""The no-channel arm (``protocol.channel: false``): every message is withheld from the other agents.

With the option, no request of any agent (its chat, its transcript, its metadata) holds another
agent's message text, on every built-in protocol; the recorded transcript, final answer and reward
still use every message; the default (a channel) shows teammates' messages as before (the
equivalence tests pin the default's episodes exactly).
"""

from __future__ import annotations

import pytest

from teamplay.config import ProtocolConfig
from teamplay.envs.tasks import get_task
from teamplay.envs.team_env import TeamEnv
from teamplay.records import TurnRequest
from teamplay.training.wiring.envs import env_factory
from tests.envs.fakes import BUILTINS, ITEMS, FakeTask, play


def marked(request: TurnRequest) -> str:
    """A reply that names its author and turn, and answers right (reviewers say RIGHT first)."""
    mark = f"MARK<{request.agent}@{request.round}>"
    head = "RIGHT\n" if request.stage == "review" else ""
    return f"{head}{mark} The answer is {request.item.reference}."


def leaks(request: TurnRequest, own: str) -> list[str]:
    """Other agents' marks anywhere in what ``request`` shows its agent (``own``)."""
    shown = " ".join([*(m.content for m in request.chat), *(m.text for m in request.transcript),
                      *(str(v) for v in request.metadata.values())])
    return [part.split(">")[0] for part in shown.split("MARK<")[1:] if not part.startswith(f"{own}@")]


def record_requests(env: TeamEnv) -> list[TurnRequest]:
    seen: list[TurnRequest] = []

    def policy(request: TurnRequest) -> str:
        seen.append(request)
        return marked(request)

    play(env, policy, item=ITEMS[1])
    return seen


@pytest.mark.parametrize("protocol", [p for p in BUILTINS if p != "single"])
def test_no_agent_reads_another_agents_message(protocol):
    requests = record_requests(TeamEnv(FakeTask(), protocol, channel=False))
    assert len({r.agent for r in requests}) >= 2
    for r in requests:
        assert leaks(r, r.agent) == [], f"{protocol}: {r.agent} reads {leaks(r, r.agent)}"


@pytest.mark.parametrize("protocol", ["sequential", "proposer_reviewer", "debate"])
def test_with_the_channel_the_same_check_finds_teammates_messages(protocol):
    requests = record_requests(TeamEnv(FakeTask(), protocol))
    assert any(leaks(r, r.agent) for r in requests)  # the check above can fail


def test_own_earlier_messages_stay_visible_without_a_channel():
    requests = record_requests(TeamEnv(FakeTask(), "debate", channel=False))
    later = [r for r in requests if r.round > 0]
    assert later and all(any(f"MARK<{r.agent}@" in m.content for m in r.chat if m.role == "assistant")
                         for r in later)


def test_the_transcript_and_reward_use_every_message():
    env = TeamEnv(FakeTask(), "proposer_reviewer", channel=False)
    episode = play(env, marked, item=ITEMS[2])
    spoken = [m for m in episode.messages if m.spoke]
    assert len({m.agent for m in spoken}) == 2
    assert episode.final_answer == ITEMS[2].reference and episode.reward == 1.0


def test_relay_answerer_sees_no_operand_without_a_channel():
    task = get_task("relay_sum", n_operands=2)
    item = task.load("train", limit=1, seed=0)[0]
    operands = [str(x) for x in item.metadata["operands"]]

    def run(channel: bool) -> TurnRequest:
        make_env, _ = env_factory(task, ProtocolConfig(name="relay", channel=channel), None)
        env = make_env()
        seen: list[TurnRequest] = []

        def policy(request: TurnRequest) -> str:
            seen.append(request)
            return f"My number is {request.item.reference}. The answer is {request.item.reference}."

        play(env, policy, item=item)
        return next(r for r in seen if r.role == "answerer")

    told = " ".join(m.content for m in run(True).chat)
    hidden = run(False)
    assert all(f"My number is {x}." in told for x in operands)
    assert not any(f"My number is {x}." in m.content for x in operands for m in hidden.chat)
    assert hidden.transcript == ()


def test_the_config_field_defaults_to_a_channel():
    assert ProtocolConfig().channel is True
    assert ProtocolConfig(name="relay", channel=False).channel is False
