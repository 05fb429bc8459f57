"""``team.yaml``: everything an exported team needs besides its adapter weights, as one typed file.

An export folder (``teamplay export``) holds ``adapters/<name>/`` (one PEFT adapter per adapter
name of the model-played roles) and this file, which says how the adapters make a team:

    format: teamplay-team/1
    base_model: smollm2-135m            # what teamplay loads; the model card names its hub id
    dtype: float32
    lora: {r: 8, alpha: 16, dropout: 0.0, target_modules: all-linear}
    task: {name: arith, split: test, ..., answer_format: "End with 'The answer is X.'"}
    protocol: {name: proposer_reviewer, options: {rounds: 3}}
    team: {roles: [{name: proposer, count: 1, prompt: "...", adapter: proposer, trainable: true}, ...]}
    adapters: {proposer: {path: adapters/proposer, trainable: true}, ...}
    decoding: {max_new_tokens: 256, temperature: 0.0, top_p: 1.0, top_k: 0}
    controllers: null                   # or mode, prices, stages and the learned tables
    max_prompt_tokens: 1536
    seed: 0

Every role carries its full system prompt (the protocol's default written out) and, unless a
scripted policy plays it, the adapter it writes with; the system message a role sees is its prompt,
a space, and ``task.answer_format``. A protocol or task given as a file is copied into the export
and named by its path inside it. ``TeamFile.eval_data`` turns the file into the sections of an
``EvalConfig`` whose adapters and controller tables load from the export folder alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from teamplay.agents.roles import Team
from teamplay.config import (
    ControllerConfig,
    LoraConfig,
    ProtocolConfig,
    SamplingConfig,
    TaskConfig,
    format_validation_error,
    read_yaml,
)
from teamplay.errors import ConfigError
from teamplay.training.wiring.controllers import EXPORT_TEAM_FILE

FORMAT = "teamplay-team/1"
#: folder of an export that holds one PEFT adapter per adapter name
ADAPTERS_DIR = "adapters"


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class TeamTask(TaskConfig):
    """The task the team was trained for (its held-out selection), and how answers must be stated."""

    answer_format: str = Field(description="The task's answer instruction, appended to every role's "
                                           "system prompt (e.g. \"End with 'The answer is X.'\").")


class AdapterEntry(_Spec):
    """One exported adapter."""

    path: str = Field(description="Folder of the adapter inside the export (adapters/<name>), in the "
                                  "standard PEFT layout: PeftModel.from_pretrained(base, path) or a vLLM "
                                  "LoRARequest loads it.")
    trainable: bool = Field(description="Whether training updated it (False: a frozen adapter, kept as "
                                        "it was initialised or loaded).")
    base_model: str = Field(description="The base model it adapts (the team's base_model unless a role "
                                        "names its own).")


class ExportedControllers(ControllerConfig):
    """The learned speak/skip controllers: their evaluation settings and regret tables."""

    tables: list[dict[str, Any]] = Field(description="TeamControllers.state_dict()['tables']: one regret "
                                                     "matcher per (agent, stage); the average strategy "
                                                     "of a state is strategy_sum / sum(strategy_sum), "
                                                     "index 0 = skip, 1 = speak.")


class TeamFile(_Spec):
    """The content of ``team.yaml`` (see the module docstring)."""

    format: str = Field(FORMAT, description="Version of this file's layout.")
    base_model: str = Field(description="Base model as teamplay loads it: hub id, local path or alias.")
    dtype: str = Field("float32", description="Weights dtype the team was trained in.")
    lora: LoraConfig = Field(description="LoRA shape shared by every adapter.")
    task: TeamTask = Field(description="Task and answer format.")
    protocol: ProtocolConfig = Field(description="How the team talks: protocol name and options.")
    team: Team = Field(description="Roles in protocol order, each with its full prompt, its adapter "
                                   "(model-played roles) or its scripted policy.")
    adapters: dict[str, AdapterEntry] = Field(description="Adapter name -> its folder and whether it trained.")
    decoding: SamplingConfig = Field(description="Sampling settings the team is evaluated with.")
    controllers: ExportedControllers | None = Field(None, description="Learned speak/skip controllers; "
                                                                      "None: every turn speaks.")
    max_prompt_tokens: int = Field(1536, ge=16, description="Prompt budget of one turn.")
    seed: int = Field(0, description="Seed of env resets and sampling.")

    @model_validator(mode="after")
    def _adapters_cover_roles(self) -> TeamFile:
        if self.format != FORMAT:
            raise ValueError(f"format: {self.format!r} is not {FORMAT!r}; export the run again with this "
                             f"teamplay version")
        used = set(self.team.adapter_names())
        missing = sorted(used - set(self.adapters))
        if missing:
            raise ValueError(f"adapters: no entry for {', '.join(missing)} (used by team.roles)")
        return self

    def eval_data(self, folder: Path) -> dict[str, Any]:
        """The sections of an ``EvalConfig`` for the export in ``folder``: its adapters and
        controller tables load from there (``model.checkpoint``); files it bundles (a protocol or
        task file) are named by their path there."""
        task = self.task.model_dump(mode="json", exclude={"answer_format"})
        task["name"] = _in_folder(task["name"], folder)
        controllers = ({"enabled": False} if self.controllers is None
                       else self.controllers.model_dump(mode="json", exclude={"tables"}))
        return {
            "task": task,
            # every protocol field, not its name and options alone: a run's channel and its rule for cut
            # messages are how its team plays, and the export must play the same
            "protocol": {**self.protocol.model_dump(mode="json"), "name": _in_folder(self.protocol.name, folder)},
            "team": self.team.model_dump(mode="json", exclude_none=True),
            "model": {"name": self.base_model, "dtype": self.dtype, "lora": self.lora.model_dump(mode="json"),
                      "checkpoint": str(folder)},
            "controllers": controllers,
            "backend": {"max_prompt_tokens": self.max_prompt_tokens},
            "sampling": self.decoding.model_dump(mode="json"),
            "seed": self.seed,
        }

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False,
                              allow_unicode=True, width=100)


def read_team_file(folder: Path) -> TeamFile:
    """The ``team.yaml`` of an export folder; a ConfigError naming the file and the field."""
    path = Path(folder) / EXPORT_TEAM_FILE
    try:
        return TeamFile.model_validate(read_yaml(path))
    except ValidationError as exc:
        raise ConfigError(f"{path}: {format_validation_error(exc)}") from None


def spec_file(spec: str) -> str:
    """The file part of a protocol or task spec (``x.py:Name`` -> ``x.py``); anything else unchanged."""
    head, sep, _ = spec.rpartition(":")
    return head if sep and head.endswith(".py") else spec


def bundled_name(spec: str) -> str | None:
    """Where a protocol or task given as a file (``x.yaml``, ``x.py``, ``x.py:Name``) goes in an
    export (``bundled/x.py:Name``); None for a registered name.

    >>> bundled_name("configs/protocols/solver_checker.yaml"), bundled_name("my/task.py:Quiz")
    ('bundled/solver_checker.yaml', 'bundled/task.py:Quiz')
    >>> bundled_name("debate") is None
    True
    """
    file = spec_file(spec)
    if Path(file).suffix.lower() not in (".yaml", ".yml", ".py"):
        return None
    return f"bundled/{Path(file).name}{spec[len(file):]}"


def _in_folder(spec: str, folder: Path) -> str:
    """``spec`` as a path inside ``folder`` when it names a file bundled there, else unchanged."""
    return str(folder / spec) if spec.startswith("bundled/") else spec
