"""What a run's files record of its config: ``RunRecord``.

A checkpoint stores the run's config as JSON, a resume compares the saved config with the running
one, and a cached evaluation of the untrained team is keyed by it. Those readers need the config as
data, not the config object: the trainer's wiring builds one ``RunRecord`` per run
(``teamplay.training.run.sections.run_record``) and hands it to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel


@dataclass(frozen=True)
class RunRecord:
    """The run as its files record it.

    Fields:
        folder: the run folder (``output_dir``); checkpoints go in it.
        config: the run's config as JSON (``model_dump(mode="json")``), written into every checkpoint
            and compared on resume; read only (a reader that adds fields copies it first).
        schema: the config's class, which validates a checkpoint's saved config (fields added since it
            was written take their defaults: ``resume.with_defaults``).
        keep_checkpoints: how many checkpoints the folder keeps (None: every one).
    """

    folder: Path
    config: Mapping[str, Any]
    schema: type[BaseModel]
    keep_checkpoints: int | None
