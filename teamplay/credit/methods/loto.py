"""``loto``: leave-one-turn-out credit (docs/credit/specification.md#turn-baselines).

:func:`loto_credit` — ``c_t = V(all turns) − V(all turns but t)``: one re-evaluation per turn. No
efficiency guarantee; it gives zero credit to each of two redundant turns (the known failure mode,
tested next to Shapley). The registered method :func:`loto_method` takes ``V`` from the
``transcript_scorer`` (``value: masking``) or the ``replay`` resource (``value: replay``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import Field

from teamplay.credit.methods.assumptions import MASKING
from teamplay.credit.methods.turn_arrays import spoken_only_mask
from teamplay.credit.registry import CardText, CreditBatch, MethodOptions, register_credit
from teamplay.credit.values.characteristic import Transcript
from teamplay.credit.values.replay_query import ReplayEngine, ReplayQuery, replay_values
from teamplay.records import Episode


def loto_credit(V: Callable[[frozenset[int]], float], T: int) -> np.ndarray:
    """Leave-one-turn-out credit [T]: ``c_t = V({0..T-1}) − V({0..T-1} \\ {t})``.

    ``V(kept)`` scores the transcript in which only the turns in ``kept`` keep their content (the
    others replaced by a neutral placeholder, role/turn structure kept). Cost: ``T + 1`` calls.
    No efficiency: ``Σ c_t`` need not equal ``V(all) − V(∅)``; redundant turns each get 0.
    """
    if T < 1:
        raise ValueError(f"loto_credit needs T >= 1 turns, got {T}")
    full = frozenset(range(T))
    v_full = float(V(full))
    credit = np.array([v_full - float(V(full - {t})) for t in range(T)])
    if not np.all(np.isfinite(credit)) or not np.isfinite(v_full):
        raise ValueError("loto_credit: V returned a non-finite value")
    return credit


class LOTOOptions(MethodOptions):
    """Options of the registered ``loto`` method."""

    value: Literal["masking", "replay"] = Field(
        "masking", description="V of a transcript without turn t: 'masking' (turn t's text withheld, "
                               "resources['transcript_scorer'] scores what remains) or 'replay' (re-run "
                               "from turn t with that turn removed, resources['replay']).")
    removal: Literal["skip", "null_message", "base_policy"] = Field(
        "skip", description="value=replay: what the removed turn becomes.")
    samples: int = Field(1, ge=1, le=64, description="value=replay: samples per removed turn.")
    budget: float | None = Field(None, gt=0, description="value=replay: extra-token cap per step, as a "
                                                         "multiple of the rollout tokens.")


def _loto_needs(options: LOTOOptions) -> frozenset[str]:
    return frozenset({"transcript_scorer"} if options.value == "masking" else {"replay"})


def _transcript_value(batch: CreditBatch, options: LOTOOptions):
    """``value(episode, kept) -> float``: the ``transcript_value`` resource when given, else built
    as ``options.value`` says from the ``transcript_scorer`` or ``replay`` resource."""
    if batch.resources.transcript_value is not None:
        return batch.resources.transcript_value
    if options.value == "masking":
        scorer = batch.resources.need("transcript_scorer", "method 'loto' (value=masking)")
        question = batch.item.prompt if batch.item is not None else ""

        def masked(ep: Episode, kept: frozenset[int]) -> float:
            withheld = tuple(t not in kept for t in range(len(ep.messages)))
            return float(np.asarray(scorer([Transcript(question, ep.messages, withheld)]))[0])

        return masked
    engine = batch.resources.need("replay", "method 'loto' (value=replay)")
    if not isinstance(engine, ReplayEngine) or batch.item is None:
        raise ValueError("credit method 'loto' with value=replay needs a replay engine "
                         "(teamplay.credit.values.replay_query.ReplayEngine) as the replay resource, "
                         "and the batch's item")
    item = batch.item

    def replayed(ep: Episode, kept: frozenset[int]) -> float:
        dropped = sorted(set(range(len(ep.messages))) - kept)
        if not dropped:
            return float(ep.reward)
        if len(dropped) > 1:
            raise ValueError("loto value=replay removes one turn at a time")
        query = ReplayQuery(ep, item, frozenset(ep.agents), start=dropped[0], removal=options.removal,
                            remove_turn=True)
        return float(replay_values(engine, [query], options.samples, options.budget)[0])

    return replayed


LOTO_CARD = CardText(
    "Leave-one-turn-out: c_t = V(all turns) - V(all turns but t), the drop in the transcript's "
    "value when message t is masked (value: masking) or removed and the rest replayed (value: "
    "replay); not centred across the group.",
    ("no efficiency: two redundant messages each get 0, and interaction effects are not split",
     MASKING,
     "replay needs restorable state at turn t and a fixed policy for the turns after it"),
    ("tests/credit/test_turn_baselines.py::test_loto_equals_shapley_for_additive_value",
     "tests/credit/test_turn_baselines.py::test_loto_failure_mode_redundant_pair"),
    "value=masking generates nothing (one scorer call per value)",
    fails_where=("masking sees no influence through later turns: r -0.01 [-0.03, 0.01] for a helpful reviewer "
                 "(section 12); not centred across the group, so its advantages need not sum to 0",))


@register_credit("loto", LOTOOptions,
                 "Leave-one-turn-out: drop in the transcript's value when one message is masked "
                 "or removed and replayed",
                 requires=_loto_needs,
                 cost="T + 1 transcript values per episode (value=replay: T replays per sample)", card=LOTO_CARD)
def loto_method(batch: CreditBatch, options: LOTOOptions) -> list[np.ndarray]:
    """LOTO on episodes. ``V(episode, kept: frozenset[int]) -> float`` scores the transcript with
    only the messages in ``kept``: ``batch.resources.transcript_value`` when given, else built from
    ``options.value`` (masking with the ``transcript_scorer`` resource, or replay with the ``replay``
    resource: re-run from turn t with turn t removed, docs/credit/specification.md#characteristic). ``T + 1`` values per
    episode; skipped messages get 0 (the registry's convention).
    """
    value = _transcript_value(batch, options)
    out = []
    for ep in batch.episodes:
        if not ep.messages:
            out.append(np.zeros(0))
            continue
        credit = loto_credit(lambda kept, ep=ep: value(ep, kept), len(ep.messages))
        out.append(np.where(spoken_only_mask(ep), credit, 0.0))
    return out


__all__ = ["LOTOOptions", "loto_credit", "loto_method"]
