"""Extra generated tokens of replay credit per training step, as a multiple of the rollout's tokens.

A step of B = 4 problems x G = 8 episodes is rolled out by a scripted team in which every message
costs the same number of tokens (32): the token ratio then counts replayed turns against rollout
turns, the structural cost of the method, independent of a model's lengths (with a model, a
replayed turn costs what that turn costs in the rollout, so the ratio moves with the relative
lengths of the turns that get replayed). The reviewer catches a wrong proposal with probability
0.8 and the proposer is compliant (a stochastic team, so replays are real samples); debaters
answer right with probability 0.5 and keep their answer.

For each team, credit (``shapley value=replay removal=skip``) runs as the trainer runs it: the
queries of all groups are recorded, run in one batch by ``RolloutReplayEngine``, then read back.
Exact coalitions (2^n per episode) and Monte Carlo (8 permutations, ``exact_max_agents=1``); k = 1,
2, 4 samples per coalition; with prefix reuse and replaying from the question ("from scratch").
``continuation`` (k continuations per message boundary) is shown for comparison, and ``influence``,
which generates nothing: it scores the listener's prompt with and without each message a teammate
reads, teacher-forced (its rows are counted; a counting stand-in for the model gives the rows, the
numbers it returns are not used).

    python -m benchmarks replay_cost
    python -m benchmarks.replay_cost --quick
"""

from __future__ import annotations

import numpy as np

from benchmarks.common import Result, markdown_table, script_main

TOKENS_PER_MESSAGE = 32
TARGET = 1.0  # proposer/reviewer replay Shapley at k = 2: at most 1.0x the rollout tokens


def _backend(kind: str, seed: int):
    from teamplay.agents.backends.base import GenerationBackend
    from teamplay.agents.backends.scripted import format_answer, same_answer, wrong_answer
    from teamplay.records import Generation

    rng = np.random.default_rng(seed)

    class Team(GenerationBackend):
        name = "scripted"

        def generate(self, requests, sampling):
            return [Generation(text=self._text(r), completion_ids=(1,) * TOKENS_PER_MESSAGE, adapter=r.adapter)
                    for r in requests]

        def _text(self, r):
            ref = r.item.reference
            if kind == "debate":
                own = next((m.answer for m in reversed(r.transcript) if m.agent == r.agent), None)
                if own is None:
                    own = ref if rng.random() < 0.5 else wrong_answer(ref)
                return format_answer(own)
            pending = r.metadata.get("pending_answer")
            if r.stage == "review":
                if pending is None or same_answer(str(pending), r.item):
                    return "RIGHT"
                return "WRONG" if rng.random() < 0.8 else "RIGHT"
            if pending is None:
                return format_answer(ref if rng.random() < 0.5 else wrong_answer(ref))
            if r.metadata.get("last_verdict") == "WRONG":
                return format_answer(wrong_answer(ref) if same_answer(str(pending), r.item) else ref)
            return format_answer(str(pending))

    return Team()


def measure(kind: str, method: str, options: dict, reuse_prefix: bool, problems: int, group: int,
            seed: int = 0) -> dict:
    """One step: rollout, then credit with the engine; tokens and calls of both."""
    from teamplay.config import ProtocolConfig
    from teamplay.credit import CreditBatch, CreditResources, assign
    from teamplay.envs.tasks import get_task
    from teamplay.records import SamplingParams
    from teamplay.training.play.replay import RolloutReplayEngine
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.step.stages import group_episodes
    from teamplay.training.wiring.envs import env_factory

    task = get_task("arith")
    items = task.load("train", limit=problems, seed=seed)
    protocol = (ProtocolConfig(name="proposer_reviewer", options={"rounds": 3}) if kind == "pr"
                else ProtocolConfig(name="debate", options={"rounds": 2}))
    make_env, _ = env_factory(task, protocol, None)
    backend = _backend(kind, seed)
    sampling = SamplingParams(max_new_tokens=TOKENS_PER_MESSAGE, temperature=1.0)
    runner = RolloutRunner(make_env, backend, sampling)
    jobs = [RolloutJob(item=it, group_id=f"g{i}") for i, it in enumerate(items) for _ in range(group)]
    episodes = runner.run(jobs, seed=seed)
    rollout_tokens = sum(ep.tokens for ep in episodes)
    rollout_calls = runner.last_stats.generate_calls
    engine = RolloutReplayEngine(make_env, backend, sampling, seed=seed, reuse_prefix=reuse_prefix)
    engine.begin_step(0, rollout_tokens)
    by_id = {it.id: it for it in items}
    batches = [CreditBatch(tuple(g), by_id[g[0].problem_id], task.score, task.extract,
                           CreditResources(replay=engine)) for g in group_episodes(episodes)]
    with engine.recording():
        for b in batches:
            assign(method, b, options)
    engine.flush()
    for b in batches:
        assign(method, b, options)
    s = engine.stats
    return {"rollout_tokens": rollout_tokens, "rollout_calls": rollout_calls, "extra_tokens": s.extra_tokens,
            "ratio": s.extra_tokens / rollout_tokens, "queries": s.queries, "free": s.free,
            "replay_calls": s.generate_calls, "replay_episodes": s.episodes}


class _CountingModel:
    """Stands in for a ``TeamModel`` where only the cost of influence is wanted: a word tokenizer
    (one id per word, so equal prompts share ids and different ones do not) and log-probs of 0."""

    class _Words:
        def apply_chat_template(self, chat, tokenize=False, add_generation_prompt=True):
            return "\n".join(m["content"] for m in chat)

        def __call__(self, text, add_special_tokens=False):
            import zlib

            return {"input_ids": [zlib.crc32(w.encode()) % 50000 for w in text.split()] or [0]}

    tokenizer = _Words()

    def completion_logprobs(self, prompts, completions, adapter=None):
        import torch

        width = max(len(c) for c in completions)
        mask = torch.tensor([[1.0] * len(c) + [0.0] * (width - len(c)) for c in completions])  # [B, C]
        return torch.zeros_like(mask), mask


def measure_influence(kind: str, problems: int, group: int, seed: int = 0) -> dict:
    """One step: rollout, then influence credit; its forward rows against the rollout's turns."""
    from teamplay.config import ProtocolConfig
    from teamplay.credit import CreditBatch, CreditResources, assign
    from teamplay.envs.tasks import get_task
    from teamplay.records import SamplingParams
    from teamplay.training.play.listener_logprob import ListenerLogProb
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.step.stages import group_episodes
    from teamplay.training.wiring.envs import env_factory

    task = get_task("arith")
    items = task.load("train", limit=problems, seed=seed)
    protocol = (ProtocolConfig(name="proposer_reviewer", options={"rounds": 3}) if kind == "pr"
                else ProtocolConfig(name="debate", options={"rounds": 2}))
    make_env, _ = env_factory(task, protocol, None)
    runner = RolloutRunner(make_env, _backend(kind, seed), SamplingParams(max_new_tokens=TOKENS_PER_MESSAGE,
                                                                          temperature=1.0))
    jobs = [RolloutJob(item=it, group_id=f"g{i}") for i, it in enumerate(items) for _ in range(group)]
    episodes = runner.run(jobs, seed=seed)
    by_id = {it.id: it for it in items}
    scorer = ListenerLogProb(_CountingModel(), make_env, by_id, max_prompt_tokens=1_000_000)
    for g in group_episodes(episodes):
        assign("influence", CreditBatch(tuple(g), by_id[g[0].problem_id], task.score, task.extract,
                                        CreditResources(listener=scorer)))
    messages = sum(m.spoke for ep in episodes for m in ep.messages)
    return {"rollout_tokens": sum(ep.tokens for ep in episodes), "rollout_calls": runner.last_stats.generate_calls,
            "messages": messages, "queries": scorer.stats.queries, "rows": scorer.stats.rows}


def run(quick: bool = False, model: str | None = None) -> Result:
    """The table over teams x coalition scheme x k, with and without prefix reuse."""
    problems, group = (2, 4) if quick else (4, 8)
    ks = (1, 2) if quick else (1, 2, 4)
    rows, data = [], []
    for kind, team in (("pr", "proposer/reviewer, 3 rounds"), ("debate", "debate, 3 agents, 2 debate rounds")):
        for scheme, extra in (("exact", {}), ("Monte Carlo (8 perm.)", {"exact_max_agents": 1, "permutations": 8})):
            for k in ks:
                opts = {"value": "replay", "removal": "skip", "samples": k, **extra}
                reuse = measure(kind, "shapley", opts, True, problems, group)
                scratch = measure(kind, "shapley", opts, False, problems, group)
                saving = 1 - reuse["extra_tokens"] / scratch["extra_tokens"] if scratch["extra_tokens"] else 0.0
                rows.append([team, f"shapley {scheme}", k, f"{reuse['ratio']:.2f}×", f"{scratch['ratio']:.2f}×",
                             f"{saving:.0%}", f"{reuse['free']}/{reuse['queries']}",
                             f"{reuse['replay_calls']} vs {reuse['rollout_calls']}"])
                data.append({"team": kind, "scheme": scheme, "k": k, "reuse": reuse, "scratch": scratch})
        for k in ks:
            opts = {"samples": k}
            reuse = measure(kind, "continuation", opts, True, problems, group)
            rows.append([team, "continuation", k, f"{reuse['ratio']:.2f}×", "—", "—",
                         f"{reuse['free']}/{reuse['queries']}", f"{reuse['replay_calls']} vs {reuse['rollout_calls']}"])
            data.append({"team": kind, "scheme": "continuation", "k": k, "reuse": reuse})
        cost = measure_influence(kind, problems, group)
        rows.append([team, "influence", "—", "0.00×", "—", "—", f"{cost['rows']} rows / {cost['queries']} queries",
                     f"0 vs {cost['rollout_calls']}; {cost['rows'] / cost['messages']:.2f} forward rows per message"])
        data.append({"team": kind, "scheme": "influence", "k": None, "influence": cost})
    table = markdown_table(["team", "credit", "k", "extra tokens / rollout tokens", "from scratch",
                            "saved by prefix reuse", "free queries", "generate calls (replay vs rollout)"], rows)
    pr2 = next(d for d in data if d["team"] == "pr" and d["scheme"] == "exact" and d["k"] == 2)["reuse"]["ratio"]
    met = pr2 <= TARGET
    headline = (f"replay Shapley for the proposer/reviewer team at k = 2 costs {pr2:.2f}× the rollout tokens of "
                f"the step; target ≤ {TARGET:.1f}× {'met' if met else 'NOT met'}.")
    notes = (f"One step of {problems} problems × {group} episodes; every message {TOKENS_PER_MESSAGE} tokens, so "
             "ratios count turns. Free queries: the grand coalition (the recording), removed agents that never "
             "spoke, and coalitions with no agent that can answer (a reviewer alone) cost nothing. From "
             "scratch: every other coalition replays from the question instead of its shared prefix. "
             "Generate calls: every replay of the step runs in lock step, k runs of at most one call per "
             "remaining turn. influence generates nothing: two listener queries per message a teammate reads "
             "(with it, and with it withheld), scored in teacher-forced rows (a prompt pass plus the answer's "
             "few tokens), the message-present row shared by the messages one listener reads and rows with "
             "the same prompt scored once (a scripted team repeats its texts across a group, so more rows are "
             "shared here than with sampled text: the queries bound the rows); its rows replace "
             "continuation's k partial episodes per boundary.",)
    return Result("replay_cost", table, headline, met, notes, {"rows": data})


if __name__ == "__main__":
    script_main(run, __doc__.splitlines()[0])
