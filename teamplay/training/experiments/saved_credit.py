"""Credit on saved episodes: try a credit method on an eval or run folder without training.

``teamplay credit FOLDER --method M`` reads the folder's episodes (``transcripts.jsonl`` of
``teamplay eval -o FOLDER``, or ``episodes.jsonl`` of a training run), groups them as the trainer
does (by ``group_id``), and runs the method on each group with the resources the trainer would
give it. The result is one row per utterance, so a user can inspect a method before paying for a
run. An eval with ``samples: 1`` gives groups of one episode, in which group-relative methods
assign 0 by definition: evaluate with ``--samples 4`` (and a temperature) to see them spread.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teamplay.config import EvalConfig, TrainConfig, build_config, read_yaml
from teamplay.credit import CreditBatch, CreditResources, assign, check_credit, get_credit
from teamplay.credit.values.characteristic import last_answer_scorer
from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.base import Task
from teamplay.errors import ConfigError
from teamplay.json_files import read_json
from teamplay.records import Episode, TaskItem
from teamplay.training.wiring.checks import TRAINER_RESOURCES
from teamplay.training.wiring.envs import load_items

#: resources available off-line (no model is loaded): everything the trainer gives but what needs one
SAVED_RESOURCES = TRAINER_RESOURCES - {"backend", "replay", "answer_probability", "listener", "judge"}


@dataclass(frozen=True)
class UtteranceCredit:
    """The advantage a method gave one message of a saved episode."""

    group_id: str
    problem_id: str
    episode: int
    message: int
    agent: str
    stage: str
    round: int
    spoke: bool
    advantage: float
    reward: float
    text: str

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def credit_saved(folder: str | Path, method: str, options: Mapping[str, Any] | None = None) -> list[UtteranceCredit]:
    """Run ``method`` (with ``options``) on every group of the episodes saved in ``folder``."""
    folder = Path(folder)
    task, episodes, items = _read_folder(folder)
    resolved = get_credit(method)  # looked up once (a user's file loaded once), run on every group
    parsed = check_credit(method, options, None, SAVED_RESOURCES, method=resolved)
    groups: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        groups[ep.group_id].append(ep)
    rows: list[UtteranceCredit] = []
    for group_id, group in groups.items():
        item = items[group[0].problem_id]
        batch = CreditBatch(episodes=tuple(group), item=item, score=task.score, extract=task.extract,
                            resources=CreditResources(transcript_scorer=last_answer_scorer(
                                lambda answer, item=item: task.score_answer(answer, item))))
        try:
            advantages = assign(method, batch, parsed, method=resolved)
        except ValueError as exc:  # the method refuses this group (e.g. a protocol it cannot read)
            raise ConfigError(f"credit method {method!r} on group {group_id}: {exc}") from None
        for g, (ep, adv) in enumerate(zip(group, advantages, strict=True)):
            for t, (m, a) in enumerate(zip(ep.messages, adv, strict=True)):
                rows.append(UtteranceCredit(group_id, ep.problem_id, g, t, m.agent, m.stage, m.round, m.spoke,
                                            float(a), ep.reward, m.text))
    return rows


def _read_folder(folder: Path) -> tuple[Task, list[Episode], dict[str, TaskItem]]:
    if not folder.is_dir():
        raise ConfigError(f"teamplay credit: {folder} is not a folder")
    if (folder / "transcripts.jsonl").is_file():  # an eval folder: items are in the rows
        config = _eval_config(folder)
        task = get_task(config.task.name, **config.task.options)
        rows = list(_jsonl(folder / "transcripts.jsonl"))
        episodes = [_episode(row, folder / "transcripts.jsonl", i) for i, row in enumerate(rows)]
        items = {ep.problem_id: TaskItem(id=ep.problem_id, prompt=row.get("prompt", ""),
                                         reference=str(row.get("reference", "")))
                 for ep, row in zip(episodes, rows, strict=True)}
        return task, episodes, items
    if (folder / "episodes.jsonl").is_file():  # a run folder: items come from its task config
        if not (folder / "config.yaml").is_file():
            raise ConfigError(f"teamplay credit: {folder} has episodes.jsonl but no config.yaml")
        config = build_config(TrainConfig, read_yaml(folder / "config.yaml"))
        task, items = load_items(config.task)
        path = folder / "episodes.jsonl"
        episodes = [_episode(row, path, i) for i, row in enumerate(_jsonl(path))]
        by_id = {item.id: item for item in items}
        missing = sorted({ep.problem_id for ep in episodes} - set(by_id))
        if missing:
            raise ConfigError(f"teamplay credit: problems {missing[:3]} of {folder}/episodes.jsonl are not in "
                              f"the run's task ({config.task.name}); was the data changed?")
        return task, episodes, by_id
    raise ConfigError(f"teamplay credit: {folder} holds no saved episodes (transcripts.jsonl of "
                      f"`teamplay eval -o`, or episodes.jsonl of a training run)")


def _eval_config(folder: Path) -> EvalConfig:
    results = folder / "results.json"
    if not results.is_file():
        raise ConfigError(f"teamplay credit: {folder} has transcripts.jsonl but no results.json (its config)")
    data = read_json(results, ConfigError, context="teamplay credit")
    return build_config(EvalConfig, data.get("config", {}))


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}:{n}: not a JSON line ({exc.msg})") from None


def _episode(row: Mapping[str, Any], path: Path, index: int) -> Episode:
    try:
        return Episode.from_dict(row)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: episode {index} is malformed ({type(exc).__name__}: {exc})") from None
