"""Regret matching for TRACER's speak/skip and keep/refresh controllers (docs/credit/specification.md#tracer),
the tables ``TeamControllers`` (``controllers.py``) answers from and learns.

A :class:`RegretMatcher` keeps, per information state ``s`` (any hashable key, typically the
``("controller", score_bucket, time_bucket)`` tuple of :func:`info_state`), cumulative regrets
``Rsum[s]`` and cumulative strategies ``Ssum[s]``:

    σ(a)  = max(Rsum[a], 0) / Σ_b max(Rsum[b], 0)   (uniform over the allowed actions if the sum is 0)
    update(s, v):  baseline = Σ_a σ(a) v(a);  Rsum[a] += v(a) − baseline;  Ssum[a] += σ(a)
    σ̄(a) = Ssum[a] / Σ Ssum                        (the current strategy while Σ Ssum = 0)

This is Hart & Mas-Colell external-regret matching with an *expected* baseline: the regrets are
measured against the value of the current mixed strategy, so ``Σ_a σ(a)·regret(a) = 0`` for every
update. ``Ssum`` accumulates the strategy used *before* the update. Guarantees (tested):
``max_a Rsum_T(a) ≤ Δ·sqrt(|A|·T)`` for values of range ``Δ``; in self-play the averaged joint play
is an ε-coarse-correlated equilibrium with ``ε = max(Rsum)/T`` — not necessarily the team optimum.

The value helpers of §2.2 turn a dialogue state into the values ``v`` fed to ``update``:
:func:`skip_value` and :func:`info_state` here, and the role rewards of §2.4 (``signed``,
``reviewer_reward``), which live with the registered credit method that turns the same rewards into
per-message advantages for GSPO (``teamplay.credit.methods.tracer_roles``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from teamplay.atomic import write_atomically
from teamplay.credit.methods.tracer_roles import signed
from teamplay.errors import DataError
from teamplay.json_files import read_json

# Action indices of the two TRACER controllers (§2.2 table).
KEEP, REFRESH = 0, 1
SKIP, SPEAK = 0, 1


@dataclass
class _StateTable:
    regret_sum: np.ndarray  # [n_actions]
    strategy_sum: np.ndarray  # [n_actions]
    iterations: int = 0


class RegretMatcher:
    """Per-information-state regret matching over ``n_actions`` actions.

    Args:
        n_actions: number of actions (2 for TRACER's binary controllers).
        allowed: the actions that may be played (default all). Disallowed actions always get
            probability 0 and their values are ignored by ``update`` (their regrets stay 0), so the
            strategy is a distribution over ``allowed`` only.

    States are created on first use with zero tables. A state key must be hashable and, to be
    saved, built from str/int/float/bool/None and (nested) tuples of those.
    """

    def __init__(self, n_actions: int = 2, allowed: Sequence[int] | None = None) -> None:
        if n_actions < 1:
            raise ValueError(f"n_actions must be >= 1, got {n_actions}")
        allowed = list(range(n_actions)) if allowed is None else sorted({int(a) for a in allowed})
        if not allowed or allowed[0] < 0 or allowed[-1] >= n_actions:
            raise ValueError(f"allowed must be a non-empty subset of 0..{n_actions - 1}, got {allowed}")
        self.n_actions = n_actions
        self.allowed = tuple(allowed)
        self._mask = np.zeros(n_actions, dtype=bool)
        self._mask[list(allowed)] = True
        self._tables: dict[Hashable, _StateTable] = {}

    # ---- tables ----------------------------------------------------------------------------------

    def _table(self, s: Hashable) -> _StateTable:
        if s not in self._tables:
            self._tables[s] = _StateTable(np.zeros(self.n_actions), np.zeros(self.n_actions))
        return self._tables[s]

    def states(self) -> list[Hashable]:
        """Information states seen so far, in first-use order."""
        return list(self._tables)

    def regret_sum(self, s: Hashable) -> np.ndarray:
        """Copy of ``Rsum[s]`` [n_actions]."""
        return self._table(s).regret_sum.copy()

    def strategy_sum(self, s: Hashable) -> np.ndarray:
        """Copy of ``Ssum[s]`` [n_actions]."""
        return self._table(s).strategy_sum.copy()

    def iterations(self, s: Hashable) -> int:
        return self._table(s).iterations

    # ---- strategies ------------------------------------------------------------------------------

    def strategy(self, s: Hashable) -> np.ndarray:
        """Current strategy σ [n_actions]: positive regrets normalised, else uniform over allowed."""
        positive = np.where(self._mask, np.maximum(self._table(s).regret_sum, 0.0), 0.0)
        total = positive.sum()
        if total > 0:
            return positive / total
        return self._mask / self._mask.sum()

    def average_strategy(self, s: Hashable) -> np.ndarray:
        """Average strategy σ̄ [n_actions] (the current strategy before the first update)."""
        ssum = self._table(s).strategy_sum
        total = ssum.sum()
        return ssum / total if total > 0 else self.strategy(s)

    def update(self, s: Hashable, values: Sequence[float]) -> np.ndarray:
        """Expected-baseline regret update with one value per action; returns the regrets added.

        ``values`` [n_actions] must be finite for allowed actions (others are ignored).
        """
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (self.n_actions,):
            raise ValueError(f"update({s!r}): need {self.n_actions} values, got shape {v.shape}")
        if not np.all(np.isfinite(v[self._mask])):
            raise ValueError(f"update({s!r}): non-finite action values {v.tolist()}")
        table = self._table(s)
        sigma = self.strategy(s)  # the PRE-update strategy, for both the baseline and Ssum
        v = np.where(self._mask, v, 0.0)
        baseline = float(sigma @ v)
        regret = np.where(self._mask, v - baseline, 0.0)
        table.regret_sum += regret
        table.strategy_sum += sigma
        table.iterations += 1
        return regret

    def sample(self, s: Hashable, rng: np.random.Generator) -> int:
        """An action drawn from the current strategy (training)."""
        return int(rng.choice(self.n_actions, p=self.strategy(s)))

    def greedy_average(self, s: Hashable) -> int:
        """``argmax σ̄`` (evaluation); ties go to the lowest action index."""
        return int(np.argmax(self.average_strategy(s)))

    # ---- persistence ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """JSON-ready tables. Floats are kept as Python floats: ``json`` writes ``repr``, which
        round-trips float64 exactly."""
        return {
            "n_actions": self.n_actions,
            "allowed": list(self.allowed),
            "states": [{"key": _key_to_json(s), "regret_sum": t.regret_sum.tolist(),
                        "strategy_sum": t.strategy_sum.tolist(), "iterations": t.iterations}
                       for s, t in self._tables.items()],
        }

    def load_state_dict(self, data: dict[str, Any]) -> None:
        """Replace all tables by ``data`` (from :meth:`state_dict`); checks shapes and settings."""
        if int(data.get("n_actions", -1)) != self.n_actions or tuple(data.get("allowed", ())) != self.allowed:
            raise ValueError(f"regret state is for n_actions={data.get('n_actions')}, "
                             f"allowed={data.get('allowed')}; this matcher has n_actions={self.n_actions}, "
                             f"allowed={list(self.allowed)}")
        tables: dict[Hashable, _StateTable] = {}
        for i, entry in enumerate(data["states"]):
            rs = np.array(entry["regret_sum"], dtype=np.float64)
            ss = np.array(entry["strategy_sum"], dtype=np.float64)
            if rs.shape != (self.n_actions,) or ss.shape != (self.n_actions,):
                raise ValueError(f"regret state entry {i}: tables must have {self.n_actions} values")
            tables[_key_from_json(entry["key"])] = _StateTable(rs, ss, int(entry["iterations"]))
        self._tables = tables

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`state_dict` as JSON atomically (temporary file in the same folder + rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(path, json.dumps(self.state_dict()))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RegretMatcher:
        """A matcher restored from :meth:`save`'s file; a missing or malformed file is a DataError."""
        path = Path(path)
        data = read_json(path, DataError, context="regret state file")
        try:
            matcher = cls(int(data["n_actions"]), data["allowed"])
            matcher.load_state_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise DataError(f"regret state file {path} is malformed: {exc}") from None
        return matcher


def _key_to_json(key: Hashable) -> Any:
    if isinstance(key, tuple):
        return {"tuple": [_key_to_json(k) for k in key]}
    if key is None or isinstance(key, (str, int, float, bool)):
        return key
    raise ValueError(f"information state {key!r} cannot be saved: use str/int/float/bool/None/tuples")


def _key_from_json(data: Any) -> Hashable:
    if isinstance(data, dict):
        return tuple(_key_from_json(k) for k in data["tuple"])
    return data


# ---- values of controller actions (§2.2) ------------------------------------------------------------

def default_equal(answer: Any, truth: Any) -> bool:
    """Answers match when their stripped string forms are equal (``42`` matches ``"42"``)."""
    return str(answer).strip() == str(truth).strip()


def skip_value(pending_answer: Any, truth: Any,
               equal: Callable[[Any, Any], bool] = default_equal) -> float:
    """Value of *skip* in a review round: +1 if the pending answer is valid and correct, −1 if it is
    wrong **or** invalid (``None``), the current TRACER behaviour (an older version gave 0)."""
    if pending_answer is None:
        return -1.0
    return signed(equal(pending_answer, truth))


def info_state(pending_text: str | None, pending_answer: Any, vote_score: int, round_index: int,
               total_rounds: int) -> tuple[str, str, str]:
    """The controller's information state ``("controller", score_bucket, time_bucket)``.

    ``score_bucket``: ``no_pending`` (no pending text), ``invalid_pending`` (text without a parsable
    answer), else ``vote_plus_<n>`` / ``vote_minus_<n>`` / ``vote_0`` from the pending vote score.
    ``time_bucket``: ``"last"`` if at most one proposal round (odd 1-based round) remains among
    ``round_index..total_rounds``, else ``"not_last"``.

    >>> info_state("x = 4", "4", -2, 3, 5)
    ('controller', 'vote_minus_2', 'not_last')
    >>> info_state(None, None, 0, 4, 5)
    ('controller', 'no_pending', 'last')
    """
    if round_index < 1 or round_index > total_rounds:
        raise ValueError(f"round_index must be in 1..{total_rounds}, got {round_index}")
    if pending_answer is None:
        score = "no_pending" if pending_text is None else "invalid_pending"
    elif vote_score > 0:
        score = f"vote_plus_{vote_score}"
    elif vote_score < 0:
        score = f"vote_minus_{-vote_score}"
    else:
        score = "vote_0"
    remaining = sum(1 for r in range(round_index, total_rounds + 1) if r % 2 == 1)
    return ("controller", score, "last" if remaining <= 1 else "not_last")


def regret_bound(value_range: float, n_actions: int, T: int) -> float:
    """``Δ·sqrt(|A|·T)``: the bound on ``max_a Rsum_T(a)`` for values with range ``Δ``."""
    return value_range * math.sqrt(n_actions * T)
