"""Numbers the report derives from logged episodes: per-agent credit (free riders) and the
colour of an utterance shaded by its advantage.

Both are pure functions of the loaded records, so they are tested with hand-worked numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from teamplay.report.data import LoggedEpisode

FREE_RIDER_THRESHOLD = 0.05
"""An agent is a free rider when the team succeeded in some logged episodes and the mean
advantage of the agent's messages in those episodes has |mean| < this threshold. Advantages of the
built-in credit methods are of order 0.1-1 for a decisive message (group-normalised methods about
±1, Shapley/COSAC in reward units of [0, 1]), so 0.05 means "the credit layer saw no contribution"."""

SUCCESS = 0.5
"""An episode is a team success when its reward is above this (the verifier's right answer)."""


@dataclass(frozen=True)
class AgentCredit:
    """Credit of one agent over the logged (credited) episodes.

    Fields:
        agent, role: the agent instance and its role.
        episodes: logged episodes the agent was part of.
        successes: those of them where the team succeeded (reward > 0.5).
        messages: the agent's messages in the successful episodes (the sample of ``mean_success``).
        mean_success: mean advantage of those messages; None when there are none.
        mean_failure: mean advantage of its messages in the episodes the team got wrong (None if none).
        mean_all: mean advantage of all the agent's messages in every logged episode (None if none).
        free_rider: True when ``mean_success`` is not None and |mean_success| < the threshold.
    """

    agent: str
    role: str
    episodes: int
    successes: int
    messages: int
    mean_success: float | None
    mean_failure: float | None
    mean_all: float | None
    free_rider: bool


def agent_credit(episodes: Sequence[LoggedEpisode], threshold: float = FREE_RIDER_THRESHOLD) -> list[AgentCredit]:
    """Per-agent credit over the credited episodes of ``episodes`` (uncredited ones are ignored).

    Agents are listed in first-seen order. An agent that wrote no message in a successful episode
    (it always skipped, or the team never succeeded) has ``mean_success`` None and is not flagged:
    there is no evidence either way.
    """
    if threshold < 0:
        raise ValueError(f"agent_credit: threshold must be >= 0, got {threshold}")
    order: dict[str, str] = {}
    n_episodes: dict[str, int] = {}
    n_success: dict[str, int] = {}
    adv_success: dict[str, list[float]] = {}
    adv_failure: dict[str, list[float]] = {}
    adv_all: dict[str, list[float]] = {}
    for logged in episodes:
        if logged.advantages is None:
            continue
        ep = logged.episode
        success = ep.reward > SUCCESS
        roles = {m.agent: m.role for m in ep.messages}
        for agent in ep.agents:
            order.setdefault(agent, roles.get(agent, agent.rpartition("_")[0] or agent))
            n_episodes[agent] = n_episodes.get(agent, 0) + 1
            n_success[agent] = n_success.get(agent, 0) + int(success)
        for msg, adv in zip(ep.messages, logged.advantages, strict=True):
            adv_all.setdefault(msg.agent, []).append(adv)
            (adv_success if success else adv_failure).setdefault(msg.agent, []).append(adv)
    rows = []
    for agent, role in order.items():
        mean_success = _mean(adv_success.get(agent, []))
        rows.append(AgentCredit(
            agent=agent, role=role, episodes=n_episodes[agent], successes=n_success[agent],
            messages=len(adv_success.get(agent, [])), mean_success=mean_success,
            mean_failure=_mean(adv_failure.get(agent, [])), mean_all=_mean(adv_all.get(agent, [])),
            free_rider=mean_success is not None and abs(mean_success) < threshold))
    return rows


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


POSITIVE_RGB = (22, 163, 74)   # green: the message was credited with helping
NEGATIVE_RGB = (220, 38, 38)   # red: the message was blamed


def advantage_scale(advantages: Sequence[float] | None) -> float:
    """max |advantage| of an episode (0.0 for none or all-zero): the full-intensity shade."""
    return max((abs(a) for a in advantages or ()), default=0.0)


def shade(advantage: float, scale: float) -> tuple[str, str]:
    """(background, border) CSS colours of a message with ``advantage`` in an episode whose
    largest |advantage| is ``scale``.

    Diverging: green for positive, red for negative, opacity growing linearly with
    |advantage| / scale (background 0.06..0.42, border 0.35..1). A zero advantage, or a zero scale
    (nothing credited), is neutral grey. Only numbers go into the strings: safe to inline in HTML.
    """
    if scale <= 0 or advantage == 0:
        return "rgba(148, 163, 184, 0.06)", "rgba(148, 163, 184, 0.6)"
    strength = min(1.0, abs(advantage) / scale)
    r, g, b = POSITIVE_RGB if advantage > 0 else NEGATIVE_RGB
    return (f"rgba({r}, {g}, {b}, {0.06 + 0.36 * strength:.3f})",
            f"rgba({r}, {g}, {b}, {0.35 + 0.65 * strength:.3f})")
