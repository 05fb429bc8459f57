"""UnicodeText: a Text space over all of Unicode that is cheap to build, check and sample."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from teamplay.envs.team_env import N_CHARACTERS, TeamEnv, TextObservation, UnicodeText
from tests.envs.fakes import ITEMS, FakeTask


@given(st.text())
def test_contains_any_decodable_text(text):
    # hypothesis' text() never yields lone surrogates, like a tokenizer's decode
    assert UnicodeText().contains(text)


def test_contains_edges():
    space = UnicodeText()
    assert space.contains("")
    assert space.contains("x" * 1_000_000)
    assert space.contains("\U0001F600 \u00e9 \u4e2d \x00")
    assert not space.contains("bad \ud800 surrogate")
    assert not space.contains(b"bytes")
    assert not space.contains(None)
    assert not UnicodeText(max_length=3).contains("four")
    assert TextObservation("abc").dtype == space.dtype


def test_sample_is_seeded_bounded_and_contained():
    a, b = UnicodeText(seed=7), UnicodeText(seed=7)
    samples = [a.sample() for _ in range(50)]
    assert samples == [b.sample() for _ in range(50)]
    assert all(0 <= len(s) <= 64 and a.contains(s) for s in samples)
    assert len(a.sample(mask=(1000, None))) == 1000


def test_sample_rejects_character_masks():
    import numpy as np

    with pytest.raises(ValueError, match="not supported"):
        UnicodeText().sample(mask=(3, np.ones(3, dtype=np.int8)))


def test_character_index_skips_surrogates():
    space = UnicodeText()
    # 0xD7FF is the last code point before the 2048 surrogates; 0xE000 the first after them
    assert space.character_index("\ud7ff") == 0xD7FF
    assert space.character_index("\ue000") == 0xD800
    assert space.character_index("\U0010ffff") == N_CHARACTERS - 1


def test_equality_and_per_agent_caching():
    assert UnicodeText() == UnicodeText()
    assert UnicodeText() != UnicodeText(max_length=10)
    env = TeamEnv(FakeTask(), "vote", items=ITEMS)
    spaces = [env.action_space(a) for a in env.possible_agents]
    assert all(env.action_space(a) is s for a, s in zip(env.possible_agents, spaces, strict=True))
    # two agents never share one space object: seeding one must not move the other's samples
    assert len({id(s) for s in spaces}) == len(spaces)
    other = TeamEnv(FakeTask(), "vote", items=ITEMS)
    assert other.action_space("solver_0") is not env.action_space("solver_0")
