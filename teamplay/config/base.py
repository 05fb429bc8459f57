"""The base model of the config sections (all but ``controllers``, whose config is frozen)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A section of a run's config: unknown fields and non-finite floats are refused."""

    # allow_inf_nan=False: `lr: .inf` or `temperature: 1e400` (inf once parsed) mean nothing and
    # would train on NaNs; every float of a config must be finite
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
