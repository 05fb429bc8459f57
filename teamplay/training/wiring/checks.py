"""The one validation pass of a training run before a data set or model loads (``check_run``), and
what it parsed (``CheckedRun``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from teamplay.config import TrainConfig
from teamplay.credit import check_credit
from teamplay.credit.token import get_token_credit
from teamplay.envs.protocols import get_protocol
from teamplay.envs.tasks import TASKS
from teamplay.errors import ConfigError

#: resources the trainer hands credit methods (``CreditResources`` fields it sets; ``replay``,
#: ``answer_probability``, ``listener`` and ``judge`` only when the method needs them; the token
#: statistics go to the token method, after the message method)
TRAINER_RESOURCES = frozenset({"transcript_scorer", "backend", "batch_rewards", "replay", "answer_probability",
                               "listener", "judge"})


@dataclass(frozen=True)
class CheckedRun:
    """A training config that passed every check needing no data set or model (``check_run``), with
    what those checks parsed, so no later stage parses the config again.

    Fields:
        cfg: the config.
        credit_options: the credit method's options, parsed by the method's own model.
        credit_needs: the resources the method asks for with those options (``"replay"``, ...).
        token_method: the token-level credit method (``credit.token``), or None.
        token_options: its options, parsed (None without ``credit.token``).
    """

    cfg: TrainConfig
    credit_options: Any
    credit_needs: frozenset[str]
    token_method: Any = None
    token_options: Any = None


def check_run(cfg: TrainConfig, provided: frozenset[str] = TRAINER_RESOURCES) -> CheckedRun:
    """The one validation pass of a training run after the config model's own (pydantic) checks and
    before a model or data set loads: the task and protocol exist and take their options, the credit
    method exists, takes its options, works with the protocol and gets every resource it needs
    (``provided``), the token method exists and takes its options. Raises ConfigError (one line)."""
    from teamplay.credit import get_credit
    from teamplay.credit.token.base import parse_token_options

    TASKS.get(cfg.task.name)
    if cfg.eval_task is not None:
        TASKS.get(cfg.eval_task.name)
    protocol = get_protocol(cfg.protocol.name, **cfg.protocol.options)
    options = check_credit(cfg.credit.method, cfg.credit.options, protocol.name, provided)
    needs = frozenset(get_credit(cfg.credit.method).requires(options))
    if cfg.credit.judge_model is not None and "judge" not in needs:
        raise ConfigError(f"credit.judge_model: credit method {cfg.credit.method!r} with these options uses no "
                          f"judge; remove judge_model, or use a judge (shapley with value: judge)")
    check_engine_owner(cfg, needs)
    token = cfg.credit.token
    if token is None:
        return CheckedRun(cfg, options, needs)
    method = get_token_credit(token.method)
    return CheckedRun(cfg, options, needs, method, parse_token_options(method, token.options))


def check_engine_owner(cfg: TrainConfig, needs: frozenset[str]) -> None:
    """Asynchronous rollouts on the vllm backend in one process give the engine to the generator
    thread (``teamplay.training.run.async_generation``): a credit method that generates with the
    run's backend on the learner's thread (re-executions, continuations, a judge on the base) is
    refused, in one line."""
    if cfg.rollout.max_staleness is None or cfg.backend.name != "vllm" or cfg.distributed is not None:
        return
    generating = needs & {"backend", "replay"} | ({"judge"} & needs if cfg.credit.judge_model is None else set())
    if generating:
        raise ConfigError(f"credit.method: {cfg.credit.method!r} generates with the run's vllm engine "
                          f"({', '.join(sorted(generating))}), which asynchronous rollouts give to the generator "
                          f"thread; use a credit method that does not re-generate, backend.name: hf, or drop "
                          f"rollout.max_staleness")
