"""Learned speak/skip controllers: TRACER's regret layer (docs/credit/specification.md#tracer-regret), cost-aware.

Before a skippable turn the episode driver asks the protocol's controller whether the agent speaks.
``TeamControllers`` answers from one :class:`~teamplay.training.play.regret.RegretMatcher` per
(agent, stage), indexed by an information state, and learns those tables from finished episodes:

    rollouts (controller mode "train": sample the current strategy; a skipped review or debate
    turn is still generated as a counterfactual, batched with the other turns of that step)
        -> Episode.decisions: one typed ControllerDecision per decision (written by the driver)
        -> TeamControllers.learn(episodes, is_correct): values of BOTH actions per decision, one
           expected-baseline regret update each

Information states (the keys of the tables):

* ``propose`` / ``review`` (proposer_reviewer): :func:`~teamplay.training.play.regret.info_state`,
  ``("controller", score_bucket, time_bucket)`` from the pending answer, its vote score and the
  1-based round.
* ``debate``: ``("debate", agreement, time_bucket)``; ``agreement`` is ``no_answer`` when the
  debater's own latest answer is missing, else ``agree_<k>_of_<n>``: how many of the other ``n``
  debaters' latest answers equal its own; ``time_bucket`` is ``last`` in the last round.

Action values (index 0 = skip/keep, 1 = speak/refresh). ``cost(m) = price_per_call +
price_per_token · tokens(m)`` is subtracted from the value of speaking (0 with the default prices):

* ``propose``: ``v(keep) = signed(old pending answer)``, ``v(refresh) = signed(pending answer after
  the turn) − cost``; the pending answer after a spoken proposal is its answer, or the old one when
  it has none (the protocol's keep rule). A chosen keep is not simulated (TRACER): both values are
  ``signed(old)``, so the regret increment is 0 and only the average-strategy count moves.
* ``review``: ``v(skip) = skip_value(pending, truth)`` (+1 right, −1 wrong or missing), ``v(speak) =
  reviewer_reward(text, pending correct) − cost`` with the spoken review, or the counterfactual
  review when the reviewer skipped.
* ``debate`` (staying silent keeps the debater's earlier vote): ``v(skip) = signed(its latest answer
  before the round)``, ``v(speak) = signed(the answer of its message this round, spoken or
  counterfactual) − cost``; a message without an answer counts as wrong (it would not vote).

Every decision of an episode whose speak value cannot be known (a skipped turn without a
counterfactual) is left out of the update and counted in ``LearnStats.unvalued``.

Evaluation modes: ``average_greedy`` (TRACER's default: the action with the larger average
probability), ``current`` (the larger current probability), ``sample`` (a draw from the average
strategy with the env's seeded generator), ``always_speak`` (the baseline). In the greedy modes a tie,
and any state never seen in training, speaks: silence has to be learned.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from teamplay.config import STAGES, ControllerConfig, Mode
from teamplay.credit.methods.tracer_roles import reviewer_reward, signed
from teamplay.envs.protocols.base import Controller, ControllerChoice, TurnDecision
from teamplay.envs.tasks.base import Task
from teamplay.errors import ConfigError
from teamplay.records import ControllerDecision, Episode, Message, TaskItem
from teamplay.training.play.regret import SKIP, SPEAK, RegretMatcher, info_state

#: ``is_correct(answer, problem_id)``: whether a (non-None) answer is correct
AnswerCheck = Callable[[str, str], bool]


@dataclass(frozen=True)
class LearnStats:
    """What one :meth:`TeamControllers.learn` call did.

    Fields:
        updates: regret updates per ``"agent/stage"``.
        unvalued: decisions left out because the value of speaking was unknown.
        counterfactual_tokens: tokens generated only to value an unchosen *speak*.
    """

    updates: dict[str, int]
    unvalued: int
    counterfactual_tokens: int


class TeamControllers:
    """One regret matcher per (agent, stage), the protocol's controller callable, and its learning.

    The same object serves many envs at once (the tables are shared, the per-episode log lives in
    each episode); :meth:`controller` returns the callable to pass as the protocol's ``controller``
    option, for training (``"train"``) or one of the evaluation modes.
    """

    def __init__(self, config: ControllerConfig) -> None:
        self.config = config
        self._matchers: dict[tuple[str, str], RegretMatcher] = {}

    # ---- tables -----------------------------------------------------------------------------

    def matcher(self, agent: str, stage: str) -> RegretMatcher:
        """The table of ``agent`` at ``stage`` (created empty on first use)."""
        key = (agent, stage)
        if key not in self._matchers:
            self._matchers[key] = RegretMatcher(2)
        return self._matchers[key]

    def keys(self) -> list[tuple[str, str]]:
        """(agent, stage) pairs with a table, in first-use order."""
        return list(self._matchers)

    def speak_probability(self, agent: str, stage: str, average: bool = True) -> dict[tuple, float]:
        """Probability of speaking per information state (average or current strategy)."""
        m = self.matcher(agent, stage)
        return {s: float((m.average_strategy(s) if average else m.strategy(s))[SPEAK]) for s in m.states()}

    def summary(self) -> dict[str, float]:
        """Per ``"agent/stage"``: the average strategy's speak probability, averaged over information
        states weighted by how often each was updated (states never updated are left out)."""
        out = {}
        for (agent, stage), m in self._matchers.items():
            weights = np.array([m.iterations(s) for s in m.states()], dtype=float)
            if weights.sum() == 0:
                continue
            probs = np.array([m.average_strategy(s)[SPEAK] for s in m.states()])
            out[f"{agent}/{stage}"] = float(probs @ weights / weights.sum())
        return out

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready tables (exact: float64 values survive ``json`` unchanged)."""
        return {"tables": [{"agent": a, "stage": s, "matcher": m.state_dict()}
                           for (a, s), m in self._matchers.items()]}

    def load_state_dict(self, data: Mapping[str, Any]) -> None:
        """Replace every table by ``data`` (from :meth:`state_dict`); malformed data is a ValueError."""
        if not isinstance(data, Mapping) or not isinstance(data.get("tables"), list):
            raise ValueError("controller state must be a mapping with a 'tables' list "
                             "(TeamControllers.state_dict())")
        matchers: dict[tuple[str, str], RegretMatcher] = {}
        for i, entry in enumerate(data["tables"]):
            try:
                m = RegretMatcher(2)
                m.load_state_dict(entry["matcher"])
                matchers[(str(entry["agent"]), str(entry["stage"]))] = m
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"controller state tables[{i}] is malformed: {exc}") from None
        self._matchers = matchers

    # ---- deciding ---------------------------------------------------------------------------

    def controller(self, mode: Literal["train"] | Mode | None = None) -> Controller:
        """The protocol's ``controller`` callable; ``mode`` None = the configured evaluation mode."""
        mode = mode or self.config.mode
        if mode not in ("train", "average_greedy", "current", "sample", "always_speak"):
            raise ValueError(f"controller mode must be train, average_greedy, current, sample or "
                             f"always_speak, got {mode!r}")

        def decide(decision: TurnDecision) -> ControllerChoice:
            return self.decide(decision, mode)

        return decide

    def decide(self, decision: TurnDecision, mode: str) -> ControllerChoice:
        """Speak or skip before ``decision.turn``; the record holds what learning needs later."""
        turn = decision.turn
        if turn.stage not in self.config.stages:
            return ControllerChoice(speak=True)  # state None: not decided, nothing to learn
        state, facts = information_state(decision)
        if mode == "always_speak":
            return ControllerChoice(speak=True, state=state, mode=mode, **facts)
        m = self.matcher(turn.agent, turn.stage)
        if mode == "train":
            action = m.sample(state, decision.rng)
        elif state not in set(m.states()):
            action = SPEAK  # never seen in training: speaking is the safe default (and no new table row)
        elif mode == "sample":
            action = int(decision.rng.choice(2, p=m.average_strategy(state)))
        else:
            probs = m.average_strategy(state) if mode == "average_greedy" else m.strategy(state)
            action = SKIP if probs[SKIP] > probs[SPEAK] else SPEAK
        # a keep is not simulated (TRACER); a silent reviewer or debater is, to value its speech
        counterfactual = mode == "train" and action == SKIP and turn.stage != "propose"
        return ControllerChoice(speak=action == SPEAK, counterfactual=counterfactual, state=state, mode=mode,
                                **facts)

    # ---- learning ---------------------------------------------------------------------------

    def cost(self, tokens: int) -> float:
        """Price of one spoken message of ``tokens`` tokens."""
        return self.config.price_per_call + self.config.price_per_token * tokens

    def action_values(self, entry: ControllerDecision, episode: Episode, is_correct: AnswerCheck) -> np.ndarray | None:
        """``[v(skip/keep), v(speak/refresh)]`` of one logged decision (see the module docstring), or
        None when the value of speaking is unknown (skipped without a counterfactual)."""
        def right(answer: str | None) -> bool:
            return answer is not None and bool(is_correct(answer, episode.problem_id))

        stage, spoke = entry.stage, entry.spoke
        message = _message_of(episode, entry)
        if stage == "propose":
            old = entry.pending_answer
            keep = signed(right(old))
            if not spoke:
                return np.array([keep, keep])
            new = message.answer if message.answer is not None else old
            return np.array([keep, signed(right(new)) - self.cost(message.n_tokens)])
        if spoke:
            text, answer, tokens = message.text, message.answer, message.n_tokens
        elif entry.counterfactual_text is not None:
            text, answer, tokens = entry.counterfactual_text, entry.counterfactual_answer, entry.counterfactual_tokens
        else:
            return None
        if stage == "review":
            pending = entry.pending_answer
            pending_right = None if pending is None else right(pending)
            return np.array([signed(bool(pending_right)), reviewer_reward(text, pending_right) - self.cost(tokens)])
        if stage == "debate":
            return np.array([signed(right(entry.previous_answer)), signed(right(answer)) - self.cost(tokens)])
        raise ConfigError(f"controllers: no action values are defined for stage {stage!r} "
                          f"(known: {', '.join(STAGES)})")

    def learn(self, episodes: Iterable[Episode], is_correct: AnswerCheck) -> LearnStats:
        """One regret update per training decision logged in ``episodes`` (in episode, then turn
        order). Decisions made in an evaluation mode are refused (ValueError): evaluation never
        updates the tables."""
        updates: dict[str, int] = defaultdict(int)
        unvalued = cf_tokens = 0
        for episode in episodes:
            for entry in episode.decisions:
                if entry.state is None:
                    continue  # a stage the controllers do not decide
                if entry.mode != "train":
                    raise ValueError(f"episode {episode.problem_id}: decision of {entry.agent} in round "
                                     f"{entry.round} was made in mode {entry.mode!r}; only "
                                     f"training decisions update the tables")
                cf_tokens += entry.counterfactual_tokens
                values = self.action_values(entry, episode, is_correct)
                if values is None:
                    unvalued += 1
                    continue
                self.matcher(entry.agent, entry.stage).update(entry.state, values)
                updates[f"{entry.agent}/{entry.stage}"] += 1
        return LearnStats(updates=dict(updates), unvalued=unvalued, counterfactual_tokens=cf_tokens)

    def learn_step(self, episodes: Sequence[Episode], is_correct: AnswerCheck) -> dict[str, Any]:
        """``learn`` from one training step's episodes; returns the step's controller metrics:
        ``speak_rate`` (``speak_rates``), ``speak_prob_average`` (``summary`` after the update),
        ``controller_updates`` and ``counterfactual_tokens``."""
        stats = self.learn(episodes, is_correct)
        return {"speak_rate": speak_rates(episodes), "speak_prob_average": self.summary(),
                "controller_updates": stats.updates, "counterfactual_tokens": stats.counterfactual_tokens}


def information_state(decision: TurnDecision) -> tuple[tuple[str, str, str], dict[str, str | None]]:
    """The table key of a decision and the facts its action values need later
    (``ControllerChoice`` keyword arguments)."""
    turn, meta = decision.turn, decision.request.metadata
    if turn.stage in ("propose", "review"):
        if "pending_answer" not in meta or "vote_score" not in meta:
            raise ConfigError(f"controllers: the {turn.stage!r} controller of {turn.agent} needs the "
                              f"proposer_reviewer protocol's turn metadata (pending_answer, vote_score); "
                              f"remove {turn.stage!r} from controllers.stages for this protocol")
        pending = meta["pending_answer"]
        pending_text = "" if meta.get("pending_agent") is not None else None
        key = info_state(pending_text, pending, int(meta["vote_score"]), turn.round + 1, decision.rounds)
        return key, {"pending_answer": pending}
    own = next((m.answer for m in reversed(decision.request.transcript) if m.agent == turn.agent), None)
    others = _latest_answers(decision.request.transcript, exclude=turn.agent)
    agreement = "no_answer" if own is None else f"agree_{sum(a == own for a in others)}_of_{len(others)}"
    time = "last" if turn.round >= decision.rounds - 1 else "not_last"
    return ("debate", agreement, time), {"previous_answer": own}


def answer_check(task: Task, items: Mapping[str, TaskItem]) -> AnswerCheck:
    """The answer check of ``task``: an answer is correct when the task scores it >= 0.5 on its problem
    (``items`` by id)."""
    return lambda answer, problem_id: task.score_answer(answer, items[problem_id]) >= 0.5


def speak_rates(episodes: Iterable[Episode]) -> dict[str, float]:
    """Per ``"agent/stage"``: the fraction of controller decisions that spoke (decided stages only)."""
    spoke: dict[str, list[bool]] = defaultdict(list)
    for episode in episodes:
        for entry in episode.decisions:
            if entry.state is not None:
                spoke[f"{entry.agent}/{entry.stage}"].append(entry.spoke)
    return {k: sum(v) / len(v) for k, v in sorted(spoke.items())}


def _latest_answers(transcript: Iterable[Message], exclude: str) -> list[str | None]:
    latest: dict[str, str | None] = {}
    for m in transcript:
        if m.agent != exclude and m.spoke:
            latest[m.agent] = m.answer
    return list(latest.values())


def _message_of(episode: Episode, entry: ControllerDecision) -> Message:
    for m in episode.messages:
        if m.agent == entry.agent and m.round == entry.round and m.stage == entry.stage:
            return m
    raise ValueError(f"episode {episode.problem_id}: no message of {entry.agent} in round {entry.round} "
                     f"for its logged {entry.stage!r} decision")
