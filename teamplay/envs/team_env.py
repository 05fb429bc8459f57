"""TeamEnv: a team of LLM agents working on one problem, as a PettingZoo AEC environment.

Modelled on PettingZoo's reference ``aec_rps.py``: ``possible_agents``, ``agent_selection``,
per-agent ``rewards/terminations/truncations/infos``, seeding only in ``reset(seed=...)``, one
cached space per agent. The protocol (``teamplay.envs.protocols``) decides the turn order; the
``EpisodeDriver`` runs it; this class adapts it to the AEC API.

Per step, for the selected agent:
    observation   plain-text rendering of its chat ("" for agents without a pending turn), as a
                  ``TextObservation`` (a str with the ``dtype`` PettingZoo's api_test checks)
    infos[agent]  {"turn": TurnRequest}: chat, adapter, item, visible transcript, metadata
    action        str, or Generation (its token ids and log-probs go into the Message record);
                  None only for terminated agents (AEC convention)
Rewards are 0 until the last turn; then every agent gets the team reward
``task.score_answer(final_answer, item)`` in [0, 1], all terminations become True, and
``infos[agent]`` holds the final answer, the agent's own last answer and its score. ``episode()``
returns the ``Episode`` record.

Example::

    env = TeamEnv(task, "proposer_reviewer", items=items)
    env.reset(seed=0)
    for agent in env.agent_iter():
        obs, reward, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else policy(info["turn"]))
    episode = env.episode()
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium
import numpy as np
from gymnasium.spaces import Text
from pettingzoo import AECEnv

from teamplay.agents.roles import Team
from teamplay.envs.protocols.base import Protocol
from teamplay.envs.protocols.driver import SURROGATE, EpisodeDriver, ReplaySpec
from teamplay.envs.protocols.registry import get_protocol
from teamplay.envs.tasks.base import Task
from teamplay.errors import ConfigError
from teamplay.records import Episode, Generation, TaskItem, TurnRequest

# Unicode code points 0..0x10FFFF without the surrogates D800..DFFF: every character a tokenizer
# can decode to (Python never decodes UTF-8 to a lone surrogate).
_SURROGATES = range(0xD800, 0xE000)
N_CHARACTERS = 0x110000 - len(_SURROGATES)


@functools.cache
def _all_characters() -> tuple[str, ...]:
    # built only if someone asks a UnicodeText for its character list (~1.1M entries, ~1 s)
    return tuple(chr(c) for c in range(0x110000) if c not in _SURROGATES)


class UnicodeText(Text):
    """``gymnasium.spaces.Text`` over all of Unicode (surrogates excluded), any length.

    ``Text`` stores its charset as a frozenset, a tuple and an index dict, and checks membership
    character by character: for 1.1M characters that is ~4 s and ~200 MB per space, and spaces are
    per agent per env. This subclass keeps ``Text``'s interface but computes everything from code
    points: ``contains`` is one regex search, ``character_index`` arithmetic, and the full character
    collections are built lazily, once per process, only if asked for.

    ``sample()`` draws a length uniformly in ``[min_length, sample_max_length]`` (default: up to 64
    characters, not up to ``max_length``, which is effectively unbounded) and code points uniformly; pass
    ``mask=(length, None)`` for a given length. Character masks are not supported (a mask over 1.1M
    characters is not a useful way to steer text). Not flattenable to a NumPy array.
    """

    def __init__(self, max_length: int = sys.maxsize, *, min_length: int = 0,
                 sample_max_length: int | None = None,
                 seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length, min_length=min_length, charset="a", seed=seed)
        if sample_max_length is None:
            sample_max_length = max(min_length, min(64, max_length))
        if not min_length <= sample_max_length <= max_length:
            raise ValueError(f"sample_max_length must be in [min_length, max_length] = "
                             f"[{min_length}, {max_length}], got {sample_max_length}")
        self.sample_max_length = int(sample_max_length)

    def contains(self, x: Any) -> bool:
        return (isinstance(x, str) and self.min_length <= len(x) <= self.max_length
                and SURROGATE.search(x) is None)

    def sample(self, mask: tuple[int | None, Any] | None = None,
               probability: tuple[int | None, Any] | None = None) -> str:
        for given, kind in ((mask, "mask"), (probability, "probability")):
            if given is not None and given[1] is not None:
                raise ValueError(f"UnicodeText.sample: character {kind}s are not supported (the charset "
                                 f"has {N_CHARACTERS} characters); pass {kind}=(length, None)")
        length = next((g[0] for g in (mask, probability) if g is not None and g[0] is not None), None)
        if length is None:
            length = int(self.np_random.integers(self.min_length, self.sample_max_length + 1))
        elif not self.min_length <= length <= self.max_length:
            raise ValueError(f"UnicodeText.sample: length {length} outside "
                             f"[{self.min_length}, {self.max_length}]")
        codes = self.np_random.integers(0, N_CHARACTERS, size=length)
        codes = np.where(codes >= _SURROGATES.start, codes + len(_SURROGATES), codes)
        return "".join(map(chr, codes.tolist()))

    def character_index(self, char: str) -> np.int32:
        code = ord(char)
        if code in _SURROGATES:
            raise KeyError(char)
        return np.int32(code - len(_SURROGATES) if code > _SURROGATES.stop - 1 else code)

    @property
    def character_set(self) -> frozenset[str]:
        return _all_character_set()

    @property
    def character_list(self) -> tuple[str, ...]:
        return _all_characters()

    @property
    def characters(self) -> str:
        return "".join(_all_characters())

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __eq__(self, other: object, /) -> bool:
        return (isinstance(other, UnicodeText) and self.min_length == other.min_length
                and self.max_length == other.max_length)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length}, charset=<all Unicode but surrogates>)"


class TextObservation(str):
    """A ``str`` carrying ``dtype``: what ``TeamEnv.observe`` returns.

    PettingZoo's ``api_test`` compares ``observation.dtype`` with ``observation_space.dtype``
    (``np.dtype(str)`` for a ``Text`` space); a plain ``str`` has no ``dtype``. Everything else
    about it is an ordinary string.
    """

    __slots__ = ()
    dtype = np.dtype(str)


@functools.cache
def _all_character_set() -> frozenset[str]:
    return frozenset(_all_characters())


class TeamEnv(AECEnv):
    """A team (roles from ``team``, turn order from ``protocol``) solving items of ``task``.

    Args:
        task: verifier and answer extractor (``Task``).
        protocol: a ``Protocol`` or a name/path for ``get_protocol`` (then ``protocol_options``
            are its options).
        team: the team; None uses the protocol's default team. Validated by the protocol
            (``ConfigError`` naming the role or field).
        items: problems ``reset`` draws from (with the seeded RNG) when not given one.
        protocol_options: options for a protocol given by name/path.
        render_mode: None, ``"ansi"`` (``render()`` returns the transcript) or ``"human"`` (prints it).
        channel: False withholds every message from the other agents (each sees the problem, its
            prompt and its own messages only): the no-channel control arm, see
            ``teamplay.envs.protocols.driver``.
        score_cut_messages: False gives a message cut at ``max_new_tokens`` no answer (unscored).
    """

    metadata = {"name": "teamplay_team_v0", "render_modes": ["ansi", "human"]}

    def __init__(self, task: Task, protocol: Protocol | str, team: Team | None = None,
                 items: Sequence[TaskItem] | None = None, protocol_options: Mapping[str, Any] | None = None,
                 render_mode: str | None = None, channel: bool = True, score_cut_messages: bool = True) -> None:
        super().__init__()
        if not isinstance(task, Task):
            raise ConfigError(f"TeamEnv task: expected a Task (see teamplay.envs.tasks.get_task), "
                              f"got {type(task).__name__}")
        if isinstance(protocol, str):
            protocol = get_protocol(protocol, **dict(protocol_options or {}))
        elif not isinstance(protocol, Protocol):
            raise ConfigError(f"TeamEnv protocol: expected a Protocol or a name/path, got "
                              f"{type(protocol).__name__}")
        elif protocol_options:
            raise ConfigError("TeamEnv protocol_options only apply to a protocol given by name or path; "
                              "pass the options to get_protocol instead")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"TeamEnv render_mode: {render_mode!r} is not one of "
                              f"{self.metadata['render_modes']} (or None)")
        if items is not None:
            items = tuple(items)
            if not items:
                raise ConfigError("TeamEnv items: empty; pass at least one TaskItem or None")
            bad = next((i for i, it in enumerate(items) if not isinstance(it, TaskItem)), None)
            if bad is not None:
                raise ConfigError(f"TeamEnv items[{bad}]: expected a TaskItem, "
                                  f"got {type(items[bad]).__name__}")
        self.task = task
        self.protocol = protocol
        self.team = team if team is not None else protocol.default_team()
        self.items: tuple[TaskItem, ...] | None = items
        self.render_mode = render_mode
        self.driver = EpisodeDriver(protocol, self.team, task, channel=channel, score_cut_messages=score_cut_messages)
        self.possible_agents = list(self.driver.agents)
        # one space object per agent, built once: seeding a space must affect later samples
        self.observation_spaces = {a: UnicodeText() for a in self.possible_agents}
        self.action_spaces = {a: UnicodeText() for a in self.possible_agents}
        self._item_rng: np.random.Generator | None = None
        self._controller_rng: np.random.Generator | None = None
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.action_spaces[agent]

    # ---- episode ----------------------------------------------------------------------------

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Start an episode. ``options`` may hold ``"item"`` (a ``TaskItem``), ``"group_id"``
        (default: the item id) and ``"replay"`` (a ``ReplaySpec``: replay a recorded prefix with
        agents removed, for counterfactual credit). Without an item, one of ``items`` is drawn with the RNG that
        ``seed`` re-seeds (``seed=None`` continues the current streams)."""
        if seed is not None or self._item_rng is None:
            item_seq, controller_seq = np.random.SeedSequence(seed).spawn(2)
            self._item_rng = np.random.default_rng(item_seq)
            self._controller_rng = np.random.default_rng(controller_seq)
        # the episode's seed, handed to every request (seed=None continues: the next episode's)
        self._episode_seed = seed if seed is not None else (
            None if getattr(self, "_episode_seed", None) is None else self._episode_seed + 1)
        options = dict(options or {})
        item = options.pop("item", None)
        group_id = options.pop("group_id", None)
        replay = options.pop("replay", None)
        if replay is not None and not isinstance(replay, ReplaySpec):
            raise ConfigError(f"TeamEnv.reset options['replay']: expected a ReplaySpec, "
                              f"got {type(replay).__name__}")
        if options:
            # PettingZoo's api_test passes {"options": 1}; a typo must still be visible
            warnings.warn(f"TeamEnv.reset: ignoring unknown options {sorted(options)} "
                          f"(known: item, group_id, replay)", stacklevel=2)
        if item is None:
            if self.items is None:
                raise ConfigError("TeamEnv.reset: no problem to play: pass options={'item': TaskItem} "
                                  "or build the env with items=[...]")
            item = self.items[int(self._item_rng.integers(len(self.items)))]
        elif not isinstance(item, TaskItem):
            raise ConfigError(f"TeamEnv.reset options['item']: expected a TaskItem, "
                              f"got {type(item).__name__}")
        if group_id is not None and not isinstance(group_id, str):
            raise ConfigError(f"TeamEnv.reset options['group_id']: expected a str, "
                              f"got {type(group_id).__name__}")

        self.agents = self.possible_agents[:]
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos = {a: {} for a in self.agents}
        self._skip_agent_selection = None
        assert self._controller_rng is not None
        self.driver.start(item, group_id if group_id is not None else item.id, self._controller_rng,
                          seed=self._episode_seed, replay=replay)
        self._after_turn()

    def step(self, action: str | Generation | None) -> None:
        """Record the selected agent's ``action`` (see the module docstring) and move on.

        As in PettingZoo's own environments (its order-enforcing wrapper): a step before the first
        ``reset()`` is an error that says so; a step after every agent has left the finished
        episode is a dead step, with a warning to call ``reset()``; a terminated agent's action
        must be None (``ValueError`` otherwise).
        """
        if self.driver.state is None:
            raise RuntimeError("TeamEnv.step() called before reset(): call reset() to start an episode")
        if not self.agents:
            gymnasium.logger.warn("TeamEnv.step() called after every agent is terminated or truncated; "
                                  "call reset() to start the next episode")
            return
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        self._cumulative_rewards[agent] = 0.0
        self.driver.submit(action)
        self._after_turn()
        if self.render_mode == "human":
            self.render()

    def next_turn(self) -> TurnRequest | None:
        """Step past agents that are done (AEC: ``step(None)``); the selected agent's turn request,
        or None when the episode has ended."""
        while self.agents:
            agent = self.agent_selection
            if self.terminations[agent] or self.truncations[agent]:
                self.step(None)
                continue
            request = self.infos[agent].get("turn")
            if request is None:
                raise RuntimeError(f"env selected {agent} but published no turn request")
            return request
        return None

    def _after_turn(self) -> None:
        """Publish the next pending turn, or the end of the episode, in the AEC dicts."""
        pending = self.driver.pending
        for agent in self.agents:
            self.infos[agent] = {}
        if pending is not None:
            self._clear_rewards()
            self.agent_selection = pending.turn.agent
            self.infos[pending.turn.agent] = {"turn": pending.request}
        else:
            result = self.driver.result
            assert result is not None
            for agent in self.agents:
                self.rewards[agent] = result.reward
                self.terminations[agent] = True
                self.infos[agent] = {"final_answer": result.final_answer, "reward": result.reward,
                                     "answer": result.agent_answers[agent],
                                     "correct": result.agent_correct[agent]}
            self.agent_selection = self.agents[0]
        self._accumulate_rewards()

    def last(self, observe: bool = True):
        """PettingZoo's ``last()``: (observation, reward, termination, truncation, info) of the
        selected agent. Before the first ``reset()`` no agent is selected: an error that says so."""
        if self.driver.state is None:
            raise RuntimeError("TeamEnv.last() called before reset(): call reset() to start an episode")
        return super().last(observe)

    def observe(self, agent: str) -> str:
        """The rendered chat of ``agent``'s pending turn; "" when it has none."""
        pending = self.driver.pending
        if pending is None or pending.turn.agent != agent:
            return TextObservation("")
        return TextObservation(pending.observation)

    def episode(self) -> Episode:
        """The finished episode. Raises ``RuntimeError`` while turns remain."""
        return self.driver.episode()

    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn("TeamEnv.render() called without render_mode; pass render_mode='ansi'")
            return None
        text = render_transcript(self.driver)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        """Nothing to release: the env holds no processes, files or windows."""


def render_transcript(driver: EpisodeDriver) -> str:
    """Human-readable transcript of the current episode (problem, messages, result)."""
    state = driver.state
    if state is None:
        return "(no episode: call reset())"
    lines = [f"problem {state.item.id}: {state.item.prompt}"]
    for m in state.messages:
        said = m.text if m.spoke else "(skipped)"
        lines.append(f"[{m.agent}, round {m.round + 1}, {m.stage}] {said}  -> answer: {m.answer}")
    if driver.result is not None:
        lines.append(f"final answer: {driver.result.final_answer}  reward: {driver.result.reward}")
    return "\n".join(lines)
