"""``teamplay credit --check``: how far each named credit method's advantages follow the true advantage
on a user's own team and task, before any training.

The untrained team plays ``problems`` problems of the config's task ``group`` times each (groups as
in training); the true advantage of every spoken message, ``A*(u_t) = V(t + 1) - V(t)``, is
estimated by re-execution (``oracle.PrefixValues``, ``samples`` re-executions per prefix, on a seed
of its own); each method then credits the same episodes through the trainer's own credit stage
(``credit_stage.CreditStage``: the same resources, replays and zero-variance rule as training), and
its agreement with ``A*`` is measured (``teamplay.credit.audit.fidelity.agreement``: Pearson and Spearman
with 95% intervals from a bootstrap over problems, sign agreement where ``|A*| > 0.1``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from teamplay.config import CreditConfig, TrainConfig
from teamplay.credit.audit.fidelity import Agreement, agreement
from teamplay.errors import ConfigError
from teamplay.training.play.judge import BackendJudge
from teamplay.training.play.prefix_values import PrefixValues
from teamplay.training.play.rollout import RolloutJob, RolloutRunner
from teamplay.training.step.credit_stage import CreditStage
from teamplay.training.step.stages import GroupWork, StepContext, informative, make_groups
from teamplay.training.wiring.backend import build_judge_backend
from teamplay.training.wiring.checks import check_run
from teamplay.training.wiring.wired_run import build_run

#: |A*| above which a message counts as clearly helping or hurting (sign agreement)
THRESHOLD = 0.1


@dataclass(frozen=True)
class FidelityRow:
    """One method's agreement with the true advantage.

    Fields: method; fit (the agreement over every spoken message, ``Agreement``); counterfactual_tokens
    (tokens its replays generated); groups (the groups the zero-variance rule kept for it).
    """

    method: str
    fit: Agreement
    counterfactual_tokens: int
    groups: int


def check_fidelity(cfg: TrainConfig, methods: Sequence[str], problems: int = 8, group: int = 4,
                   samples: int = 8, seed: int = 0) -> tuple[list[FidelityRow], int]:
    """(one row per method, the oracle's generated tokens). Every method is checked against the
    config (it exists, takes its default options, works with the protocol) before the model loads."""
    if problems < 1 or group < 1 or samples < 1:
        raise ConfigError(f"credit --check: problems, group and samples must be >= 1, got {problems}, {group}, "
                          f"{samples}")
    configs = [cfg.model_copy(update={"credit": CreditConfig(method=m)}) for m in methods]
    checked = [check_run(c) for c in configs]
    run = build_run(cfg)
    try:
        items = run.items[:problems]
        by_id = {item.id: item for item in items}
        runner = RolloutRunner(run.make_env, run.backend, run.sampling, max_batch=cfg.backend.max_batch)
        jobs = [RolloutJob(item=item, group_id=f"check:{k}:{item.id}")
                for k, item in enumerate(items) for _ in range(group)]
        episodes = runner.run(jobs, seed=seed)
        oracle = PrefixValues(run.make_env, run.backend, run.sampling, samples=samples, max_batch=cfg.backend.max_batch,
                              seed=seed + 7919)
        true = {id(ep): np.diff(v) for ep, v in zip(episodes, oracle.values(episodes, by_id), strict=True)}
        groups = make_groups(episodes, by_id)
        ctx = StepContext(0, frozenset(), tuple(episodes))  # as a run's first step sees them
        judge = None  # one judge for every method that asks for one (the run's base, adapters off)
        if any("judge" in c.credit_needs for c in checked):
            judge = BackendJudge(build_judge_backend(None, cfg.model, cfg.backend, cfg.distributed, run.team_model,
                                                     run.backend))
        rows = [_row(CreditStage(c, run, cfg.sampling, cfg.backend, cfg.seed,
                                 judge if "judge" in c.credit_needs else None), groups, ctx, true, seed)
                for c in checked]
    finally:  # the backend this check built (never one of the caller's: build_run made it)
        if run.owns_backend:
            run.backend.close()
    return rows, oracle.generated_tokens


def _row(stage: CreditStage, groups: Sequence[GroupWork], ctx: StepContext, true: dict[int, np.ndarray],
         seed: int) -> FidelityRow:
    """One method's row: ``stage`` credits ``groups``, the zero-variance rule keeps what training
    would, and every spoken message's advantage (0 in a group not kept) is set beside its ``A*``
    (``true``, by episode identity)."""
    kept = informative(stage(groups, ctx))
    credited = {id(ep): adv for work in kept for ep, adv in work.credited}
    m, o, clusters = [], [], []
    for ep in ctx.episodes:
        adv = credited.get(id(ep), np.zeros(len(ep.messages)))
        for t, msg in enumerate(ep.messages):
            if msg.spoke:
                m.append(float(adv[t]))
                o.append(float(true[id(ep)][t]))
                clusters.append(ep.problem_id)
    extra = stage.replay.stats.extra_tokens if stage.replay is not None else 0
    return FidelityRow(stage.method, agreement(m, o, clusters, threshold=THRESHOLD, seed=seed), extra, len(kept))
