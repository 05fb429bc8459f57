"""The configs of whole runs, built from the sections, and the rules that involve several sections.

``EvalConfig`` is `teamplay eval`; ``TeamTrainingConfig`` holds the sections every run that trains a
team sets, ``TrainConfig`` (`teamplay train`) and ``FederatedConfig`` (`teamplay federate`) add
their own. A rule that reads one section is that section's validator (in its module); a rule that
reads several is a validator here, on the run model that has them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from teamplay.agents.roles import Team
from teamplay.config.base import Section
from teamplay.config.controllers import ControllerConfig
from teamplay.config.credit import CreditConfig
from teamplay.config.curriculum import CurriculumConfig, check_stages
from teamplay.config.distributed import DistributedConfig
from teamplay.config.env import ProtocolConfig, TaskConfig
from teamplay.config.federated import FederatedSection
from teamplay.config.learning import ObjectiveConfig, OptimConfig, RolloutConfig
from teamplay.config.model import BackendConfig, ModelConfig, SamplingConfig
from teamplay.config.warm_start import WarmStartConfig, check_teachers


def _check_backend_fits_model(backend: BackendConfig, model: ModelConfig) -> None:
    """The vllm backend serves LoRA adapters (every team has them) only in bfloat16/float16: refused
    here, before the model loads, rather than by the engine after it."""
    from teamplay.agents.backends.vllm import LORA_DTYPES, lora_dtype_refusal

    if backend.name == "vllm" and model.dtype not in LORA_DTYPES:
        raise ValueError(lora_dtype_refusal(model.dtype))


class EvalConfig(Section):
    """A whole evaluation run (`teamplay eval`)."""

    task: TaskConfig = Field(default_factory=TaskConfig, description="Benchmark items.")
    protocol: ProtocolConfig = Field(default_factory=lambda: ProtocolConfig(score_cut_messages=False),
                                     description="Team protocol (score_cut_messages: false unless given).")
    team: Team | None = Field(None, description="Roles; None uses the protocol's default team.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Base model.")
    controllers: ControllerConfig = Field(
        default_factory=ControllerConfig, description="Learned speak/skip controllers; their tables come "
                                                      "from model.checkpoint (teamplay eval --checkpoint).")
    backend: BackendConfig = Field(default_factory=BackendConfig, description="Generation backend.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Decoding.")
    samples: int = Field(1, ge=1, description="Episodes per problem.")
    seed: int = Field(0, description="Seed of env resets and sampling.")
    output_dir: str = Field("runs/eval", description="Folder for results.json and transcripts.jsonl.")
    withhold_messages: bool = Field(
        False, description="Information use: after the evaluation, replay every episode once per message with "
                           "that message withheld (teammates read '(no message)'; later turns generated again "
                           "with `sampling`) and report how often the team's final answer changes, per role "
                           "and overall, with the extra tokens it cost (`extra.cooperation.withholding`).")
    self_consistency: bool = Field(
        False, description="Self-consistency baseline: the team's answering role alone (its adapter) solves "
                           "each problem, sampled at `self_consistency_temperature` until its tokens reach "
                           "what the team generated on that problem; its majority answer's accuracy is "
                           "reported beside the team's (`extra.cooperation.self_consistency`).")
    self_consistency_temperature: float = Field(
        1.0, gt=0, description="Sampling temperature of the self-consistency baseline (the training "
                               "decoding's default, 1.0).")
    self_consistency_max_samples: int = Field(
        64, ge=1, description="Most samples per problem of the self-consistency baseline.")

    @model_validator(mode="before")
    @classmethod
    def _cut_messages_unscored(cls, data: Any) -> Any:
        """An evaluation leaves a message cut at max_new_tokens unscored unless the config says
        otherwise (``protocol.score_cut_messages``); training runs score it, as their recorded numbers do."""
        if isinstance(data, Mapping) and isinstance(data.get("protocol"), Mapping):
            data = {**data, "protocol": {"score_cut_messages": False, **data["protocol"]}}
        return data

    @model_validator(mode="after")
    def _backend_fits_model(self) -> EvalConfig:
        _check_backend_fits_model(self.backend, self.model)
        return self


class TeamTrainingConfig(Section):
    """The sections every run that trains a team sets: data, team, model, decoding, credit, loss,
    optimiser, rollouts, logs. ``TrainConfig`` adds what only a single run has (its length,
    evaluation schedule, checkpoints, controllers, Ray scale-out); ``FederatedConfig`` adds the
    federation, and builds each site's ``TrainConfig`` from these sections."""

    task: TaskConfig = Field(default_factory=lambda: TaskConfig(split="train"), description="Training items.")
    eval_task: TaskConfig | None = Field(None, description="Held-out items (None = no held-out eval).")
    protocol: ProtocolConfig = Field(default_factory=ProtocolConfig, description="Team protocol.")
    team: Team | None = Field(None, description="Roles; None uses the protocol's default team.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Base model and LoRA.")
    backend: BackendConfig = Field(default_factory=BackendConfig, description="Generation backend.")
    sampling: SamplingConfig = Field(
        default_factory=lambda: SamplingConfig(temperature=1.0), description="Decoding for training "
                                                                             "rollouts.")
    eval_sampling: SamplingConfig = Field(default_factory=SamplingConfig,
                                          description="Decoding for held-out evaluation (greedy).")
    credit: CreditConfig = Field(default_factory=CreditConfig, description="Credit assignment.")
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig, description="Loss.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimiser.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Rollout sizes.")
    alternate_roles_every: int | None = Field(
        None, ge=1, description="Train one adapter at a time, switching every k steps (None = all).")
    keep_checkpoints: int = Field(2, ge=1, description="Keep the last k checkpoints.")
    output_dir: str = Field("runs/train", description="Run folder.")
    seed: int = Field(0, description="Seed of data order, rollouts and minibatches.")
    log_episodes: int = Field(2, ge=0, description="Credited episodes per step written to "
                                                   "episodes.jsonl (for reports).")
    tensorboard: bool = Field(True, description="Also log metrics to TensorBoard.")
    wandb_project: str | None = Field(None, description="Also log to this wandb project (needs wandb).")

    @model_validator(mode="after")
    def _rollouts_can_train(self) -> TeamTrainingConfig:
        """Rules that involve several sections (checked at load, before any model is built)."""
        if self.backend.name == "scripted":
            raise ValueError("backend.name: training needs a model backend (hf or vllm), not 'scripted'")
        if self.sampling.temperature == 0 and self.rollout.group_size > 1:
            raise ValueError("sampling.temperature: training with group_size > 1 needs sampled decoding "
                             "(temperature > 0); greedy episodes of a group are identical")
        if self.sampling.top_p < 1 or self.sampling.top_k > 0:
            raise ValueError("sampling.top_p/top_k: training rollouts must sample the full distribution "
                             "(top_p=1, top_k=0) so the behaviour log-probs and the trainer's ratio refer "
                             "to the same policy")
        if self.team is not None:
            self.team.require_trainable()
        _check_backend_fits_model(self.backend, self.model)
        return self

    @model_validator(mode="after")
    def _token_credit_fits_objective(self) -> TeamTrainingConfig:
        token = self.credit.token
        if token is not None and self.objective.kl_beta > 0:
            from teamplay.credit.token import get_token_credit

            if get_token_credit(token.method).excludes_kl:
                raise ValueError(f"credit.token.method: {token.method!r} replaces the KL penalty; "
                                 f"set objective.kl_beta to 0")
        return self


class TrainConfig(TeamTrainingConfig):
    """A whole training run (`teamplay train`)."""

    controllers: ControllerConfig = Field(
        default_factory=ControllerConfig, description="Learned speak/skip controllers, trained by regret "
                                                      "matching alongside the adapters.")
    steps: int = Field(10, ge=1, description="Training steps.")
    token_budget: int | None = Field(
        None, ge=1, description="Stop after the step at which the run has generated this many tokens: its "
                                "episodes' plus the counterfactual ones of replays, continuations and "
                                "controllers (so methods can be compared at equal cost). `steps` stays "
                                "the upper bound and the LR schedule's length. None = `steps` only.")
    eval_every: int | None = Field(None, ge=1, description="Held-out eval every N steps (and at the "
                                                           "start and end); None = start and end only.")
    eval_curve_limit: int | None = Field(
        None, ge=1, description="Learning curve at a fraction of the cost: the evaluations every `eval_every` "
                                "steps use the first N held-out problems, and the run also logs "
                                "`heldout_curve` (those N problems) before training, at each of those steps "
                                "and after training. None = every evaluation uses every held-out problem.")
    eval_samples: int | None = Field(
        None, ge=2, description="pass@k: before and after training, also play every held-out problem k times "
                                "with the training decoding (`sampling`), logged as `heldout_sampled` (step 0) "
                                "and `heldout_sampled_final` (last line); their `extra.samples` holds pass@k and "
                                "how many distinct right solutions each problem got "
                                "(`teamplay.training.play.evaluation.sample_metrics`). None = the greedy "
                                "evaluation only.")
    eval_cache: str | None = Field(
        None, description="Folder that keeps the held-out evaluation of the untrained team for reuse by "
                          "every run it equals (same model, team, protocol, controllers, tasks, eval "
                          "decoding, backend and seed: credit, loss and optimiser cannot change it). "
                          "`teamplay sweep` sets it for its runs. None = each run evaluates.")
    eval_withhold_messages: bool = Field(
        False, description="Information use before and after training: the held-out evaluations of the untrained "
                           "and the trained team also replay every episode once per message with that message "
                           "withheld (`teamplay eval`'s `withhold_messages`), into "
                           "`heldout.extra.cooperation.withholding` and `heldout_final.extra.cooperation.withholding`.")
    eval_self_consistency: bool = Field(
        False, description="Self-consistency before and after training: the answering role alone (its adapter as "
                           "trained so far), sampled with the training decoding (`sampling`) until its tokens "
                           "reach the team's on each held-out problem, majority vote (`teamplay eval`'s "
                           "`self_consistency`), into `extra.cooperation.self_consistency` of those evaluations.")
    checkpoint_every: int = Field(5, ge=1, description="Checkpoint every N steps (and at the end).")
    distributed: DistributedConfig | None = Field(
        None, description="Ray scale-out (rollout workers, data-parallel learner); None = one process.")
    curriculum: CurriculumConfig | None = Field(
        None, description="Difficulty stages of the training episodes, raised when the training reward's moving "
                          "average reaches a threshold (teamplay.config.curriculum); None = the config's own "
                          "task, protocol and team throughout.")
    warm_start: WarmStartConfig | None = Field(
        None, description="Supervised fine-tuning of each role's adapter on its own messages (a teacher team's, "
                          "or the team's own episodes that passed a reward threshold) before the first RL step, "
                          "into RUN/warm_start (teamplay.config.warm_start; `teamplay sft` runs it alone); "
                          "None = RL from the fresh (or model.checkpoint) adapters.")

    @model_validator(mode="after")
    def _warm_start_fits(self) -> TrainConfig:
        """A warm start runs in the trainer's own process, on roles that have a teacher (``check_teachers``)."""
        if self.warm_start is None:
            return self
        # both would keep a copy of the adapters built before the warm start changed them
        ahead = {"distributed": self.distributed, "rollout.max_staleness": self.rollout.max_staleness}
        for name, value in ahead.items():
            if value is not None:
                raise ValueError(f"warm_start: not supported with {name} yet; drop one of them")
        check_teachers(self.warm_start, self.protocol, self.team)
        return self

    @model_validator(mode="after")
    def _curriculum_fits(self) -> TrainConfig:
        """Every stage of a curriculum can be played (``check_stages``), by a run that can change
        its training episodes between steps."""
        if self.curriculum is None:
            return self
        # each would play a stage's episodes with wiring built once: the Ray pool's workers build their
        # envs at start, the generator thread plays steps ahead, a stage's credit would load the judge again
        unsupported = {"distributed": self.distributed, "rollout.max_staleness": self.rollout.max_staleness,
                       "credit.judge_model": self.credit.judge_model}
        for name, value in unsupported.items():
            if value is not None:
                raise ValueError(f"curriculum: not supported with {name} yet; drop one of them")
        check_stages(self.curriculum, self.task, self.protocol, self.team)
        return self

    @model_validator(mode="after")
    def _eval_samples_differ(self) -> TrainConfig:
        if self.eval_samples is not None and self.sampling.temperature == 0:
            raise ValueError(f"eval_samples: {self.eval_samples} samples of a held-out problem at "
                             "sampling.temperature 0 are copies of one greedy episode; set sampling.temperature "
                             "> 0 or drop eval_samples")
        return self

    @model_validator(mode="after")
    def _async_rollouts_fit(self) -> TrainConfig:
        """What asynchronous rollouts (``rollout.max_staleness``) cannot do yet, refused at load."""
        if self.rollout.max_staleness is None:
            return self
        if self.rollout.max_staleness > 0 and self.objective.old_logprobs == "trainer":
            raise ValueError("objective.old_logprobs: trainer measures the ratio from the update's starting "
                             "weights, which would leave stale rollouts uncorrected; asynchronous rollouts "
                             "(rollout.max_staleness > 0) need old_logprobs: generation (the behaviour policy's)")
        if self.distributed is not None and self.distributed.max_worker_lag > 0:
            raise ValueError("distributed.max_worker_lag: with rollout.max_staleness the generator bounds the "
                             "staleness itself and every batch's workers load its adapters; set "
                             "distributed.max_worker_lag: 0")
        if self.controllers.enabled:
            raise ValueError("rollout.max_staleness: the speak/skip controllers learn from each step's rollouts "
                             "before the next is generated; set controllers.enabled=false or drop "
                             "rollout.max_staleness")
        if self.backend.name == "vllm" and self.distributed is None:
            for name in ("eval_withhold_messages", "eval_self_consistency"):
                if getattr(self, name):
                    raise ValueError(f"{name}: generates with the vllm engine on the learner's thread, which "
                                     f"asynchronous rollouts give to the generator thread; drop {name} or "
                                     f"rollout.max_staleness")
        if self.backend.name == "hf" and self.distributed is None and self.backend.sampler == "multinomial":
            raise ValueError("rollout.max_staleness: backend.sampler multinomial draws from torch's global "
                             "generator, which the learner's thread shares; use sampler inverse_cdf")
        if self.team is not None and len(self.team.bases(self.model.name)) > 1:
            raise ValueError("rollout.max_staleness: a team whose roles use several bases is not supported "
                             "with asynchronous rollouts yet; drop rollout.max_staleness")
        return self

    @model_validator(mode="after")
    def _distributed_fits(self) -> TrainConfig:
        """What the Ray path (``teamplay.distributed``) cannot do yet, refused at load."""
        dist = self.distributed
        if dist is None:
            return self
        for name in ("eval_withhold_messages", "eval_self_consistency"):
            if getattr(self, name):
                raise ValueError(f"{name}: replays and solo samples run in process; not supported with "
                                 f"`distributed:` yet (measure the trained team with teamplay eval)")
        if self.controllers.enabled:
            raise ValueError("controllers.enabled: learned speak/skip controllers are not supported with "
                             "`distributed:` yet; set controllers.enabled=false or drop the distributed section")
        if dist.learner_strategy == "fsdp" and self.team is not None and len(self.team.bases(self.model.name)) > 1:
            raise ValueError("distributed.learner_strategy: fsdp shards one base model; a team whose roles use "
                             "several bases (team.roles[].model) needs learner_strategy: ddp")
        if dist.learner_workers > 1 and self.objective.name == "grpo" and self.objective.loss_agg == "token_mean":
            raise ValueError("objective.loss_agg: token_mean normalises by the token count of a whole minibatch "
                             "and does not split over learner ranks; use seq_mean_token_mean or "
                             "distributed.learner_workers=1")
        return self


_LENGTH = ("not used by a federated run (set federated.rounds and federated.local_steps; the global team "
           "is evaluated after every round)")
#: the fields only a single run has (``TrainConfig``'s own), and why a federated run has none of them
SINGLE_RUN_ONLY = {
    "steps": f"steps/eval_every: {_LENGTH}",
    "eval_every": f"steps/eval_every: {_LENGTH}",
    "token_budget": "token_budget: a federated run's length is federated.rounds x federated.local_steps; a "
                    "token budget would stop sites at different rounds",
    # the regret tables would have to be federated and kept per site: not built yet
    "controllers": "controllers{enabled}: learned speak/skip controllers are not supported in federated runs; "
                   "drop the controllers section",
    # each site is one process (a Flower SuperNode, or a Ray actor of the simulation)
    "distributed": "distributed: a federated run's sites train in one process each; drop the distributed "
                   "section (federated.clients sets how many sites run)",
    "checkpoint_every": "checkpoint_every: a federated run checkpoints the global team, and each site its "
                        "state, after every round; drop it",
    "eval_curve_limit": "eval_curve_limit: the server evaluates the global team on every held-out problem "
                        "after every round; drop it (or set eval_task.limit)",
    "eval_cache": "eval_cache: the server evaluates the untrained team once per run, not from a cache; drop it",
    "eval_samples": "eval_samples: the server evaluates the global team greedily after every round (no pass@k); "
                    "drop it",
    "eval_withhold_messages": "eval_withhold_messages: the server evaluates the global team after every round "
                              "without replays; drop it (measure the final team with teamplay eval)",
    "eval_self_consistency": "eval_self_consistency: the server evaluates the global team after every round "
                             "without the baseline; drop it (measure the final team with teamplay eval)",
}


class FederatedConfig(TeamTrainingConfig):
    """A federated run (`teamplay federate`): the sections every site trains with, plus `federated`.

    Each site trains ``federated.local_steps`` ordinary steps per round, so its Trainer runs a
    ``TrainConfig`` of ``rounds * local_steps`` steps (``teamplay.federated.client.site_config``).
    The fields only a single run has (``SINGLE_RUN_ONLY``) are not here: a config that sets one is
    refused with one line saying why.
    """

    federated: FederatedSection = Field(default_factory=FederatedSection, description="Federation.")
    output_dir: str = Field("runs/federated", description="Run folder.")
    # the server logs each round to federated.jsonl and the sites log nothing, so a federated run has
    # no TensorBoard or wandb logs; ``FederatedServer`` refuses a config that asks for them (not this
    # model: run folders written before that still hold ``tensorboard: true`` and must still load)
    tensorboard: bool = Field(False, description="Must stay false: a federated run logs its rounds to "
                                                 "federated.jsonl only.")
    wandb_project: str | None = Field(None, description="Must stay unset: a federated run logs its rounds to "
                                                        "federated.jsonl only.")

    @model_validator(mode="before")
    @classmethod
    def _no_single_run_fields(cls, data: Any) -> Any:
        """A single run's field, refused with its reason (rather than pydantic's "unknown field")."""
        if isinstance(data, Mapping):
            for name, why in SINGLE_RUN_ONLY.items():
                if name in data:
                    enabled = isinstance(data[name], Mapping) and data[name].get("enabled") is True
                    raise ValueError(why.format(enabled=".enabled" if enabled else ""))
        return data

    @model_validator(mode="after")
    def _federation_fits(self) -> FederatedConfig:
        lo, hi = self.federated.fedgrpo.calibration_clip
        if not 0 < lo <= 1 <= hi:
            raise ValueError(f"federated.fedgrpo.calibration_clip: need 0 < lo <= 1 <= hi, got [{lo}, {hi}]")
        self._robust_fits()
        for drill in self.federated.failure_drills:
            if drill.site >= self.federated.clients:
                raise ValueError(f"federated.failure_drills: site {drill.site} does not exist "
                                 f"(clients: {self.federated.clients})")
        for extra in self.federated.extra_tasks:
            if extra.name != self.task.name:
                raise ValueError(f"federated.extra_tasks: task {extra.name!r} differs from task.name "
                                 f"{self.task.name!r}; one task (verifier) per run")
        return self

    def _robust_fits(self) -> None:
        fed, robust = self.federated, self.federated.robust
        if fed.min_sites > fed.clients:
            raise ValueError(f"federated.min_sites: {fed.min_sites} is more than the {fed.clients} sites "
                             f"(federated.clients)")
        if robust.aggregator == "trimmed_mean" and int(robust.trim_fraction * fed.clients) == 0:
            fix = f"raise it to at least {1 / fed.clients:.3g} or " if 1 / fed.clients < 0.5 else ""
            raise ValueError(f"federated.robust.trim_fraction: {robust.trim_fraction:g} of {fed.clients} sites "
                             f"trims nothing; {fix}use aggregator median")
        sparse = fed.strategy == "fedgrpo" and fed.fedgrpo.sparse and fed.fedgrpo.budget < 1
        if sparse and robust.aggregator in ("median", "trimmed_mean"):
            # a sparse upload is 0 outside its top-k entries, so per entry most values are 0
            raise ValueError(f"federated.robust.aggregator: {robust.aggregator} of sparse uploads (fedgrpo.budget "
                             f"{fed.fedgrpo.budget:g}) pulls every entry towards 0; set fedgrpo.budget=1 or "
                             f"aggregator mean/clipped_mean")
