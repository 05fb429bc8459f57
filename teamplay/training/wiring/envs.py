"""What a run's episodes are played on: the task and its items (``load_items``) and the factory of
fresh envs with the validated team (``env_factory``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from teamplay.agents.roles import Team
from teamplay.config import ProtocolConfig, TaskConfig
from teamplay.envs.protocols import get_protocol
from teamplay.envs.protocols.base import Controller
from teamplay.envs.tasks import get_task
from teamplay.envs.tasks.base import Task
from teamplay.envs.team_env import TeamEnv
from teamplay.errors import ConfigError
from teamplay.records import TaskItem


def load_items(cfg: TaskConfig) -> tuple[Task, list[TaskItem]]:
    """The task object and its items as the config selects them (``distinct``: the first ``limit``
    distinct problems of the whole split, in order, distinct by ``Task.twin_key``; a ConfigError when
    the split has fewer)."""
    task = get_task(cfg.name, **cfg.options)
    if not cfg.distinct:
        return task, task.load(cfg.split, source=cfg.source, limit=cfg.limit, seed=cfg.seed)
    seen: set[str] = set()
    items = []
    for item in task.load(cfg.split, source=cfg.source, limit=None, seed=cfg.seed):
        key = task.twin_key(item)
        if key not in seen:
            seen.add(key)
            items.append(item)
    if cfg.limit is not None:
        if len(items) < cfg.limit:
            raise ConfigError(f"task {cfg.name} ({cfg.split}): limit {cfg.limit} with distinct: true, but the "
                              f"split has only {len(items)} distinct problems; lower the limit or use a larger "
                              f"problem space")
        items = items[:cfg.limit]
    return task, items


def env_factory(task: Task, protocol_cfg: ProtocolConfig, team: Team | None,
                controller: Controller | None = None) -> tuple[Callable[[], TeamEnv], Team]:
    """A factory of fresh envs and the (validated) team they use.

    ``controller`` (e.g. ``TeamControllers.controller("train")``) becomes the protocol's
    ``controller`` option; a protocol without skippable turns refuses it with a ConfigError.
    ``protocol_cfg.channel`` False builds no-channel envs (every message withheld from the other
    agents). Building one env up front validates the protocol and team, so config errors surface before
    any model is loaded.
    """
    options = dict(protocol_cfg.options)
    if controller is not None:
        if "controller" in options:
            raise ConfigError("protocol.options.controller: set controllers in the `controllers:` "
                              "section, not as a protocol option")
        options["controller"] = controller
    try:
        protocol = get_protocol(protocol_cfg.name, **options)
    except ConfigError as exc:
        if controller is not None and "unknown option 'controller'" in str(exc):
            raise ConfigError(f"controllers.enabled: protocol {protocol_cfg.name!r} has no skippable "
                              f"turns (use proposer_reviewer, debate, or a YAML protocol with "
                              f"`skippable: true`)") from None
        raise
    reading = dict(channel=protocol_cfg.channel, score_cut_messages=protocol_cfg.score_cut_messages)
    probe = TeamEnv(task, protocol, team, **reading)
    return partial(TeamEnv, task, protocol, probe.team, **reading), probe.team
