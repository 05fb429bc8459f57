"""The PettingZoo Parallel API for protocols whose rounds are simultaneous (``vote``, ``debate``).

One ``step(actions)`` plays one round: every agent with a turn in the round acts at once. The
driver plans a simultaneous round whole (every request built from the state before the round), so
feeding the round's actions one by one to the AEC ``TeamEnv`` inside gives exactly the episode the
AEC API gives for the same actions. Agents without a turn in the current round (their turn was
skipped by a speak/skip controller, or their role does not act in it) observe "" and their action,
if any, is not used: PettingZoo callers send one action per live agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
from pettingzoo import ParallelEnv

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import Protocol
from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv, TextObservation
from teamplay.errors import ConfigError
from teamplay.records import Episode, Generation, TaskItem


class TeamParallelEnv(ParallelEnv):
    """Parallel-API view of a ``TeamEnv``; same arguments as ``TeamEnv``.

    Raises ``ConfigError`` when the protocol has a round whose turns depend on each other (then
    only the AEC API fits).
    """

    metadata = {"name": "teamplay_team_parallel_v0", "render_modes": ["ansi", "human"]}

    def __init__(self, task: Task, protocol: Protocol | str, team: Team | None = None,
                 items: Sequence[TaskItem] | None = None, protocol_options: Mapping[str, Any] | None = None,
                 render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"TeamParallelEnv render_mode: {render_mode!r} is not one of "
                              f"{self.metadata['render_modes']} (or None)")
        # the inner env renders to a string only; this env decides whether to print it
        inner_mode = None if render_mode is None else "ansi"
        self._aec = TeamEnv(task, protocol, team, items, protocol_options, inner_mode)
        if not self._aec.protocol.supports_parallel(self._aec.team):
            raise ConfigError(f"protocol {self._aec.protocol.name!r} has rounds whose turns depend on "
                              f"each other; the Parallel API needs simultaneous rounds (e.g. vote, "
                              f"debate); use TeamEnv (AEC) instead")
        self.render_mode = render_mode
        self.possible_agents = list(self._aec.possible_agents)
        self.observation_spaces = self._aec.observation_spaces
        self.action_spaces = self._aec.action_spaces
        self.agents: list[str] = []

    @property
    def team(self) -> Team:
        return self._aec.team

    @property
    def protocol(self) -> Protocol:
        return self._aec.protocol

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict[str, str], dict[str, dict]]:
        """As ``TeamEnv.reset``; returns the first round's observations and infos."""
        self._aec.reset(seed=seed, options=options)
        self.agents = self.possible_agents[:]
        observations, infos = self._round_view()
        return observations, infos

    def step(self, actions: Mapping[str, str | Generation | None]) -> tuple[
            dict[str, str], dict[str, float], dict[str, bool], dict[str, bool], dict[str, dict]]:
        """Play the current round with ``actions`` (one per agent with a turn in it)."""
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset()")
        batch = self._aec.driver.pending_turns()
        missing = [p.turn.agent for p in batch if p.turn.agent not in actions]
        if missing:
            raise ValueError(f"no action for {missing}: every agent with a turn in round "
                             f"{batch[0].turn.round} must act")
        for planned in batch:
            assert self._aec.agent_selection == planned.turn.agent
            self._aec.step(actions[planned.turn.agent])
        live = self.agents
        if self._aec.driver.done:
            result = self._aec.driver.result
            assert result is not None
            observations = dict.fromkeys(live, TextObservation(""))
            rewards = dict.fromkeys(live, result.reward)
            terminations = dict.fromkeys(live, True)
            infos = {a: dict(self._aec.infos[a]) for a in live}
            self.agents = []
        else:
            observations, infos = self._round_view()
            rewards = dict.fromkeys(live, 0.0)
            terminations = dict.fromkeys(live, False)
        if self.render_mode == "human":
            self.render()
        return observations, rewards, terminations, dict.fromkeys(live, False), infos

    def _round_view(self) -> tuple[dict[str, str], dict[str, dict]]:
        observations = dict.fromkeys(self.agents, TextObservation(""))
        infos: dict[str, dict] = {a: {} for a in self.agents}
        for planned in self._aec.driver.pending_turns():
            observations[planned.turn.agent] = TextObservation(planned.observation)
            infos[planned.turn.agent] = {"turn": planned.request}
        return observations, infos

    def episode(self) -> Episode:
        """The finished episode (see ``TeamEnv.episode``)."""
        return self._aec.episode()

    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("TeamParallelEnv.render() called without render_mode; "
                                  "pass render_mode='ansi'")
            return None
        text = self._aec.render()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        self._aec.close()


def parallel_team_env(task: Task, protocol: Protocol | str, team: Team | None = None,
                      items: Sequence[TaskItem] | None = None,
                      protocol_options: Mapping[str, Any] | None = None,
                      render_mode: str | None = None) -> TeamParallelEnv:
    """A ``TeamParallelEnv`` (same arguments as ``TeamEnv``)."""
    return TeamParallelEnv(task, protocol, team, items, protocol_options, render_mode)
