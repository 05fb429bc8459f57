"""Free riders, advantage shading and episode sampling, with hand-worked numbers."""

from __future__ import annotations

import pytest

from teamplay.records import Episode
from teamplay.report.analysis import FREE_RIDER_THRESHOLD, advantage_scale, agent_credit, shade
from teamplay.report.data import LoggedEpisode
from teamplay.report.transcripts import pick_evenly
from tests.report.fake_folders import advantages, episode


def logged(right: bool, advs: list[float] | None, step: int = 1) -> LoggedEpisode:
    return LoggedEpisode(episode=Episode.from_dict(episode(step, 0, right)), step=step,
                         advantages=tuple(advs) if advs is not None else None)


def test_reviewer_with_near_zero_credit_while_team_succeeds_is_a_free_rider() -> None:
    episodes = [logged(True, advantages(True)), logged(False, advantages(False)),
                logged(True, advantages(True))]
    proposer, reviewer = agent_credit(episodes)
    # proposer: right episodes give 0.8, 0.8 per episode -> mean 0.8 over 4 messages;
    # all: (0.8 * 4 - 0.6 * 2) / 6 = (3.2 - 1.2) / 6 = 1/3
    assert (proposer.agent, proposer.role, proposer.episodes, proposer.successes) == ("proposer_0", "proposer", 3, 2)
    assert proposer.messages == 4
    assert proposer.mean_success == pytest.approx(0.8)
    assert proposer.mean_failure == pytest.approx(-0.6)
    assert proposer.mean_all == pytest.approx(1 / 3)
    assert not proposer.free_rider
    # reviewer: 0.01 in both right episodes -> |0.01| < 0.05; all: (0.01 + 0.01 - 0.02) / 3 = 0
    assert reviewer.mean_success == pytest.approx(0.01)
    assert reviewer.mean_failure == pytest.approx(-0.02)
    assert reviewer.mean_all == pytest.approx(0.0)
    assert reviewer.free_rider


def test_threshold_is_strict_and_configurable() -> None:
    episodes = [logged(True, [0.8, FREE_RIDER_THRESHOLD, 0.8])]
    _, reviewer = agent_credit(episodes)
    assert not reviewer.free_rider  # |0.05| < 0.05 is false
    _, reviewer = agent_credit(episodes, threshold=0.06)
    assert reviewer.free_rider
    with pytest.raises(ValueError, match="threshold must be >= 0"):
        agent_credit(episodes, threshold=-1.0)


def test_negative_credit_is_not_free_riding() -> None:
    _, reviewer = agent_credit([logged(True, [0.8, -0.3, 0.8])])
    assert reviewer.mean_success == pytest.approx(-0.3) and not reviewer.free_rider


def test_no_success_means_no_evidence_and_uncredited_episodes_are_ignored() -> None:
    rows = agent_credit([logged(False, advantages(False)), logged(True, None)])
    assert [r.mean_success for r in rows] == [None, None]
    assert [r.mean_failure for r in rows] == pytest.approx([-0.6, -0.02])
    assert not any(r.free_rider for r in rows)
    # only the credited (wrong) episode counts: 1 episode, 0 successes
    assert [(r.episodes, r.successes) for r in rows] == [(1, 0), (1, 0)]
    assert agent_credit([logged(True, None)]) == []


def test_shade_is_diverging_and_scaled_by_the_episode_maximum() -> None:
    assert advantage_scale([0.2, -0.8, 0.5]) == 0.8  # exact: the largest magnitude, copied
    assert advantage_scale(None) == 0.0 and advantage_scale([]) == 0.0  # exact: no values: the constant 0.0
    grey = ("rgba(148, 163, 184, 0.06)", "rgba(148, 163, 184, 0.6)")
    assert shade(0.0, 0.8) == grey and shade(0.5, 0.0) == grey
    # full strength: background 0.06 + 0.36 = 0.42, border 0.35 + 0.65 = 1
    assert shade(0.8, 0.8) == ("rgba(22, 163, 74, 0.420)", "rgba(22, 163, 74, 1.000)")
    # half strength, negative: 0.06 + 0.18 = 0.24; 0.35 + 0.325 = 0.675
    assert shade(-0.4, 0.8) == ("rgba(220, 38, 38, 0.240)", "rgba(220, 38, 38, 0.675)")


def test_pick_evenly_keeps_first_and_last() -> None:
    items = [logged(True, advantages(True), step=s) for s in range(10)]
    # limit 4 over 10: round(i * 9 / 3) for i in 0..3 -> 0, 3, 6, 9
    assert [e.step for e in pick_evenly(items, 4)] == [0, 3, 6, 9]
    assert pick_evenly(items, 10) == items
    with pytest.raises(ValueError, match="limit must be >= 2"):
        pick_evenly(items, 1)
