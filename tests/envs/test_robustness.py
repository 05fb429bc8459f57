"""Whatever the agents write (empty, random, huge, any Unicode), an episode ends with a reward."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from teamplay.envs.protocols import get_protocol
from teamplay.envs.team_env import TeamEnv
from tests.envs.fakes import ALL_PROTOCOLS, ITEMS, FakeTask, play

ITEM = ITEMS[3]


@pytest.mark.parametrize("name", ALL_PROTOCOLS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(), min_size=1, max_size=8))
def test_any_text_ends_in_a_scored_episode(name, texts):
    env = TeamEnv(FakeTask(), name)
    turns = iter(range(10_000))
    ep = play(env, lambda request: texts[next(turns) % len(texts)], item=ITEM)
    assert ep.reward in (0.0, 1.0)
    # one message per planned turn, every agent recorded, observations in the space throughout
    assert len(ep.messages) == len(env.protocol.schedule(env.team))
    assert set(ep.agent_answers) == set(env.possible_agents)


@pytest.mark.parametrize("name", ALL_PROTOCOLS)
@pytest.mark.parametrize("text", ["", " \n\t", "x" * 1_000_000, "\U0001F600 \u4e03 \u0667", "\x00" * 10,
                                  "lone \ud800 surrogate 7"])
def test_odd_texts_never_crash(name, text):
    env = TeamEnv(FakeTask(), name)
    env.reset(options={"item": ITEM})
    for agent in env.agent_iter():
        obs, _, terminated, truncated, _ = env.last()
        assert env.observation_space(agent).contains(obs)
        env.step(None if terminated or truncated else text)
    ep = env.episode()
    # only the surrogate text carries the right answer "7" (U+0667 is an Arabic-Indic seven, which
    # the fake task extracts as "\u0667", not "7")
    assert ep.reward == (1.0 if text.endswith(" 7") else 0.0)
    # lone surrogates are replaced so every later UTF-8 write works
    assert all("\ud800" not in m.text for m in ep.messages)
    for m in ep.messages:
        m.text.encode("utf-8")


def test_surrogate_is_replaced_not_dropped():
    ep = play(TeamEnv(FakeTask(), "single"), lambda r: "a\ud800b 7", item=ITEM)
    assert ep.messages[0].text == "a\ufffdb 7" and ep.reward == 1.0


def test_invalid_action_types_are_clear_errors():
    env = TeamEnv(FakeTask(), "single")
    env.reset(options={"item": ITEM})
    with pytest.raises(ValueError, match="None is only for terminated agents"):
        env.step(None)
    with pytest.raises(TypeError, match="str or a Generation, got int"):
        env.step(7)
    env.step("7")  # the env is still usable after a refused action
    assert env.episode().reward == 1.0


def test_huge_debate_stays_fast_enough():
    # 3 debaters x 3 rounds of 200k characters each: chats quote megabytes, nothing is quadratic
    env = TeamEnv(FakeTask(), get_protocol("debate", rounds=2))
    ep = play(env, lambda r: "y" * 200_000 + " 7", item=ITEM)
    assert ep.reward == 1.0
