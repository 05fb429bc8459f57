"""What each role learned, measured on a set of evaluated episodes (``EvalMetrics.extra["team"]``).

All rates are fractions in [0, 1]; a rate whose denominator is empty is left out (never 0/0 or a
made-up 0). Correctness of an answer is the task's ``score_answer(answer, item) > 0.5``.

* ``first_answer_accuracy[role]``: over the agents of ``role`` that gave an answer, the fraction
  whose *first* answer was right on the team's problem (for proposer/reviewer: the proposer's first
  proposal). Every role is kept here; the eval table leaves out the roles of
  ``cooperation["piece_roles"]`` (below), whose answers answer a piece, not the team's problem: a
  ``relay`` informant's answer is its operand, which judged against the sum reads 0 for a perfect
  informant.
* Review verdicts (``Episode.metadata["verdicts"]``, written by ``proposer_reviewer``), over the
  review turns that spoke:
  ``verdict_accuracy`` = reviews whose verdict was right (RIGHT on a right answer, WRONG on a wrong
  one) / reviews (a review with no parsable verdict counts as not right); ``verdict_rate`` =
  reviews with a parsable verdict / reviews; ``wrong_caught`` = WRONG verdicts on wrong answers /
  reviews of wrong answers; ``right_rejected`` = WRONG verdicts on right answers / reviews of right
  answers (the lower the better).
* ``correction_rate`` = episodes whose initial answer was wrong and final answer right / episodes
  whose initial answer was wrong; ``harm_rate`` = right -> wrong / initially right.
* Debate (messages of stage ``debate``): for each revision turn, the majority of all debaters'
  latest answers before that round (``teamplay.envs.voting.plurality``); ``toward_majority`` = turns
  that changed the agent's answer to the majority from a non-majority answer / revision turns,
  ``away_from_majority`` = turns that left the majority answer for another / revision turns.

Cooperation (``EvalMetrics.extra["cooperation"]``, ``cooperation_metrics``; per episode
``episode_cooperation``), from the episodes alone:

* Per message: a spoken message *could change the answer* when an earlier round gave an answer (the
  team's running answer: the latest answer of the earlier rounds, which its author could read; a
  message of the first answered round, or of a simultaneous round's peers, could not). It is a
  *correction* when its own answer is right and the running answer was wrong, a *harm* when its
  answer is wrong and the running answer was right; a message without an answer (a verdict,
  silence) is neither. ``corrections_per_message`` = corrections / messages that could change the
  answer, ``harms_per_message`` = harms / the same; the counts are kept as ``corrections``,
  ``harms``, ``chances``. Unlike ``correction_rate`` (per episode, initial vs final answer), this
  says how often one message helps or hurts. Under ``relay`` the informants' answers are operands,
  so the answerer's right sum counts as a correction of the last operand.
* Team vs its best member: ``member_accuracy[agent]`` = mean ``Episode.agent_correct[agent]`` (each
  agent's own last answer); ``best_member`` = the agent with the highest (ties: the first in team
  order), ``team_minus_best_member`` = mean team reward - that accuracy (> 0: the team beats every
  member alone). Only agents of the protocol's ``answer_roles`` are members here: an agent whose
  answer can never be the team's is scored on something else (a ``relay`` informant on its own
  operand: 1.0 for stating it), so beside the team's accuracy its score would mean nothing; under
  ``relay`` the best member is the answerer (its score is the team's, margin 0).
  ``piece_roles`` (only when some): the roles whose agents are scored on a piece of their own, not
  on the team's problem: some agent of the role has a last answer whose score
  (``Episode.agent_correct``) disagrees with that answer judged on the team's problem (``relay``'s
  informants, ``split``'s solvers). Under ``split``
  (every role answers) an agent is still scored on its own piece, not on the team's problem, so
  there the comparison is not one of equals.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from teamplay.envs.voting import plurality
from teamplay.records import Episode

Correct = Callable[[str | None, str], bool]
"""``correct(answer, problem_id)``: whether ``answer`` is right for that problem."""


def _role_of(agent: str) -> str:
    """The role of an agent id (``"informant_1"`` -> ``"informant"``)."""
    return agent.rpartition("_")[0] or agent


def _rate(num: int, den: int, out: dict[str, Any], name: str) -> None:
    if den > 0:
        out[name] = num / den


def first_answer_accuracy(episodes: Sequence[Episode], correct: Correct) -> dict[str, float]:
    """Per role, the share of its agents' first answers that are right on the team's problem."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for ep in episodes:
        seen: set[str] = set()
        for m in ep.messages:
            if m.spoke and m.answer is not None and m.agent not in seen:
                seen.add(m.agent)
                hits[m.role].append(correct(m.answer, ep.problem_id))
    return {role: sum(v) / len(v) for role, v in hits.items()}


def review_metrics(episodes: Sequence[Episode], correct: Correct, out: dict[str, Any]) -> None:
    reviews = right_verdicts = parsed = 0
    wrong_seen = wrong_caught = right_seen = right_rejected = 0
    for ep in episodes:
        for v in ep.metadata.get("verdicts", ()) or ():
            if not v.get("spoke", True):
                continue
            reviews += 1
            verdict = v.get("verdict")
            pending_right = correct(v.get("pending_answer"), ep.problem_id)
            parsed += verdict is not None
            right_verdicts += (verdict == "RIGHT" and pending_right) or (verdict == "WRONG" and not pending_right)
            if pending_right:
                right_seen += 1
                right_rejected += verdict == "WRONG"
            else:
                wrong_seen += 1
                wrong_caught += verdict == "WRONG"
    _rate(right_verdicts, reviews, out, "verdict_accuracy")
    _rate(parsed, reviews, out, "verdict_rate")
    _rate(wrong_caught, wrong_seen, out, "wrong_caught")
    _rate(right_rejected, right_seen, out, "right_rejected")


def debate_metrics(episodes: Sequence[Episode], out: dict[str, Any]) -> None:
    turns = toward = away = 0
    for ep in episodes:
        latest: dict[str, str | None] = {}
        rounds = sorted({m.round for m in ep.messages})
        for r in rounds:
            before = dict(latest)
            crowd = plurality([before.get(a) for a in ep.agents])
            for m in ep.messages:
                if m.round != r:
                    continue
                if m.stage == "debate" and m.spoke:
                    turns += 1
                    old, new = before.get(m.agent), m.answer
                    if new is not None and new != old and crowd is not None:
                        toward += new == crowd
                        away += old == crowd
                if m.spoke and m.answer is not None:
                    latest[m.agent] = m.answer
    _rate(toward, turns, out, "toward_majority")
    _rate(away, turns, out, "away_from_majority")


def team_metrics(episodes: Sequence[Episode], correct: Correct, initial_right: Sequence[bool]) -> dict[str, Any]:
    """The metrics of the module docstring; ``initial_right[i]``: episode i's initial answer was right."""
    out: dict[str, Any] = {}
    first = first_answer_accuracy(episodes, correct)
    if first:
        out["first_answer_accuracy"] = first
    review_metrics(episodes, correct, out)
    wrong_first = sum(not r for r in initial_right)
    _rate(sum((not r) and ep.reward > 0.5 for ep, r in zip(episodes, initial_right, strict=True)),
          wrong_first, out, "correction_rate")
    _rate(sum(r and ep.reward <= 0.5 for ep, r in zip(episodes, initial_right, strict=True)),
          len(episodes) - wrong_first, out, "harm_rate")
    debate_metrics(episodes, out)
    return out


@dataclass(frozen=True)
class EpisodeCooperation:
    """Cooperation counts of one episode (module docstring).

    Fields:
        chances: spoken messages that could change the answer (an earlier round gave one), >= 0.
        corrections: those whose answer turned a wrong running answer right, <= chances.
        harms: those whose answer turned a right running answer wrong, <= chances - corrections.
        member_correct: per agent of the episode, ``Episode.agent_correct`` (0.0 when missing).
    """

    chances: int
    corrections: int
    harms: int
    member_correct: Mapping[str, float]


def episode_cooperation(episode: Episode, correct: Correct) -> EpisodeCooperation:
    """The per-message corrections and harms of ``episode`` and its members' scores."""
    chances = corrections = harms = 0
    running: str | None = None  # the latest answer of the rounds before the current one
    for r in sorted({m.round for m in episode.messages}):
        in_round = [m for m in episode.messages if m.round == r]
        if running is not None:
            was = correct(running, episode.problem_id)
            for m in in_round:
                if not m.spoke:
                    continue
                chances += 1
                if m.answer is not None:
                    now = correct(m.answer, episode.problem_id)
                    corrections += (not was) and now
                    harms += was and not now
        answers = [m.answer for m in in_round if m.spoke and m.answer is not None]
        running = answers[-1] if answers else running
    member = {a: float(episode.agent_correct.get(a, 0.0)) for a in episode.agents}
    return EpisodeCooperation(chances=chances, corrections=corrections, harms=harms, member_correct=member)


def best_member(episodes: Sequence[Episode], counts: Sequence[EpisodeCooperation],
                answer_roles: Collection[str] | None = None) -> dict[str, Any]:
    """``member_accuracy``, ``best_member``, ``best_member_accuracy`` and ``team_minus_best_member``
    over ``episodes`` (``counts[i]`` belongs to ``episodes[i]``; an agent's mean is over the
    episodes it played), among the agents of ``answer_roles`` (None: every agent). Empty when no
    episode has such an agent."""
    scores: dict[str, list[float]] = defaultdict(list)
    for c in counts:
        for agent, score in c.member_correct.items():
            if answer_roles is None or _role_of(agent) in answer_roles:
                scores[agent].append(score)
    if not scores:
        return {}
    accuracy = {a: sum(v) / len(v) for a, v in scores.items()}
    best = max(accuracy, key=lambda a: accuracy[a])  # max keeps the first of equals: team order
    team = sum(ep.reward for ep in episodes) / len(episodes)
    return {"member_accuracy": accuracy, "best_member": best, "best_member_accuracy": accuracy[best],
            "team_minus_best_member": team - accuracy[best]}


def cooperation_metrics(episodes: Sequence[Episode], correct: Correct,
                        answer_roles: Collection[str] | None = None) -> dict[str, Any]:
    """The cooperation metrics of the module docstring over ``episodes`` (rates with an empty
    denominator are left out); ``answer_roles``: the protocol's roles whose answers can be the
    team's (None: all), the only ones compared as members."""
    counts = [episode_cooperation(ep, correct) for ep in episodes]
    chances = sum(c.chances for c in counts)
    out: dict[str, Any] = {"chances": chances, "corrections": sum(c.corrections for c in counts),
                           "harms": sum(c.harms for c in counts)}
    _rate(out["corrections"], chances, out, "corrections_per_message")
    _rate(out["harms"], chances, out, "harms_per_message")
    out.update(best_member(episodes, counts, answer_roles))
    pieces = piece_roles(episodes, correct)
    if pieces:
        out["piece_roles"] = pieces
    return out


def piece_roles(episodes: Sequence[Episode], correct: Correct) -> list[str]:
    """The roles whose agents are scored on a piece of their own (module docstring), sorted."""
    roles = set()
    for ep in episodes:
        for agent, answer in ep.agent_answers.items():
            if answer is not None and agent in ep.agent_correct:
                if (ep.agent_correct[agent] > 0.5) != correct(answer, ep.problem_id):
                    roles.add(_role_of(agent))
    return sorted(roles)
