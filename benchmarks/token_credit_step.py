"""A training step with token-level credit against the same step with message-level GRPO credit.

``Trainer``s built the same way (same model, fresh LoRA r=8 each, same seed, same problems, same
batch, completions of exactly ``max_new_tokens`` tokens, see ``trainer_vs_trl``), one per variant:

* message-level ``grpo`` (no KL): the baseline;
* message-level ``grpo`` with ``kl_beta`` 0.04: the same step plus the reference pass a KL term makes;
* ``grpo`` + token ``s_trace`` and ``aem``: they read the behaviour log-probs and the entropies the HF
  backend records while generating, so no model pass of their own;
* ``grpo`` + token ``dgpo``: its entropies and Hellinger distances come from the update's own forward
  pass (a per-message method), plus one pass of the reference (adapters disabled);
* ``grpo`` + token ``ep_grpo``: recorded entropies plus a reference pass before the update;
* ``grpo`` + token ``gear``: one no-grad pass of the adapter on each prompt followed by the
  reference-answer hint (the teacher), each distinct prompt run once;
* ``grpo`` + token ``vpr``: decoding only (token offsets of the arithmetic claims), no model pass.

Steps run interleaved, one of each variant per round, in one process, so machine load hits all of
them alike; each round's step time is divided by the baseline's in the same round and the figure
is the median over the timed rounds (a load spike in one round moves one ratio, not the figure).
Target: at most 1.15x the message-level step.

    python -m benchmarks token_credit_step
    python -m benchmarks.token_credit_step --quick
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, script_main
from benchmarks.trainer_vs_trl import LORA_ALPHA, LORA_R, LR, closeness_task, mask_stop_tokens, stop_ids_of

#: (label, token method or None, objective kl_beta)
VARIANTS = (("message-level `grpo`", None, 0.0), ("message-level `grpo`, KL 0.04", None, 0.04),
            ("`grpo` + token `s_trace`", "s_trace", 0.0), ("`grpo` + token `aem`", "aem", 0.0),
            ("`grpo` + token `dgpo`", "dgpo", 0.0), ("`grpo` + token `ep_grpo`", "ep_grpo", 0.0),
            ("`grpo` + token `gear`", "gear", 0.0), ("`grpo` + token `vpr`", "vpr", 0.0))
TARGET = 1.15
#: token methods that read the reference model (a pass a KL term makes as well)
NEEDS_REFERENCE = ("dgpo", "ep_grpo")


def make_trainer(model: str, token: str | None, kl_beta: float, problems: int, group: int, max_new: int,
                 steps: int, out: Path):
    from teamplay.agents.backends.hf import HFBackend
    from teamplay.config import TrainConfig, build_config
    from teamplay.training.run.trainer import Trainer
    from teamplay.training.wiring.envs import env_factory
    from teamplay.training.wiring.model import build_team_model

    credit = {"method": "grpo", **({"token": {"method": token}} if token else {})}
    cfg = build_config(TrainConfig, {
        "protocol": {"name": "single"},
        "model": {"name": model, "lora": {"r": LORA_R, "alpha": LORA_ALPHA}},
        "credit": credit,
        "rollout": {"problems_per_step": problems, "group_size": group},
        "sampling": {"max_new_tokens": max_new, "temperature": 1.0},
        "objective": {"kl_beta": kl_beta},
        "optim": {"lr": LR, "epochs": 1, "minibatch_size": problems * group},
        "steps": steps + 1, "output_dir": str(out / f"{token or 'message'}-{kl_beta}"), "tensorboard": False,
    })
    task = closeness_task()
    _, team = env_factory(task, cfg.protocol, cfg.team)
    team_model = build_team_model(cfg.model, team, cfg.seed)
    mask_stop_tokens(team_model.base_model, stop_ids_of(team_model.base_model, team_model.tokenizer))
    return Trainer(cfg, team_model=team_model, backend=HFBackend(team_model, max_prompt_tokens=1536),
                   task=task, items=task.load("train", limit=64, seed=0))


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 2 problems x 2 completions of 4 tokens, 1 timed round; otherwise 4 x 4 of 32
    tokens, 4 timed rounds (each variant after one warm-up step)."""
    problems, group, max_new, steps = (2, 2, 4, 1) if quick else (4, 4, 32, 4)
    times: dict[str, list[float]] = {name: [] for name, _, _ in VARIANTS}
    token_messages: dict[str, list[int]] = {name: [] for name, _, _ in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {name: make_trainer(model, token, kl, problems, group, max_new, steps, Path(tmp))
                    for name, token, kl in VARIANTS}
        for _ in range(steps + 1):
            for name, _token, _kl in VARIANTS:
                start = time.perf_counter()
                metrics = trainers[name].step().metrics
                times[name].append(time.perf_counter() - start)
                token_messages[name].append(int(metrics.get("token_credit_messages", 0)))
    base_name = VARIANTS[0][0]
    paired = {name: [t / b for t, b in zip(times[name][1:], times[base_name][1:], strict=True)] for name in times}
    ratios = {name: statistics.median(r) for name, r in paired.items()}
    kl_name = VARIANTS[1][0]
    vs_kl = {name: statistics.median(t / b for t, b in zip(times[name][1:], times[kl_name][1:], strict=True))
             for name in times}
    rows = [[name, f"{t[0]:.2f}", ", ".join(f"{x:.2f}" for x in t[1:]),
             ", ".join(f"{x:.2f}" for x in paired[name]), f"**{fmt_ratio(ratios[name])}**",
             fmt_ratio(vs_kl[name])] for name, t in times.items()]
    table = markdown_table(["credit", "warm-up step s", "timed steps s", "per-round ratio", "median / message-level",
                            "median / message-level with KL"], rows)
    token_rows = [(name, token) for name, token, _ in VARIANTS if token]
    free = [name for name, token in token_rows if token not in NEEDS_REFERENCE]
    with_ref = [name for name, token in token_rows if token in NEEDS_REFERENCE]
    met = all(ratios[name] <= TARGET for name, _ in token_rows)  # every token method, against GRPO without KL
    headline = ("a step with token-level credit costs " + ", ".join(f"{fmt_ratio(ratios[n])} ({n})" for n in free)
                + " the message-level GRPO step; the methods that read the reference model cost "
                + ", ".join(f"{fmt_ratio(ratios[n])} ({n})" for n in with_ref) + " of it and "
                + ", ".join(f"{fmt_ratio(vs_kl[n])}" for n in with_ref)
                + " of the GRPO step with a KL term (the same reference pass); target ≤ "
                + f"{TARGET}× for every token method {'met' if met else 'NOT met'}.")
    notes = (f"Model {model}, single protocol, arith level 1 scored by closeness, {problems} problems × {group} "
             f"completions of exactly {max_new} tokens per step, LoRA r={LORA_R}, one epoch, one optimiser step "
             f"per batch; steps interleaved across the trainers, ratios paired within a round. Messages with "
             f"token advantages per step: " + "; ".join(f"{name}: {', '.join(map(str, n))}"
                                                         for name, n in token_messages.items()) + ".",)
    data = {"model": model, "problems": problems, "group": group, "max_new_tokens": max_new,
            "step_seconds": times, "paired_ratios": paired, "ratios": ratios, "ratios_vs_kl": vs_kl,
            "token_credit_messages": token_messages}
    return Result("token_credit_step", table, headline, met, notes, data)


def main() -> None:
    script_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
