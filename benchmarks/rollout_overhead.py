"""What the env, the protocol, the backend's bookkeeping and the credit layer add to raw generation.

The same arith level-1 prompts (protocol ``single``, 8 problems x 4 episodes, greedy) go through

* raw: ``model.generate`` on the prompt ids built exactly as ``HFBackend`` builds them (chat
  template under the token budget, same adapter, same length-sorted micro-batches of 16, same
  stop ids, left padding with an attention mask), one batched call per micro-batch, nothing else;
* teamplay: ``RolloutRunner`` (envs, protocol, turn requests, ``HFBackend`` with behaviour
  log-probs, episodes) and then ``teamplay.credit.assign`` of ``grpo`` and ``shapley`` on the
  four-episode groups.

Both generate the same tokens (checked: the token counts must match), so the difference is the
overhead. It is reported as a fraction of the raw generation time, split into env + protocol
(runner time outside the backend), backend extras (backend time minus raw generate) and credit.
The two variants run interleaved three times and the fastest run of each counts (the one least
disturbed by other processes on a shared machine).

    python -m benchmarks rollout_overhead
    python -m benchmarks.rollout_overhead --quick
"""

from __future__ import annotations

import time

from benchmarks.common import EMBEDDED_MODEL, Result, arith_rollouts, fmt_pct, markdown_table, script_main

#: the target: total overhead under this fraction of the generation time
TARGET = 0.10


def raw_generate(backend, requests, max_new_tokens: int) -> tuple[float, int]:
    """Seconds and completion tokens of plain batched ``generate`` on ``requests``' prompts."""
    import torch
    from transformers import GenerationConfig

    from teamplay.agents.prompts import build_prompt_ids
    from teamplay.agents.team_model import left_pad

    tm, tok = backend.team_model, backend.tokenizer
    prompts = [build_prompt_ids(tok, r.chat, backend.max_prompt_tokens)[0] for r in requests]
    groups: dict[str | None, list[int]] = {}
    for i, r in enumerate(requests):
        groups.setdefault(r.adapter, []).append(i)
    config = GenerationConfig(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=list(backend.stop_ids),
                              pad_token_id=tok.pad_token_id)
    stops = torch.tensor(backend.stop_ids)
    tokens = 0
    start = time.perf_counter()
    for adapter, members in groups.items():
        members = sorted(members, key=lambda i: len(prompts[i]))
        for lo in range(0, len(members), backend.micro_batch_size):
            chunk = [prompts[i] for i in members[lo:lo + backend.micro_batch_size]]
            input_ids, attention = left_pad(chunk, tok.pad_token_id, tm.device)  # [B, P]
            with torch.no_grad(), tm.using(adapter):
                out = tm.model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config)
            new = out[:, input_ids.shape[1]:]  # [B, N]
            # a row's completion ends at its first stop token (included), as the backend counts it
            is_stop = torch.isin(new, stops)  # [B, N]
            first = torch.where(is_stop.any(-1), is_stop.int().argmax(-1) + 1, new.shape[1])  # [B]
            tokens += int(first.sum())
    return time.perf_counter() - start, tokens


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 2 problems x 2 episodes, 8 new tokens, one run of each variant; otherwise 8 x 4,
    48 new tokens, and the fastest of 3 interleaved runs of each variant."""
    import teamplay.credit.methods  # noqa: F401  (registers the credit methods)
    from teamplay.credit import CreditBatch, assign

    n_problems, group, max_new, repeats = (2, 2, 8, 1) if quick else (8, 4, 48, 3)
    setup = arith_rollouts(model, "single", n_problems, group, max_new, temperature=0.0)
    runner, jobs = setup.runner, setup.jobs

    # the raw variant's inputs: each env's first (and, for `single`, only) turn request
    requests = []
    for i, job in enumerate(jobs):
        env = setup.make_env()
        env.reset(seed=i, options={"item": job.item, "group_id": job.group_id})
        requests.append(env.infos[env.agent_selection]["turn"])

    runner.run(jobs[:1])  # warm-up
    item_of = {f"p{p}": item for p, item in enumerate(setup.items)}
    raw_runs, ours = [], []
    for _ in range(repeats):  # interleaved, so slow phases of a busy machine hit both variants
        seconds, raw_tokens = raw_generate(setup.backend, requests, max_new)
        raw_runs.append(seconds)
        episodes = runner.run(jobs)
        stats = runner.last_stats
        if raw_tokens != stats.tokens:
            raise RuntimeError(f"raw generate made {raw_tokens} tokens, the runner {stats.tokens}: the two "
                               f"variants did different work and cannot be compared")
        by_group: dict[str, list] = {}
        for ep in episodes:
            by_group.setdefault(ep.group_id, []).append(ep)
        credit_seconds = {}
        for method in ("grpo", "shapley"):
            start = time.perf_counter()
            for gid, eps in by_group.items():
                assign(method, CreditBatch(tuple(eps), item_of[gid], setup.task.score, setup.task.extract))
            credit_seconds[method] = time.perf_counter() - start
        ours.append((stats.seconds + sum(credit_seconds.values()), stats, credit_seconds))
    # the fastest run of each variant: the one least disturbed by other processes
    raw = min(raw_runs)
    _, stats, credit_seconds = min(ours, key=lambda t: t[0])
    env_s = stats.seconds - stats.generate_seconds
    backend_extra = stats.generate_seconds - raw
    credit = sum(credit_seconds.values())
    total = env_s + backend_extra + credit
    parts = [("env + protocol + episodes (runner outside the backend)", env_s),
             ("backend bookkeeping (prompts, log-probs, decoding) beyond raw generate", backend_extra),
             ("credit: grpo", credit_seconds["grpo"]), ("credit: shapley", credit_seconds["shapley"]),
             ("**total overhead**", total)]
    rows = [[name, f"{s * 1e3:.1f}", fmt_pct(s / raw)] for name, s in parts]
    table = markdown_table(["part", "ms", "fraction of raw generate time"], rows)
    met = total / raw < TARGET
    headline = (f"env + protocol + backend bookkeeping + credit (grpo and shapley) add {fmt_pct(total / raw)} "
                f"to raw batched generate time; target < {fmt_pct(TARGET)} {'met' if met else 'NOT met'}.")
    notes = (f"Model {model}, protocol single, {n_problems} problems × {group} episodes ({len(jobs)} prompts), "
             f"greedy, max_new_tokens={max_new}, {raw_tokens} completion tokens in both variants. Fastest of "
             f"{repeats} interleaved runs of each variant: raw generate {raw:.2f} s (all runs: "
             f"{', '.join(f'{x:.2f}' for x in raw_runs)} s), teamplay {min(t[0] for t in ours):.2f} s (all: "
             f"{', '.join(f'{t[0]:.2f}' for t in ours)} s). A negative part means the raw run was slower "
             f"than the backend's own generate calls, i.e. machine noise of that size.",)
    data = {"model": model, "prompts": len(jobs), "max_new_tokens": max_new, "tokens": raw_tokens,
            "raw_seconds": raw_runs, "teamplay_seconds": [t[0] for t in ours], "runner_seconds": stats.seconds,
            "runner_generate_seconds": stats.generate_seconds, "credit_seconds": credit_seconds,
            "overhead_fraction": total / raw}
    return Result("rollout_overhead", table, headline, met, notes, data)


def main() -> None:
    script_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
