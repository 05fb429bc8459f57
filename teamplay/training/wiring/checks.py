"""Every refusal of an option combination a training run meets, in one place: ``check_run`` before a
data set or model loads (what it parsed: ``CheckedRun``), and ``check_wired`` right after the run is
wired, for the few that must see the model or backend (its dtype, its bases, the backend's kind), before
any part of the run (a cluster's workers, the generator's copy) starts. The config model's own
cross-field rules run earlier, at load (``teamplay.config.runs``).

Whether a run's rollouts are asynchronous is decided here too (``asynchronous``), for every module
that asks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from teamplay.agents.roles import Team
from teamplay.config import RolloutConfig, TeamTrainingConfig, TokenCreditConfig, TrainConfig
from teamplay.config.warm_start import WarmStartConfig, untaught_roles
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
        credit_method: the credit method, as the config names it (``credit.method``).
        credit_options: the credit method's options, parsed by the method's own model.
        credit_needs: the resources the method asks for with those options (``"replay"``, ...).
        token_method: the token-level credit method (``credit.token``), or None.
        token_options: its options, parsed (None without ``credit.token``).
        credit: the registered method ``credit_method`` resolved to, looked up once here (a user's
            file is loaded once); every later stage runs this one.
    """

    credit_method: str
    credit_options: Any
    credit_needs: frozenset[str]
    token_method: Any = None
    token_options: Any = None
    credit: Any = None


def asynchronous(rollout: RolloutConfig) -> bool:
    """Whether a run's rollouts are generated ahead by a generator thread (``rollout.max_staleness``
    set, 0 included: ``teamplay.training.run.asynchronous``) rather than by the step itself."""
    return rollout.max_staleness is not None


def check_run(cfg: TeamTrainingConfig, provided: frozenset[str] = TRAINER_RESOURCES,
              task_given: bool = False) -> CheckedRun:
    """The one validation pass of a training run after the config model's own (pydantic) checks and
    before a model or data set loads: the task and protocol exist and take their options, the credit
    method exists, takes its options, works with the protocol and gets every resource it needs
    (``provided``), the token method exists and takes its options; the sections that name roles name
    the team's (``team:``, or the protocol's default team: ``check_token_roles``, ``check_warm_start``);
    and the combinations a run cannot take (``check_combinations``; ``task_given``: the run's task is
    given in Python, ``Trainer(task=...)``). Raises ConfigError (one line)."""
    from teamplay.credit import get_credit
    from teamplay.credit.token.base import parse_token_options

    TASKS.get(cfg.task.name)
    if cfg.eval_task is not None:
        TASKS.get(cfg.eval_task.name)
    protocol = get_protocol(cfg.protocol.name, **cfg.protocol.options)
    credit = get_credit(cfg.credit.method)  # the one lookup of the method's name
    options = check_credit(cfg.credit.method, cfg.credit.options, protocol, provided, method=credit)
    needs = frozenset(credit.requires(options))
    if cfg.credit.judge_model is not None and "judge" not in needs:
        raise ConfigError(f"credit.judge_model: credit method {cfg.credit.method!r} with these options uses no "
                          f"judge; remove judge_model, or use a judge (shapley with value: judge)")
    team = cfg.team if cfg.team is not None else protocol.default_team()  # the team the run's envs play
    check_token_roles(cfg.credit.token, team)
    if isinstance(cfg, TrainConfig):  # a federated run is synchronous, without curriculum, cluster or warm start
        check_engine_owner(cfg, needs)
        check_combinations(cfg, task_given)
        if cfg.warm_start is not None:
            check_warm_start(cfg.warm_start, protocol.name, team)
    token = cfg.credit.token
    if token is None:
        return CheckedRun(cfg.credit.method, options, needs, credit=credit)
    method = get_token_credit(token.method)
    return CheckedRun(cfg.credit.method, options, needs, method, parse_token_options(method, token.options),
                      credit=credit)


def check_engine_owner(cfg: TrainConfig, needs: frozenset[str]) -> None:
    """Asynchronous rollouts on the vllm backend in one process give the engine to the generator
    thread (``teamplay.training.run.asynchronous.generation``): a credit method that generates with the
    run's backend on the learner's thread (re-executions, continuations, a judge on the base) is
    refused, in one line."""
    if not asynchronous(cfg.rollout) or cfg.backend.name != "vllm" or cfg.distributed is not None:
        return
    generating = needs & {"backend", "replay"} | ({"judge"} & needs if cfg.credit.judge_model is None else set())
    if generating:
        raise ConfigError(f"credit.method: {cfg.credit.method!r} generates with the run's vllm engine "
                          f"({', '.join(sorted(generating))}), which asynchronous rollouts give to the generator "
                          f"thread; use a credit method that does not re-generate, backend.name: hf, or drop "
                          f"rollout.max_staleness")


def check_combinations(cfg: TrainConfig, task_given: bool) -> None:
    """The combinations of sections a run refuses that need no registry, model or data: a curriculum
    stage that changes the task of a run whose task is given in Python (``task_given``), and a CPU
    count for a Ray cluster the run does not start."""
    if task_given and cfg.curriculum is not None:
        from teamplay.config.curriculum import stage_sections

        for i, stage in enumerate(cfg.curriculum.stages):
            task = stage_sections(cfg.task, cfg.protocol, cfg.team, stage)[0]
            if task.model_dump(mode="json") != cfg.task.model_dump(mode="json"):
                raise ConfigError(f"curriculum.stages[{i}].task: this run's task is given in Python "
                                  f"(Trainer(task=...)), so a stage cannot change its options")
    dist = cfg.distributed
    if dist is not None and dist.address != "local" and dist.local_cpus is not None:
        raise ConfigError(f"distributed.local_cpus: only for address 'local' (address is {dist.address!r}); "
                          f"a running cluster's CPUs are set by `ray start --num-cpus`")


def check_token_roles(token: TokenCreditConfig | None, team: Team) -> None:
    """``credit.token.roles`` names roles of ``team`` (ConfigError naming the others)."""
    if token is None or token.roles is None:
        return
    names = {role.name for role in team.roles}
    unknown = sorted(set(token.roles) - names)
    if unknown:
        raise ConfigError(f"credit.token.roles: {', '.join(unknown)} is not a role of the team; "
                          f"roles: {', '.join(sorted(names))}")


def check_warm_start(ws: WarmStartConfig, protocol: str, team: Team) -> None:
    """The roles a warm start ``ws`` fine-tunes (``ws.roles``, or every model-played role of ``team``)
    are the team's, played by the model, taught (``source: teacher``: each model-played role has a
    teacher in ``protocol``, its name, since every role plays in the teacher team), and write with at
    least one trainable adapter. Raises ConfigError naming the roles."""
    played = [r.name for r in team.roles if not r.scripted]
    roles = played if ws.roles is None else list(ws.roles)
    if ws.roles is not None:
        unknown = [r for r in ws.roles if r not in {role.name for role in team.roles}]
        if unknown:
            raise ConfigError(f"warm_start.roles: {', '.join(unknown)} is not a role of the team; roles: "
                              f"{', '.join(r.name for r in team.roles)}")
        scripted = [r for r in ws.roles if r not in played]
        if scripted:
            raise ConfigError(f"warm_start.roles: {', '.join(scripted)} is played by a scripted policy and has "
                              f"no adapter to fine-tune")
    if ws.source == "teacher":
        refusal = untaught_roles(ws, protocol, played)
        if refusal is not None:
            raise ConfigError(refusal)
    # an adapter trains unless every role writing with it is frozen (``TeamModel.from_team``)
    trainable = {r.adapter_name for r in team.roles if not r.scripted and r.trainable}
    if not any(r.adapter_name in trainable for r in team.roles if r.name in roles):
        raise ConfigError(f"warm_start.roles: {', '.join(roles)} write only with frozen adapters; "
                          f"nothing to fine-tune")


def check_wired(cfg: TrainConfig, checked: CheckedRun, team_model, backend) -> None:
    """The refusals that must see the wired run (``wired_run.build_run``): the team model
    ``team_model`` (its dtype, its bases) and this process's generation ``backend``; run right after
    the wiring, before any part of the run starts. A team over several bases has no one base for a
    judge without ``credit.judge_model``, nor a warm start yet; asynchronous rollouts in one process
    generate with a copy of the adapters (the hf or vllm backend over one base), and with
    ``max_staleness`` > 0 must correct stale rollouts with the generation's log-probs. Raises
    ConfigError (one line)."""
    from teamplay.training.learn.update import old_logprob_source

    several_bases = getattr(team_model, "parts", None) is not None
    if several_bases and "judge" in checked.credit_needs and cfg.credit.judge_model is None:
        raise ConfigError("credit.judge_model: this team has several base models, so the judge cannot be "
                          "'the base model with adapters off'; name the judge's model in credit.judge_model")
    if several_bases and cfg.warm_start is not None:
        raise ConfigError("warm_start: a team whose roles use several base models is not supported yet; "
                          "drop the warm_start section")
    if not asynchronous(cfg.rollout):
        return
    if cfg.distributed is None and (hasattr(team_model, "part") or one_process_kind(backend) is None):
        raise ConfigError("rollout.max_staleness: asynchronous rollouts in one process need the hf or vllm "
                          "backend over one base model and no scripted role (the generator generates with "
                          "its own copy of the adapters)")
    if cfg.rollout.max_staleness > 0 and old_logprob_source(cfg.objective, cfg.backend, team_model) != "generation":
        raise ConfigError("objective.old_logprobs: auto resolves to trainer for this model (half precision), "
                          "which would leave stale rollouts uncorrected; with rollout.max_staleness > 0 set "
                          "objective.old_logprobs: generation (or model.dtype: float32)")


def one_process_kind(backend) -> str | None:
    """``"hf"`` or ``"vllm"`` when ``backend`` is an ``HFBackend`` or a ``VLLMBackend`` (imported only
    then: vLLM is optional), the backends a generator's copy of the adapters can be served by; else None."""
    from teamplay.agents.backends.hf import HFBackend

    if isinstance(backend, HFBackend):
        return "hf"
    if getattr(backend, "name", None) != "vllm":
        return None
    from teamplay.agents.backends.vllm import VLLMBackend

    return "vllm" if isinstance(backend, VLLMBackend) else None
