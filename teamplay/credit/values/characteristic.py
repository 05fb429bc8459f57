"""Characteristic functions v(S) over the agents of one episode (docs/credit/specification.md#characteristic).

Shapley credit needs a number for every coalition S of agents. Three ways to get one, behind one
interface, :class:`CharacteristicFunction`:

* :class:`VoteCharacteristic`: exact for vote-type protocols (``vote``, ``debate``): ``v(S)`` is the
  verifier score of the plurality answer of the agents in S; ``v(empty) = 0``.
* :class:`MaskingCharacteristic`: no regeneration; messages of agents outside S are replaced by a
  placeholder (headers and order kept) and a :data:`TranscriptScorer` (a verifier on the last
  remaining answer, an :class:`LLMJudge`, ...) scores the masked transcripts in one batched call.
* :class:`ReplayCharacteristic`: asks a replay engine to re-run the episode with only the agents in
  S, k seeds each, and takes the mean (most faithful, one rollout per coalition and seed).

A fourth, masking with a judge that writes the team's answer itself (Parallel Shapley's generative
reward model), is :class:`~teamplay.credit.values.generative_judge.GenerativeJudgeCharacteristic`.

Players are ``episode.agents`` in order; player j is bit j of a coalition mask. Every
implementation caches values by mask, evaluates all uncached coalitions of a ``values`` call in one
batch, and raises ValueError when a value is NaN or outside ``value_range`` (naming the coalition).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike

from teamplay.credit.values.shapley import check_values
from teamplay.records import Episode, Message

DEFAULT_PLACEHOLDER = "[message from {role} withheld]"


@dataclass(frozen=True)
class Transcript:
    """A (possibly masked or truncated) view of an episode's transcript, what scorers receive.

    Fields:
        question: the problem text ("" when the caller has none; verifier scorers ignore it).
        messages: the messages shown, in order, shape [T'] (a prefix for prefix scorers).
        withheld: per message, True when its author is outside the coalition, shape [T'].
        placeholder: text shown instead of a withheld message; ``{role}`` and ``{agent}`` are filled.
    """

    question: str
    messages: tuple[Message, ...]
    withheld: tuple[bool, ...]
    placeholder: str = DEFAULT_PLACEHOLDER

    def __post_init__(self) -> None:
        if len(self.messages) != len(self.withheld):
            raise ValueError(f"transcript: {len(self.messages)} messages but "
                             f"{len(self.withheld)} withheld flags")

    def text_of(self, t: int) -> str:
        m = self.messages[t]
        if self.withheld[t]:
            return self.placeholder.format(role=m.role, agent=m.agent)
        return m.text if m.spoke else "(skipped)"

    def render(self) -> str:
        """One block per message: ``[agent (role), round r]`` header, then its (masked) text."""
        return "\n\n".join(f"[{m.agent} ({m.role}), round {m.round}]\n{self.text_of(t)}"
                           for t, m in enumerate(self.messages))

    def last_answer(self) -> str | None:
        """The answer of the last visible message that has one (``None`` if no visible answer).

        This is the rule of :func:`last_answer_scorer` when the author of the episode's final
        answer is withheld: the team's answer becomes the latest answer still in the transcript.
        """
        for m, hidden in zip(reversed(self.messages), reversed(self.withheld), strict=True):
            if not hidden and m.spoke and m.answer is not None:
                return m.answer
        return None


#: scores a batch of transcripts: ``scorer(transcripts) -> probabilities / scores [len(transcripts)]``
TranscriptScorer = Callable[[Sequence[Transcript]], ArrayLike]


def last_answer_scorer(score_answer: Callable[[str | None], float]) -> TranscriptScorer:
    """A verifier scorer: each transcript scores ``score_answer(transcript.last_answer())``.

    ``score_answer(None)`` must be defined (tasks return 0 for no answer).
    """

    def score(transcripts: Sequence[Transcript]) -> np.ndarray:
        return np.array([score_answer(t.last_answer()) for t in transcripts], dtype=np.float64)

    return score


class CharacteristicFunction(ABC):
    """``v`` over coalitions of ``players``, batched and cached by bitmask.

    The one extension point is :meth:`evaluate`: a subclass implements it for a batch of uncached
    masks (the empty coalition too when ``empty_value`` was given as ``None``, see subclasses), and
    may extend a parent's by calling ``super().evaluate``. Callers use :meth:`values` (or the
    instance as a function), which caches, batches and range-checks what ``evaluate`` returns.
    """

    def __init__(self, players: Sequence[str], value_range: tuple[float, float],
                 empty_value: float | None) -> None:
        if len(players) == 0:
            raise ValueError("a characteristic function needs at least one player")
        lo, hi = value_range
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            raise ValueError(f"value_range must be finite (lo, hi) with lo <= hi, got {value_range}")
        self._players = tuple(players)
        self._range = (float(lo), float(hi))
        self._cache: dict[int, float] = {}
        if empty_value is not None:
            self._cache[0] = float(check_values(np.zeros(1, dtype=np.int64), [empty_value],
                                                len(self._players), self._range, self._players)[0])
        self.calls = 0  # batched evaluate calls made (for cost reporting)

    @property
    def players(self) -> tuple[str, ...]:
        """Agent ids; player j is bit j."""
        return self._players

    @property
    def n_players(self) -> int:
        return len(self._players)

    @property
    def value_range(self) -> tuple[float, float]:
        """Declared ``(lo, hi)`` of every value; Shapley values then lie in ``[lo - hi, hi - lo]``."""
        return self._range

    @property
    def empty_value(self) -> float:
        """``v(empty)``."""
        return float(self.values(np.zeros(1, dtype=np.int64))[0])

    def mask_of(self, agents: Sequence[str]) -> int:
        index = {a: j for j, a in enumerate(self._players)}
        return sum(1 << index[a] for a in agents)

    def coalition(self, mask: int) -> frozenset[str]:
        return frozenset(a for j, a in enumerate(self._players) if (mask >> j) & 1)

    def values(self, masks: ArrayLike) -> np.ndarray:
        """``v`` of each mask, float64 [len(masks)]; uncached masks are evaluated in one batch."""
        m = np.atleast_1d(np.asarray(masks, dtype=np.int64))
        if np.any((m < 0) | (m >= 1 << self.n_players)):
            raise ValueError(f"coalition masks must lie in [0, 2^{self.n_players}), got {m.tolist()}")
        todo = np.array(sorted({int(x) for x in m} - self._cache.keys()), dtype=np.int64)
        if todo.size:
            self.calls += 1
            fresh = check_values(todo, self.evaluate(todo), self.n_players, self._range, self._players)
            self._cache.update(zip(todo.tolist(), fresh.tolist(), strict=True))
        return np.array([self._cache[int(x)] for x in m], dtype=np.float64)

    def table(self) -> np.ndarray:
        """All ``2^n`` values indexed by mask, [2^n]."""
        return self.values(np.arange(1 << self.n_players, dtype=np.int64))

    def __call__(self, mask: int) -> float:
        return float(self.values([mask])[0])

    @abstractmethod
    def evaluate(self, masks: np.ndarray) -> ArrayLike:
        """The hook: values of the given masks ([U] int64, uncached), same order, [U].

        Called by :meth:`values` once per batch of uncached masks; its result is checked there
        (finite, inside ``value_range``) and cached, so an implementation neither caches nor checks.
        """


class VoteCharacteristic(CharacteristicFunction):
    """``v(S) = score_answer(plurality(answers of the agents in S, in team order)))``, ``v(empty) = 0``.

    Uses the one plurality rule of :func:`teamplay.envs.voting.plurality` (``None`` does not vote,
    ties go to the answer voted first in team order, no votes -> ``None``), vectorised over masks:
    a test checks it equals the loop over ``plurality`` on random answer lists. An agent missing from
    ``episode.agent_answers`` has answer ``None`` (a null player). ``score_answer(None)`` is never
    called: no answer scores 0. Each distinct answer is scored once.
    """

    def __init__(self, episode: Episode, score_answer: Callable[[str], float],
                 value_range: tuple[float, float] = (0.0, 1.0)) -> None:
        super().__init__(episode.agents, value_range, empty_value=0.0)
        answers = [episode.agent_answers.get(a) for a in episode.agents]
        self._distinct = list(dict.fromkeys(a for a in answers if a is not None))
        code = {a: c for c, a in enumerate(self._distinct)}
        self._codes = np.array([code[a] if a is not None else -1 for a in answers])  # [n]
        self._score_answer = score_answer
        self._scores: np.ndarray | None = None

    def _answer_scores(self) -> np.ndarray:
        if self._scores is None:
            raw = [self._score_answer(a) for a in self._distinct]
            self._scores = np.append(np.asarray(raw, dtype=np.float64), 0.0)  # last slot: no answer
        return self._scores

    def winners(self, masks: np.ndarray) -> np.ndarray:
        """Index into the distinct answers of each mask's plurality winner, ``-1`` for no votes. [U]"""
        n, k = self.n_players, len(self._distinct)
        bits = ((masks[:, None] >> np.arange(n)) & 1).astype(bool)  # [U, n]
        if k == 0:
            return np.full(len(masks), -1)
        votes = bits[:, None, :] & (self._codes[None, None, :] == np.arange(k)[None, :, None])  # [U, k, n]
        count = votes.sum(axis=2)  # [U, k]
        first = np.where(votes.any(axis=2), votes.argmax(axis=2), n)  # [U, k] earliest voter in S
        key = count * (n + 1) + (n - first)  # more votes first, then the earlier first vote
        best = key.argmax(axis=1)  # [U]
        return np.where(count.max(axis=1) > 0, best, -1)

    def evaluate(self, masks: np.ndarray) -> np.ndarray:
        return self._answer_scores()[self.winners(masks)]  # -1 picks the "no answer" slot (0.0)


class MaskingCharacteristic(CharacteristicFunction):
    """``v(S)`` = scorer on the transcript with the messages of agents outside S withheld.

    Withheld messages keep their header (agent, role, round) and position; their text becomes
    ``placeholder`` (default ``"[message from <role> withheld]"``). All uncached coalitions of a
    ``values`` call go to ``scorer`` in one batch.

    When the author of the final answer is outside S, the transcript no longer contains that
    answer: the scorer decides what the team answered from what remains. With
    :func:`last_answer_scorer` it is the last visible answer (none -> 0); an :class:`LLMJudge`
    judges whether the remaining transcript reaches a correct answer.

    ``empty_value``: ``None`` (default) scores the fully withheld transcript (the "question only"
    score); a number fixes ``v(empty)`` (e.g. 0).
    """

    def __init__(self, episode: Episode, scorer: TranscriptScorer, question: str = "",
                 placeholder: str = DEFAULT_PLACEHOLDER, empty_value: float | None = None,
                 value_range: tuple[float, float] = (0.0, 1.0)) -> None:
        super().__init__(episode.agents, value_range, empty_value)
        self.episode = episode
        self.question = question
        self.placeholder = placeholder
        self._scorer = scorer

    def transcript(self, mask: int) -> Transcript:
        kept = self.coalition(mask)
        return Transcript(self.question, self.episode.messages,
                          tuple(m.agent not in kept for m in self.episode.messages), self.placeholder)

    def evaluate(self, masks: np.ndarray) -> ArrayLike:
        return self._scorer([self.transcript(int(m)) for m in masks])


class ReplayCharacteristic(CharacteristicFunction):
    """``v(S)`` = mean over k seeds of a replay of the episode with only the agents in S (§4.5 (1)).

    Give exactly one of:

    * ``replay(episode, kept_agents) -> scores``: one coalition per call;
    * ``replay_many(episode, [kept_agents, ...]) -> [scores, ...]``: every uncached coalition of a
      ``values`` call at once (what a batched replay engine wants).

    Scores are one verifier score per seed (a non-empty list). ``v(empty) = empty_value`` (default
    0: no agents, no answer). The spread over seeds is kept: :attr:`noise` is the mean standard
    deviation over evaluated coalitions, the evaluator noise to compare Shapley differences against.
    """

    def __init__(self, episode: Episode,
                 replay: Callable[[Episode, frozenset[str]], Sequence[float]] | None = None,
                 empty_value: float = 0.0, value_range: tuple[float, float] = (0.0, 1.0), *,
                 replay_many: Callable[[Episode, Sequence[frozenset[str]]], Sequence[Sequence[float]]]
                 | None = None) -> None:
        if (replay is None) == (replay_many is None):
            raise ValueError("ReplayCharacteristic needs exactly one of replay= and replay_many=")
        super().__init__(episode.agents, value_range, empty_value)
        self.episode = episode
        self._replay = replay
        self._replay_many = replay_many
        self._stds: list[float] = []

    def evaluate(self, masks: np.ndarray) -> np.ndarray:
        kept = [self.coalition(int(m)) for m in masks]
        if self._replay_many is not None:
            results = list(self._replay_many(self.episode, kept))
            if len(results) != len(kept):
                raise ValueError(f"replay_many returned {len(results)} results for {len(kept)} coalitions")
        else:
            assert self._replay is not None
            results = [self._replay(self.episode, k) for k in kept]
        out = np.empty(len(masks))
        for k, (m, s) in enumerate(zip(masks, results, strict=True)):
            scores = np.asarray(s, dtype=np.float64)
            if scores.ndim != 1 or scores.size == 0:
                raise ValueError(f"replay of coalition {sorted(kept[k])} returned {scores.shape} scores; "
                                 "it must return one score per seed (at least one)")
            out[k] = check_values(np.array([m]), [scores.mean()], self.n_players, self.value_range,
                                  self.players)[0]
            self._stds.append(float(scores.std()))
        return out

    @property
    def noise(self) -> float:
        """Mean std over seeds of the coalitions evaluated so far (0.0 before any replay)."""
        return float(np.mean(self._stds)) if self._stds else 0.0


@runtime_checkable
class YesProbabilityModel(Protocol):
    """What an LLM judge needs from a model: P("yes") as the next token for each prompt.

    The hf generation backend implements it (one forward pass per batch, softmax over the
    vocabulary at the last prompt position, probability of the tokenizer's "yes"/" yes" tokens,
    renormalised against "no"); tests use a fake.
    """

    def yes_probability(self, prompts: Sequence[str]) -> np.ndarray: ...


DEFAULT_JUDGE_TEMPLATE = (
    "Question:\n{question}\n\nTeam transcript:\n{transcript}\n\n"
    "Does this transcript reach a correct final answer to the question? Answer yes or no."
)


class LLMJudge:
    """A :data:`TranscriptScorer` backed by an LLM: ``P(yes)`` that the transcript reaches a correct answer.

    ``template`` is formatted with ``question`` and ``transcript`` (the rendered, masked transcript).
    Deterministic given a deterministic model (one forward pass, no sampling). Probabilities
    outside [0, 1] or NaN from the model raise ValueError.
    """

    def __init__(self, model: YesProbabilityModel, template: str = DEFAULT_JUDGE_TEMPLATE) -> None:
        if "{transcript}" not in template:
            raise ValueError("judge template must contain the field {transcript}")
        self.model = model
        self.template = template

    def prompts(self, transcripts: Sequence[Transcript]) -> list[str]:
        return [self.template.format(question=t.question, transcript=t.render()) for t in transcripts]

    def __call__(self, transcripts: Sequence[Transcript]) -> np.ndarray:
        if not transcripts:
            return np.zeros(0)
        probs = np.asarray(self.model.yes_probability(self.prompts(transcripts)), dtype=np.float64)
        if probs.shape != (len(transcripts),):
            raise ValueError(f"yes_probability returned shape {probs.shape} for {len(transcripts)} prompts")
        bad = np.flatnonzero(~((probs >= 0) & (probs <= 1)))
        if bad.size:
            raise ValueError(f"yes_probability returned {probs[bad[0]]!r} for prompt {bad[0]}; "
                             "probabilities must lie in [0, 1]")
        return probs
