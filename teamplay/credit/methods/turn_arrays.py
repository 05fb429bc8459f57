"""What the per-turn methods (``gigpo``, ``a2tgpo``, ``loto``) share: ragged per-turn arrays.

Ragged inputs are sequences of 1-D arrays, one per trajectory (rollout) of one task group; outputs
have the same ragged shape (docs/credit/specification.md#turn-baselines).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from teamplay.records import Episode


def ragged(values: Sequence[Sequence[float]], name: str) -> list[np.ndarray]:
    """``values`` as float64 1-D arrays [T_g], one per trajectory; a ValueError naming ``name`` for an
    empty group, an array of another rank or a non-finite value."""
    if len(values) == 0:
        raise ValueError(f"{name}: empty group (need at least one trajectory)")
    out = []
    for i, v in enumerate(values):
        arr = np.asarray(v, dtype=np.float64)
        if arr.ndim != 1:
            raise ValueError(f"{name}[{i}] must be 1-D, got shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}[{i}] holds non-finite values {arr.tolist()}")
        out.append(arr)
    return out


def spoken_only_mask(ep: Episode) -> np.ndarray:
    """[T]: True where the message was spoken (skipped turns get no credit)."""
    return np.array([m.spoke for m in ep.messages], dtype=bool)


__all__ = ["ragged", "spoken_only_mask"]
