"""Heterogeneous teams: several base models, each with the LoRA adapters of its own roles.

A role may name its own base (``team.roles[].model``), e.g. a 7B proposer and a 1.5B reviewer.
``MultiBaseTeamModel`` holds one ``TeamModel`` per base and routes every per-adapter call to the
base that owns the adapter, so the trainer, the checkpoints and the backends see one set of named
adapters as with a single base:

- ``adapter_parameters``, ``trainable_parameters``, ``completion_logprobs(adapter=...)``,
  ``reference_logprobs`` go to the owning base (the KL reference of an adapter is its own base);
- ``save_adapters`` writes every adapter of every base into one folder in the standard format
  (one PEFT subfolder per adapter and one manifest), so checkpoints do not change;
- ``load_adapters`` gives each base the subfolders of its own adapters.

Roles sharing a base share its single copy; adapter names are unique across the team.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch

from teamplay.agents.team_model import MANIFEST, TeamModel
from teamplay.atomic import staged_folder
from teamplay.errors import ConfigError, ModelLoadError


class MultiBaseTeamModel:
    """Team models on different bases behind the ``TeamModel`` interface used by training.

    Args:
        parts: base name -> its ``TeamModel``; their adapter names must not overlap.
    """

    def __init__(self, parts: Mapping[str, TeamModel]) -> None:
        if not parts:
            raise ConfigError("a multi-base team model needs at least one base")
        self.parts = dict(parts)
        self._owner: dict[str, str] = {}
        for base, part in self.parts.items():
            for name in part.adapter_names:
                if name in self._owner:
                    raise ConfigError(f"adapter {name!r} is on two bases ({self._owner[name]!r}, {base!r})")
                self._owner[name] = base

    # ------------------------------------------------------------------ adapters
    @property
    def adapter_names(self) -> tuple[str, ...]:
        return tuple(self._owner)

    @property
    def frozen(self) -> frozenset[str]:
        return frozenset(n for part in self.parts.values() for n in part.frozen)

    @property
    def device(self) -> torch.device:
        return next(iter(self.parts.values())).device

    def part(self, adapter: str) -> TeamModel:
        """The team model of the base that owns ``adapter``."""
        if adapter not in self._owner:
            raise ConfigError(f"unknown adapter {adapter!r}; this team has {list(self._owner)}")
        return self.parts[self._owner[adapter]]

    def base_of(self, adapter: str) -> str:
        self.part(adapter)
        return self._owner[adapter]

    def adapter_parameters(self, name: str) -> list[torch.nn.Parameter]:
        return self.part(name).adapter_parameters(name)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for name in self.adapter_names if name not in self.frozen for p in self.adapter_parameters(name)]

    # ------------------------------------------------------------------ log-probs
    def completion_logprobs(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                            adapter: str | None, temperature: float = 1.0, return_distributions: bool = False,
                            share_prompts: bool = False):
        """``TeamModel.completion_logprobs`` on the base that owns ``adapter`` (which is required:
        with several bases, "the base model" is ambiguous; use ``reference_logprobs``)."""
        if adapter is None:
            raise ValueError("a multi-base team scores with a named adapter; the reference policy of an "
                             "adapter is reference_logprobs(..., adapter)")
        return self.part(adapter).completion_logprobs(prompt_ids, completion_ids, adapter, temperature,
                                                      return_distributions=return_distributions,
                                                      share_prompts=share_prompts)

    def reference_logprobs(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                           adapter: str, temperature: float = 1.0, return_distributions: bool = False,
                           share_prompts: bool = True):
        """Log-probs under ``adapter``'s own base with adapters disabled (the KL reference)."""
        return self.part(adapter).reference_logprobs(prompt_ids, completion_ids, adapter, temperature,
                                                     return_distributions=return_distributions,
                                                     share_prompts=share_prompts)

    # ------------------------------------------------------------------ save / load
    def save_adapters(self, folder: str | Path) -> Path:
        """Every adapter of every base in one folder, as ``TeamModel.save_adapters`` writes it."""
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        with staged_folder(folder, sync=False) as tmp:  # as TeamModel.save_adapters: its callers fsync
            for i, part in enumerate(self.parts.values()):
                # each base writes its own set, whose subfolders then move into the team's one
                staged = part.save_adapters(tmp / f".base{i}")
                for name in part.adapter_names:
                    (staged / name).rename(tmp / name)
                shutil.rmtree(staged)
            (tmp / MANIFEST).write_text(json.dumps(
                {"adapters": list(self.adapter_names), "frozen": sorted(self.frozen),
                 "bases": {name: self._owner[name] for name in self.adapter_names}}, indent=2))
        return folder

    def load_adapters(self, folder: str | Path) -> tuple[str, ...]:
        """Load each base's adapters from ``folder``; an adapter no base owns is an error."""
        folder = Path(folder)
        subdirs = {p.name: p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")} \
            if folder.is_dir() else {}
        unknown = sorted(set(subdirs) - set(self._owner))
        if unknown:
            raise ModelLoadError(f"adapters {unknown} in {str(folder)!r} belong to no base of this team "
                                 f"({dict(self._owner)})")
        loaded: list[str] = []
        with tempfile.TemporaryDirectory() as view:
            for i, part in enumerate(self.parts.values()):
                mine = [n for n in part.adapter_names if n in subdirs]
                if not mine:
                    continue
                sub = Path(view) / f"base-{i}"
                sub.mkdir()
                for name in mine:
                    (sub / name).symlink_to(subdirs[name].resolve(), target_is_directory=True)
                loaded.extend(part.load_adapters(sub))
        if not loaded:
            raise ModelLoadError(f"no adapters of this team in {str(folder)!r}")
        return tuple(loaded)
