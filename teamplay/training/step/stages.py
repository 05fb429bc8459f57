"""The stages of one training step, over one typed record per group.

``Trainer.step`` is a short pipeline:

    rollout -> groups -> credit (replays prefetched first) -> informative groups -> token credit
            -> samples -> update -> metrics

Between the stages travels one ``GroupWork`` per group (the G episodes of one problem); each stage
returns the records with what it computed added (``dataclasses.replace``: a record is never
changed in place), so nothing is kept beside them in step by position.

Every stage has one calling convention (``Stage``): ``stage(groups, ctx) -> groups``, where ``ctx``
(a ``StepContext``) is what the step knows beside its groups (its number, the adapters it trains,
all its episodes), and ``stage.metrics()`` what the stage adds to the step's metrics line. The
three stages are ``credit_stage.CreditStage``, ``token_stage.TokenStage`` (informative groups,
token credit, samples) and ``teamplay.training.run.update_stage.UpdateStage`` (the learner's
update; it lives with the learner it drives). This module holds the record, the context and the
functions the stages are made of.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from teamplay.config import TokenCreditConfig
from teamplay.credit import CreditBatch
from teamplay.credit.token import GroupTokenStats, assign_tokens, get_token_credit
from teamplay.credit.token.base import TEACHER_HINT
from teamplay.records import Episode, TaskItem
from teamplay.training.learn.samples import PolicySample, TokenRule, build_samples, sample_positions
from teamplay.training.learn.token_stats import compute_token_stats

#: per episode, per message its token advantages [C] or ``None`` (the message's scalar on every token)
TokenRows = tuple[tuple[np.ndarray | None, ...], ...]


@dataclass(frozen=True)
class StepContext:
    """What every stage of a step reads beside the groups.

    Fields:
        step: the steps done before this one (0 for the run's first).
        active: the adapters this step trains (``active_adapters``).
        episodes: every episode of the step, in rollout order, the groups without signal included
            (the credit stage's ``batch_rewards`` and the replay budget read them).
    """

    step: int
    active: frozenset[str]
    episodes: tuple[Episode, ...]


class Stage(Protocol):
    """One stage of the step: ``stage(groups, ctx)`` returns the groups it keeps with what it added;
    ``metrics()`` is what its last call adds to the step's metrics line (JSON-ready; may be empty)."""

    def __call__(self, groups: Sequence[GroupWork], ctx: StepContext) -> list[GroupWork]: ...

    def metrics(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class GroupWork:
    """One group of a step (the G episodes of one problem) and what each stage added to it.

    Fields (G episodes; episode g has T_g messages; a message has C completion tokens):
        episodes: the group's episodes, in rollout order.
        item: the problem they worked on.
        rewards: [G] team rewards, as the group hook saw them.
        scale: the factor ``Trainer.group_hook`` gave the group (1.0 without a hook); the credit
            stage multiplies the advantages by it.
        batch: the credit method's input (set by the credit stage; ``None`` before it).
        advantages: per episode its message advantages [T_g], already scaled (set by credit).
        token_rows: with token-level credit, per episode per message its token advantages [C] or
            ``None`` (the scalar on every token), set by the token credit stage or, for a token
            rule the update applies, by the update stage; ``None`` without token-level credit.
        tokens_in_update: whether a per-message token rule reaches these samples, to be applied
            by the update from its own forward pass (set by the token stage; the update stage then
            writes the rows the update resolved into ``token_rows`` and the samples).
        samples: the group's policy samples in ``positions`` order (set by the samples stage;
            after an update that resolved token rules they carry the resolved tokens).
        silent: the agents whose advantages are all zero in this group (set by ``informative``):
            their messages make no samples, the group carrying nothing for them.
    """

    episodes: tuple[Episode, ...]
    item: TaskItem
    rewards: np.ndarray
    scale: float = 1.0
    batch: CreditBatch | None = None
    advantages: tuple[np.ndarray, ...] = ()
    token_rows: TokenRows | None = None
    samples: tuple[PolicySample, ...] = ()
    silent: frozenset[str] = frozenset()
    tokens_in_update: bool = False

    @property
    def has_signal(self) -> bool:
        """Whether the rewards differ (a group whose rewards are all equal gives GRPO no gradient)."""
        return not np.ptp(self.rewards) == 0

    @property
    def credited(self) -> tuple[tuple[Episode, np.ndarray], ...]:
        """``(episode, advantages [T_g])`` pairs, in episode order."""
        return tuple(zip(self.episodes, self.advantages, strict=True))

    def positions(self, active: Collection[str]) -> list[tuple[int, int]]:
        """``(episode g, message t)`` of each of the group's samples, in order: the messages
        ``sample_positions`` trains, but those of ``silent`` agents."""
        return [(g, t) for g, t in sample_positions(self.episodes, active)
                if self.episodes[g].messages[t].agent not in self.silent]


def silent_agents(work: GroupWork) -> frozenset[str]:
    """The agents of a credited group whose advantages are all zero (on every message they wrote)."""
    loud = {msg.agent for ep, adv in work.credited for msg, a in zip(ep.messages, adv, strict=True) if a != 0}
    return frozenset(a for ep in work.episodes for a in ep.agents) - loud


def informative(groups: Sequence[GroupWork]) -> list[GroupWork]:
    """The zero-variance rule: a group is kept for an agent when that agent's advantages in it are
    not all zero (not when the team rewards differ), so a per-agent method that credits the agents
    of an all-equal-rewards group differently keeps that signal. Each kept group records its
    ``silent`` agents; a group where every agent is silent is dropped.

    For ``grpo`` this is the old rule: its advantages are all zero exactly when the rewards are all
    equal (``group_advantage``), and with unequal rewards an agent is silent only if it spoke in
    no episode whose reward differs from the group mean."""
    out = []
    for work in groups:
        silent = silent_agents(work)
        if silent != frozenset(a for ep in work.episodes for a in ep.agents):
            out.append(dataclasses.replace(work, silent=silent))
    return out


def active_adapters(trainable: Sequence[str], step: int, every: int | None) -> set[str]:
    """The adapters step ``step`` trains: every one of ``trainable``, or with
    ``alternate_roles_every = every`` one at a time, each for ``every`` steps in turn."""
    return {trainable[(step // every) % len(trainable)]} if every else set(trainable)


def group_episodes(episodes: Sequence[Episode]) -> list[list[Episode]]:
    """The episodes by group id, in order of first appearance (rollout order within a group)."""
    groups: dict[str, list[Episode]] = {}
    for ep in episodes:
        groups.setdefault(ep.group_id, []).append(ep)
    return list(groups.values())


def make_groups(episodes: Sequence[Episode], items: dict[str, TaskItem],
                hook: Callable[[TaskItem, np.ndarray], float] | None = None) -> list[GroupWork]:
    """One record per group (``group_episodes``); ``hook(item, rewards [G]) -> scale`` sees every
    group (with signal or not), in that order."""
    out = []
    for group in group_episodes(episodes):
        rewards = np.array([ep.reward for ep in group])
        item = items[group[0].problem_id]
        out.append(GroupWork(tuple(group), item, rewards, hook(item, rewards) if hook is not None else 1.0))
    return out


def token_credit(groups: Sequence[GroupWork], team_model, token: TokenCreditConfig, active: Collection[str],
                 temperature: float, chunk: int) -> list[GroupWork]:
    """Token advantages of every group: the token statistics of the messages that get token credit
    (spoken, with tokens, a trained adapter, a listed role) in one batched no-grad pass over all
    groups, then the token method per group (``token_rows``)."""
    method = get_token_credit(token.method)
    roles = set(token.roles) if token.roles is not None else None
    wanted = [(k, g, t) for k, work in enumerate(groups) for g, ep in enumerate(work.episodes)
              for t, msg in enumerate(ep.messages)
              if msg.spoke and msg.completion_ids and msg.adapter in active and (roles is None or msg.role in roles)]
    messages = [groups[k].episodes[g].messages[t] for k, g, t in wanted]
    hints = None
    if "teacher_logprobs" in method.needs:  # the same policy shown the reference answer
        tok = team_model.tokenizer
        hint_of = [tok.encode(TEACHER_HINT.format(reference=work.item.reference), add_special_tokens=False)
                   for work in groups]
        hints = [hint_of[k] for k, _, _ in wanted]
    stats = compute_token_stats(team_model, messages, method.needs, temperature, chunk=chunk, hints=hints)
    table = [[[None] * len(ep.messages) for ep in work.episodes] for work in groups]
    for (k, g, t), st in zip(wanted, stats, strict=True):
        table[k][g][t] = st
    out = []
    for work, group_table in zip(groups, table, strict=True):
        assert work.batch is not None
        resources = dataclasses.replace(work.batch.resources,
                                        token_stats=GroupTokenStats(tuple(tuple(r) for r in group_table)))
        rows = assign_tokens(token.method, dataclasses.replace(work.batch, resources=resources),
                             list(work.advantages), token.options, roles)
        out.append(dataclasses.replace(work, token_rows=tuple(tuple(r) for r in rows)))
    return out


def with_samples(groups: Sequence[GroupWork], active: Collection[str], token_rule: TokenRule | None = None,
                 rule_roles: Collection[str] | None = None) -> list[GroupWork]:
    """Each group's policy samples (``build_samples``: its token rows, or the token rule for
    ``rule_roles``), but those of its ``silent`` agents."""
    out = []
    for work in groups:
        samples = build_samples(work.episodes, list(work.advantages), active, work.token_rows,
                                token_rule=token_rule, rule_roles=rule_roles)
        kept = [s for (g, t), s in zip(sample_positions(work.episodes, active), samples, strict=True)
                if work.episodes[g].messages[t].agent not in work.silent]
        out.append(dataclasses.replace(work, samples=tuple(kept)))
    return out


def resolve_token_rows(groups: Sequence[GroupWork], resolved: dict[int, Sequence[float]],
                       active: Collection[str]) -> list[GroupWork]:
    """The groups with the token advantages an update computed from its own forward pass
    (``resolved``, by index into the step's samples in group order) in their samples and token rows;
    a sample the update never scored (e.g. after a non-finite loss) keeps its scalar."""
    out, i = [], 0
    for work in groups:
        rows: list[list[np.ndarray | None]] = [[None] * len(ep.messages) for ep in work.episodes]
        samples = []
        for (g, t), sample in zip(work.positions(active), work.samples, strict=True):
            tokens = resolved.get(i)
            if tokens is not None:
                rows[g][t] = np.asarray(tokens)
            samples.append(dataclasses.replace(sample, token_advantages=tokens))
            i += 1
        out.append(dataclasses.replace(work, samples=tuple(samples), token_rows=tuple(tuple(r) for r in rows)))
    return out


def run_stages(stages: Sequence[Stage], groups: Sequence[GroupWork], ctx: StepContext) -> list[GroupWork]:
    """``groups`` through ``stages`` in order, each stage given what the one before returned."""
    out = list(groups)
    for stage in stages:
        out = stage(out, ctx)
    return out


def all_samples(groups: Sequence[GroupWork]) -> list[PolicySample]:
    """The step's samples, in group order (the order the update indexes them in)."""
    return [s for work in groups for s in work.samples]


def all_credited(groups: Sequence[GroupWork]) -> tuple[tuple[Episode, np.ndarray], ...]:
    """Every ``(episode, advantages)`` pair of the groups, in group order."""
    return tuple(pair for work in groups for pair in work.credited)


def all_token_rows(groups: Sequence[GroupWork]) -> tuple[tuple[np.ndarray | None, ...], ...] | None:
    """Per credited episode its token rows, in group order; ``None`` without token-level credit
    (or when no group was credited)."""
    if not groups or any(work.token_rows is None for work in groups):
        return None
    return tuple(row for work in groups for row in work.token_rows or ())
