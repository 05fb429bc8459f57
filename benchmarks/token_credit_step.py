"""A training step with token-level credit against the same step with message-level GRPO credit.

Three ``Trainer``s built the same way (same model, fresh LoRA r=8 each, same seed, same problems,
same batch, completions of exactly ``max_new_tokens`` tokens, see ``trainer_vs_trl``): credit
``grpo`` alone (one advantage per message), ``grpo`` + token method ``dgpo`` (the most expensive
token method: entropies and the Hellinger distance to the reference need the full next-token
distributions, with the adapter and with adapters disabled, in one extra batched no-grad pass),
and ``grpo`` + ``aem`` (behaviour log-probs only, no extra pass). Steps run interleaved, one of
each in turn, in one process, so machine load hits all three alike; the figure is the ratio of
mean step times, token / message. Target: at most 1.15x.

    python -m benchmarks token_credit_step
    python -m benchmarks.token_credit_step --quick
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, script_main
from benchmarks.trainer_vs_trl import LORA_ALPHA, LORA_R, LR, closeness_task, mask_stop_tokens, stop_ids_of

VARIANTS = (("message-level `grpo`", None), ("`grpo` + token `dgpo`", "dgpo"), ("`grpo` + token `aem`", "aem"))
TARGET = 1.15


def make_trainer(model: str, token: str | None, problems: int, group: int, max_new: int, steps: int, out: Path):
    from teamplay.agents.backends.hf import HFBackend
    from teamplay.config import TrainConfig, build_config
    from teamplay.training.setup import build_team_model, env_factory
    from teamplay.training.trainer import Trainer

    credit = {"method": "grpo", **({"token": {"method": token}} if token else {})}
    cfg = build_config(TrainConfig, {
        "protocol": {"name": "single"},
        "model": {"name": model, "lora": {"r": LORA_R, "alpha": LORA_ALPHA}},
        "credit": credit,
        "rollout": {"problems_per_step": problems, "group_size": group},
        "sampling": {"max_new_tokens": max_new, "temperature": 1.0},
        "optim": {"lr": LR, "epochs": 1, "minibatch_size": problems * group},
        "steps": steps + 1, "output_dir": str(out / (token or "message")), "tensorboard": False,
    })
    task = closeness_task()
    _, team = env_factory(task, cfg.protocol, cfg.team)
    team_model = build_team_model(cfg.model, team, cfg.seed)
    mask_stop_tokens(team_model.base_model, stop_ids_of(team_model.base_model, team_model.tokenizer))
    return Trainer(cfg, team_model=team_model, backend=HFBackend(team_model, max_prompt_tokens=1536),
                   task=task, items=task.load("train", limit=64, seed=0))


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 2 problems x 2 completions of 4 tokens, 1 timed step; otherwise 4 x 4 of 32
    tokens, 3 timed steps (each variant after one warm-up step)."""
    problems, group, max_new, steps = (2, 2, 4, 1) if quick else (4, 4, 32, 3)
    times: dict[str, list[float]] = {name: [] for name, _ in VARIANTS}
    token_messages: dict[str, list[int]] = {name: [] for name, _ in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {name: make_trainer(model, token, problems, group, max_new, steps, Path(tmp))
                    for name, token in VARIANTS}
        for _ in range(steps + 1):
            for name, _token in VARIANTS:
                start = time.perf_counter()
                metrics = trainers[name].step().metrics
                times[name].append(time.perf_counter() - start)
                token_messages[name].append(int(metrics.get("token_credit_messages", 0)))
    means = {name: sum(t[1:]) / steps for name, t in times.items()}
    base = means[VARIANTS[0][0]]
    ratios = {name: means[name] / base for name in means}
    rows = [[name, f"{t[0]:.2f}", ", ".join(f"{x:.2f}" for x in t[1:]), f"{means[name]:.2f}",
             f"**{fmt_ratio(ratios[name])}**"] for name, t in times.items()]
    table = markdown_table(["credit", "warm-up step s", "timed steps s", "mean s", "/ message-level"], rows)
    worst = max(ratios[name] for name, token in VARIANTS if token)
    met = worst <= TARGET
    headline = (f"a step with token-level credit costs {fmt_ratio(ratios[VARIANTS[1][0]])} (dgpo, with its "
                f"statistics pass) and {fmt_ratio(ratios[VARIANTS[2][0]])} (aem) the message-level GRPO step; "
                f"target ≤ {TARGET}× {'met' if met else 'NOT met'}.")
    notes = (f"Model {model}, single protocol, arith level 1 scored by closeness, {problems} problems × {group} "
             f"completions of exactly {max_new} tokens per step, LoRA r={LORA_R}, one epoch, one optimiser step "
             f"per batch; steps interleaved across the three trainers. Messages with token advantages per "
             f"step: " + "; ".join(f"{name}: {', '.join(map(str, n))}" for name, n in token_messages.items()) + ".",)
    data = {"model": model, "problems": problems, "group": group, "max_new_tokens": max_new,
            "step_seconds": times, "ratios": ratios, "token_credit_messages": token_messages}
    return Result("token_credit_step", table, headline, met, notes, data)


def main() -> None:
    script_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
