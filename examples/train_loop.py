"""Training from Python: a config built in code, the trainer driven one step at a time.

What it shows: a run's config as a typed model (``build_config``: the same checks as a YAML file),
``make_trainer`` (the composition root every entry point uses, so ``distributed:`` and
``model.device`` mean the same as on the command line), and a loop over ``Trainer.step()``,
reading each step's metrics and the advantage the credit method gave every message.
``trainer.train()`` is the whole run instead: held-out evaluations, checkpoints, resume.

Run it (the embedded SmolLM2-135M-Instruct on the CPU, about a minute):
    python examples/train_loop.py
    python examples/train_loop.py --model PATH_OR_HUB_ID --steps 4 --output runs/loop
"""

from __future__ import annotations

import argparse

from teamplay.config import TrainConfig, build_config
from teamplay.distributed.compose import make_trainer


def config(model: str, steps: int, output: str, max_new_tokens: int) -> TrainConfig:
    return build_config(TrainConfig, {
        "model": {"name": model, "lora": {"r": 8, "alpha": 16}},
        "task": {"name": "arith", "split": "train", "options": {"level": 1, "max_operand": 12}, "limit": 200},
        "protocol": {"name": "vote", "options": {"n_agents": 2}},   # two solvers, majority vote
        "credit": {"method": "shapley", "options": {"value": "masking"}},
        "rollout": {"problems_per_step": 2, "group_size": 4},
        "sampling": {"max_new_tokens": max_new_tokens, "temperature": 0.7},
        "optim": {"lr": 5.0e-4},
        "steps": steps, "output_dir": output, "tensorboard": False,
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="hub id, local folder, or smollm2-135m")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--output", default="runs/train_loop")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()

    trainer = make_trainer(config(args.model, args.steps, args.output, args.max_new_tokens))
    try:
        for _ in range(args.steps):
            result = trainer.step()
            m = result.metrics
            print(f"step {result.step}: reward {m['reward_mean']:.2f}, {m['tokens']} tokens, "
                  f"{m['optimizer_steps']} optimiser steps, {len(result.credited)} credited episodes")
            for episode, advantages in result.credited[:2]:  # advantages: one per message, [T]
                for message, adv in zip(episode.messages, advantages, strict=True):
                    print(f"    {message.agent}: {adv:+.3f}  {message.text[:40]!r}")
    finally:
        trainer.close()  # frees what the run built (train() does this itself)


if __name__ == "__main__":
    main()
