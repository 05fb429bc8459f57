"""Why credit pays at K = 8 of the split team and not at K = 4: how well each step's policy gradient
points where the exact credit's does, by team size.

The credit arena (``credit_arena --setting split_k2/4/8``) found ``oracle`` (training on the true
advantage ``A* = (c_i - p_i) / K``) level with broadcast ``grpo`` at K = 2 and K = 4 and ahead by
+0.12 team accuracy at K = 8, while the theory it was held against predicted a gap of 0.05-0.14 at
K = 4 already, from broadcast's per-answer signal-to-noise falling as about 1/sqrt(K). This
measures the two links of that prediction on the arena's own setting, without training:

1. **Per answer:** the correlation of ``grpo``'s advantage with ``A*`` over every sampled answer
   (theory, equal accuracies: ``1/sqrt(K)``).
2. **Per step:** what the optimiser sees is the step's gradient over its 32 answers of one shared
   adapter. Each method's step gradient ``g = sum_i A_i mean_t grad log pi(token_t of answer i)``
   (minus the trainer's own GRPO loss at ratio 1, over the samples the zero-variance rule keeps) is
   set against the expected exact-credit direction, estimated as the mean of the other
   steps' ``oracle`` gradients (leave-one-out, so no step is compared with itself): the cosine
   ``cos(g_method, mean of the other steps' g_oracle)``. Its paired difference (same episodes)
   says how much of each step's movement broadcast credit loses to the other answers' noise.

Every K plays the arena's config (``credit_arena.split_config``: the same prompts, decoding,
temperature 0.7 and LoRA r 8 on q and v) with the untrained team, ``steps`` steps of 32 answers
each (the arena's batch), on seeds of their own. The gradient is taken at the untrained adapter:
the first update of every run (LoRA's B starts at 0, so only B has a gradient there).

    python -m benchmarks.credit_gradient            # K = 2, 4, 8; 24 steps each (a few minutes)
    python -m benchmarks.credit_gradient --quick    # tiny sizes, writes nothing
    python -m benchmarks.credit_gradient --table-only   # the table from the committed per-step data
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.arena_results import RESULTS
from benchmarks.common import EMBEDDED_MODEL, Result, machine_info, machine_line, markdown_table, set_threads

#: the committed per-step data every figure of the table is computed from
DATA = RESULTS.parent / "credit_gradient.json"
#: team sizes and the methods compared (grpo: broadcast; oracle: A* in closed form)
TEAM_SIZES = (2, 4, 8)
METHODS = ("grpo", "oracle")


def measure(k: int, model: str, steps: int, seed: int) -> dict[str, Any]:
    """One team size: per step, each method's cosine to the leave-one-out exact-credit direction and
    its kept samples; per answer, grpo's and oracle's advantages (for the correlation).

    Returns ``{"k", "steps": [{"cos": {method: c}, "samples": {method: n}}], "answers": {method:
    [advantage per sampled answer, the same order for both]}}``."""
    import torch

    from benchmarks.credit_arena import ARENA_METHODS, sizes_of, split_config
    from teamplay.config import TrainConfig, build_config
    from teamplay.training.play.rollout import RolloutJob, RolloutRunner
    from teamplay.training.step.credit_stage import CreditStage
    from teamplay.training.step.stages import StepContext, all_samples, informative, make_groups, with_samples
    from teamplay.training.wiring.checks import check_run
    from teamplay.training.wiring.wired_run import build_run

    base = split_config(k, model, sizes_of(f"split_k{k}", "default"))
    configs = {m: build_config(TrainConfig, {**base, "seed": seed, "credit": ARENA_METHODS[m]}) for m in METHODS}
    checked = {m: check_run(c) for m, c in configs.items()}
    run = build_run(configs["grpo"])
    try:
        team_model = run.team_model
        per_step = 32 // k  # tuples of K answers: 32 answers a step, as in the arena
        group = base["rollout"]["group_size"]
        problems = per_step // group
        items = run.items[:steps * problems]
        by_id = {item.id: item for item in items}
        runner = RolloutRunner(run.make_env, run.backend, run.sampling, max_batch=configs["grpo"].backend.max_batch)
        stages = {m: CreditStage(checked[m], run, configs[m].sampling, configs[m].backend, seed) for m in METHODS}
        adapters = [a for a in team_model.adapter_names if a not in team_model.frozen]
        params = team_model.trainable_parameters()  # the same adapters, in the same order
        grads: dict[str, list[np.ndarray]] = {m: [] for m in METHODS}
        kept: dict[str, list[int]] = {m: [] for m in METHODS}
        answers: dict[str, list[float]] = {m: [] for m in METHODS}
        for s in range(steps):
            chunk = items[s * problems:(s + 1) * problems]
            jobs = [RolloutJob(item=item, group_id=f"grad:{s}:{item.id}") for item in chunk for _ in range(group)]
            episodes = runner.run(jobs, seed=seed * 100_003 + s)
            groups = make_groups(episodes, by_id)
            ctx = StepContext(0, frozenset(adapters), tuple(episodes))
            for m in METHODS:
                credited = stages[m](groups, ctx)
                # every answer's advantage before the zero-variance rule (0 where a group has no signal)
                for work in credited:
                    for ep, adv in work.credited:
                        answers[m].extend(float(adv[t]) for t, msg in enumerate(ep.messages) if msg.spoke)
                samples = all_samples(with_samples(informative(credited), ctx.active))
                kept[m].append(len(samples))
                grads[m].append(_step_gradient(team_model, params, samples, configs[m], torch))
    finally:
        if run.owns_backend:
            run.backend.close()
    rows = []
    oracle = np.stack(grads["oracle"])  # [S, D]
    total = oracle.sum(axis=0)
    for s in range(steps):
        target = (total - oracle[s]) / max(1, steps - 1)  # the other steps' mean exact-credit direction
        rows.append({"cos": {m: _cos(grads[m][s], target) for m in METHODS},
                     "samples": {m: kept[m][s] for m in METHODS}})
    return {"k": k, "steps": rows, "answers": answers}


def _step_gradient(team_model, params, samples, cfg, torch) -> np.ndarray:
    """The flattened gradient of minus the trainer's own loss (``objective_loss`` of ``cfg.objective``:
    GRPO's clipped surrogate, a mean over each answer's tokens then over answers) on ``samples``, at
    ratio 1 (the old log-probs are this pass's, as in the first minibatch of an update): the
    direction a step's first update moves the adapter before the optimiser rescales it. Zeros when
    no sample is kept."""
    from teamplay.training.learn.losses import objective_loss

    for p in params:
        p.grad = None
    by_adapter: dict[str, list] = {}
    for sample in samples:
        by_adapter.setdefault(sample.adapter, []).append(sample)
    for adapter, part in by_adapter.items():
        logp, mask = team_model.completion_logprobs([list(x.prompt_ids) for x in part],
                                                    [list(x.completion_ids) for x in part],
                                                    adapter=adapter, temperature=cfg.sampling.temperature)  # [b, C]
        adv = torch.tensor([x.advantage for x in part], dtype=logp.dtype)  # [b]
        loss, _ = objective_loss(cfg.objective, logp, logp.detach(), None, adv, mask,
                                 norm_tokens=cfg.sampling.max_new_tokens)
        (-loss * len(part)).backward()  # a sum over the answers, so the adapters' shares add up
    flat = [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().double().flatten() for p in params]
    for p in params:
        p.grad = None
    return torch.cat(flat).numpy()


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    return float(a @ b / (na * nb)) if na > 0 and nb > 0 else 0.0


def table(data: dict[str, Any]) -> tuple[str, str, list[str]]:
    """(markdown table, headline, notes) from the per-step data."""
    from benchmarks.credit_arena import mean_ci

    rows, heads = [], []
    for entry in data["sizes"]:
        k, steps = entry["k"], entry["steps"]
        cos = {m: [row["cos"][m] for row in steps] for m in METHODS}
        diff = [g - o for g, o in zip(cos["grpo"], cos["oracle"], strict=True)]
        r = float(np.corrcoef(entry["answers"]["grpo"], entry["answers"]["oracle"])[0, 1])
        (cg, hg), (co, ho), (d, hd) = mean_ci(cos["grpo"]), mean_ci(cos["oracle"]), mean_ci(diff)
        ratio = cg / co if co else math.nan
        kept = {m: mean_ci([row["samples"][m] for row in steps])[0] for m in METHODS}
        rows.append([k, len(steps), len(entry["answers"]["grpo"]), f"{r:.2f}", f"{1 / math.sqrt(k):.2f}",
                     f"{cg:.3f} ± {hg:.3f}", f"{co:.3f} ± {ho:.3f}", f"{d:+.3f} ± {hd:.3f}", f"{ratio:.2f}",
                     f"{kept['grpo']:.1f} / {kept['oracle']:.1f}"])
        heads.append(f"K = {k}: {ratio:.2f}")
    header = ["K", "steps", "answers", "r(grpo advantage, A*) per answer", "1/sqrt(K)",
              "cos(grpo step, exact direction)", "cos(oracle step, exact direction)", "difference (paired)",
              "grpo / oracle", "samples kept a step (grpo / oracle)"]
    headline = ("broadcast grpo's step gradient keeps this share of the exact credit's alignment with the "
                "expected exact-credit direction: " + ", ".join(heads) + ".")
    notes = [f"Model {data['model']}, the arena's split config (temperature {data['temperature']}, 32 answers a "
             f"step), the untrained adapter, seed {data['seed']}. 'exact direction': the mean of the other steps' "
             "`oracle` step gradients (leave-one-out). Cells: mean ± 95% t interval over steps; 'difference': "
             "per-step grpo - oracle on the same episodes. 'r ... per answer': Pearson over every sampled answer "
             "(0 advantage where a group's rewards are all equal). The per-step data are committed "
             "(`benchmarks/results/credit_gradient.json`); `--table-only` recomputes this table from them."]
    return markdown_table(header, rows), headline, notes


def run(quick: bool = False, model: str = EMBEDDED_MODEL, sizes: Sequence[int] = TEAM_SIZES,
        steps: int | None = None, seed: int = 1000) -> dict[str, Any]:
    """Measure every team size; the per-step data (``table`` reads them)."""
    from benchmarks.credit_arena import TEMPERATURE

    steps = steps or (3 if quick else 24)
    return {"model": model, "seed": seed, "temperature": TEMPERATURE, "steps": steps,
            "sizes": [measure(k, model, steps, seed) for k in sizes]}


def main(argv: list[str] | None = None) -> None:
    """``python -m benchmarks.credit_gradient [--quick | --table-only] [--model M]``."""
    import json

    from benchmarks.common import DEFAULT_OUTPUT, write_regions
    from teamplay.atomic import write_atomically

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (writes nothing)")
    parser.add_argument("--table-only", action="store_true", help="the table from the committed per-step data")
    parser.add_argument("--model", default=EMBEDDED_MODEL)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--data", type=Path, default=DATA, help="where the per-step data are kept")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    if args.table_only:
        if not args.data.is_file():
            parser.error(f"--table-only: no per-step data at {args.data.name}; run the benchmark first")
        data = json.loads(args.data.read_text(encoding="utf-8"))
    else:
        data = run(quick=args.quick, model=args.model)
        data["machine"] = machine_line(machine_info())
        data["command"] = "python -m benchmarks.credit_gradient" + (" --quick" if args.quick else "")
    body, headline, notes = table(data)
    print(body, *notes, headline, sep="\n\n")
    if args.quick:
        return
    if not args.table_only:
        write_atomically(args.data, (json.dumps(data, indent=1) + "\n").encode("utf-8"))
    region = Result("credit_gradient", body, headline, None, tuple(notes)).markdown(data["command"], data["machine"])
    write_regions(DEFAULT_OUTPUT, {"credit_gradient": region})
    print(f"updated {DEFAULT_OUTPUT.name}: credit_gradient")


if __name__ == "__main__":
    main()
