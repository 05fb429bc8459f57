"""The sections of how a step learns from its episodes: the policy-gradient objective
(``objective``), the optimiser (``optim``) and the rollout sizes (``rollout``: B problems x G
episodes)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from teamplay.config.base import Section


class ObjectiveConfig(Section):
    """The policy-gradient objective.

    Combinations with no meaning are refused at load, never silently dropped: GSPO has its own
    sequence-level aggregation and no KL term, so ``loss_agg``, ``kl_beta``, ``kl_clamp``,
    ``dual_clip`` and ``norm_tokens`` are refused with it unless they keep their defaults;
    ``logratio_clamp`` is GSPO's only; ``kl_clamp`` needs ``kl_beta > 0``; ``norm_tokens`` belongs
    to ``loss_agg: seq_mean_token_sum_norm``.

    Every rule reads the values, never which fields were given: a dumped config (``model_dump``,
    every field given) must validate to the same config, since the federated sites, ``--resume``,
    ``export`` and ``eval --team`` all read a run's config back from its dump.
    """

    name: Literal["grpo", "gspo"] = Field("grpo", description="grpo: token-level ratio; gspo: "
                                                              "sequence-level (length-normalised) ratio.")
    clip_low: float = Field(0.2, gt=0.0, lt=1.0, description="Lower clip range epsilon.")
    clip_high: float | None = Field(None, gt=0.0, description="Upper clip range (None = clip_low).")
    kl_beta: float = Field(0.0, ge=0.0, description="GRPO: weight of the k3 KL to the base model "
                                                    "(adapters disabled); 0 = no KL term.")
    kl_clamp: float | None = Field(None, gt=0.0, description="GRPO: clamp the k3 estimate to at most "
                                                             "this (verl: 10); None = no clamp.")
    loss_agg: Literal["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"] = Field(
        "seq_mean_token_mean", description="GRPO token aggregation: per-sequence mean then mean (GRPO), "
                                           "mean over all tokens (DAPO), or token sum / a constant "
                                           "(Dr. GRPO).")
    norm_tokens: int | None = Field(None, ge=1, description="The constant of seq_mean_token_sum_norm "
                                                            "(None = sampling.max_new_tokens).")
    dual_clip: float | None = Field(None, gt=1.0, description="GRPO: dual-clip constant c for negative "
                                                              "advantages (verl: 3); None = off.")
    logratio_clamp: float | None = Field(None, gt=0.0, description="GSPO: clamp the mean log-ratio "
                                                                    "to [-c, c] before exp (TRACER: 2).")
    old_logprobs: Literal["auto", "generation", "trainer"] = Field(
        "auto", description="The old policy's log-probs in the ratio. generation: those the backend "
                            "recorded while sampling. trainer: the learner's own forward pass on the "
                            "update's starting weights (no grad; free for the passes before the first "
                            "optimiser step), so the ratio measures the update alone and the gap to "
                            "the generation log-probs is logged. auto: trainer where the two cannot "
                            "agree (a bfloat16/float16 model, the vllm backend), generation elsewhere "
                            "(a float32 hf model: equal to 1e-5).")

    @model_validator(mode="after")
    def _meaningful_combination(self) -> ObjectiveConfig:
        """A field the chosen objective ignores is refused, never silently dropped."""
        if self.name == "gspo":
            for name, why in (("loss_agg", "gspo aggregates per sequence (length-normalised ratio)"),
                              ("kl_beta", "the gspo objective has no KL term"),
                              ("kl_clamp", "the gspo objective has no KL term"),
                              ("dual_clip", "dual-clip is defined for the token ratio of grpo"),
                              ("norm_tokens", "gspo aggregates per sequence")):
                # each default is what gspo does anyway: no KL (kl_beta 0, kl_clamp None), no dual
                # clip, and a mean over each sequence's tokens then over sequences (seq_mean_token_mean,
                # norm_tokens None); so a default, given or not, drops nothing
                if getattr(self, name) != type(self).model_fields[name].default:
                    raise ValueError(f"objective.{name}: {why}, so it does not apply to name 'gspo'; "
                                     f"remove it or use objective.name: grpo")
        elif self.logratio_clamp is not None:
            raise ValueError(f"objective.logratio_clamp: only the gspo objective clamps its sequence "
                             f"log-ratio; remove it for {self.name!r}")
        if self.kl_clamp is not None and self.kl_beta == 0:
            raise ValueError("objective.kl_clamp: needs kl_beta > 0 (there is no KL term to clamp)")
        if self.norm_tokens is not None and self.loss_agg != "seq_mean_token_sum_norm":
            raise ValueError("objective.norm_tokens: the constant of loss_agg 'seq_mean_token_sum_norm'; "
                             "set that loss_agg or remove it")
        return self


class OptimConfig(Section):
    """Optimisation of the LoRA adapters."""

    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate.")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    schedule: Literal["constant", "linear", "cosine"] = Field("constant", description="LR schedule "
                                                                                     "over the run.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up steps.")
    epochs: int = Field(1, ge=1, description="Passes over each step's rollouts.")
    minibatch_size: int = Field(16, ge=1, description="Messages per optimiser minibatch.")
    grad_accum: int = Field(1, ge=1, description="Minibatches per optimiser step.")
    grad_clip: float | None = Field(1.0, gt=0.0, description="Gradient-norm clip (None = off).")
    max_nonfinite_steps: int = Field(
        3, ge=1, description="Consecutive training steps with a non-finite loss or gradient (each such "
                             "optimiser step is skipped, with a warning) after which the run stops with an "
                             "error; the last checkpoint keeps the last finite adapters.")


class RolloutConfig(Section):
    """Rollout sizes per training step, and how far rollouts may run ahead of the update
    (``max_staleness``: ``teamplay.training.run.asynchronous.rollouts``)."""

    problems_per_step: int = Field(4, ge=1, description="B: problems sampled per step.")
    group_size: int = Field(4, ge=1, description="G: episodes per problem (a credit group).")
    max_staleness: int | None = Field(
        None, ge=0, description="Asynchronous rollouts: a background generator produces the next steps' "
                                "groups while the learner updates, up to N steps ahead, with the newest "
                                "adapters it has; a group whose adapters are more than N versions behind "
                                "the learner's is not trained on (counted as `stale_groups_dropped`). 0 = "
                                "the generator waits for each update: the synchronous run's numbers. "
                                "hf or vllm backend, in one process or on the Ray pool (`distributed:`). "
                                "None = synchronous, no generator thread.")
