"""The base model of every config section: unknown fields, non-finite floats and values of the
wrong type are refused.

Types never guess (pydantic's strict mode): ``max_staleness: true`` is not 1, ``enabled: 1`` is
not true, and the string ``"3"`` is neither an int nor a float (YAML already reads ``3`` as an
int and ``yes`` as a bool, so a quoted value is a string on purpose). Only the conversions that
lose nothing remain: an int where a float is expected (``lr: 1``), and a YAML list where a tuple
is expected (YAML has no tuples). A section that subclasses ``Section`` gets all of this.
"""

from __future__ import annotations

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _is_tuple(annotation: Any) -> bool:
    """Whether ``annotation`` is a tuple type, or an optional/union holding one."""
    if typing.get_origin(annotation) is tuple:
        return True
    return any(_is_tuple(arg) for arg in typing.get_args(annotation)) if _is_union(annotation) else False


def _is_union(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType)


class Section(BaseModel):
    """A section of a run's config: unknown fields, non-finite floats and wrong types are refused."""

    # allow_inf_nan=False: `lr: .inf` or `temperature: 1e400` (inf once parsed) mean nothing and
    # would train on NaNs; every float of a config must be finite. strict=True: see the module doc
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _yaml_list_as_tuple(cls, value: Any, info: ValidationInfo) -> Any:
        # YAML (and a JSON dump of a config) has lists only; strict mode takes a tuple field from a
        # tuple alone, so a list given for one becomes that tuple (its items are still checked strictly)
        if isinstance(value, list) and info.field_name and _is_tuple(cls.model_fields[info.field_name].annotation):
            return tuple(value)
        return value
