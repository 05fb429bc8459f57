"""Fake run and eval folders for report tests, written line by line as the trainer and
``teamplay eval -o`` write them (see teamplay/training/run/trainer.py and the eval command).

The fake run has 5 steps and a two-agent proposer/reviewer team. Its logged episodes are built so
that the reviewer is a free rider: in episodes the team gets right, the proposer's messages carry
+0.8 and the reviewer's +0.01 (|0.01| < the 0.05 threshold); in wrong ones -0.6 and -0.02.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

INJECTION = "<script>alert(1)</script>"
ATTRIBUTE_INJECTION = '"><img src=x onerror="window.__pwned=1">'
STEPS = 5


def eval_metrics(accuracy: float, tokens: float = 120.0) -> dict[str, Any]:
    """An EvalMetrics.to_dict() with hand-picked numbers."""
    return {"episodes": 8, "team_accuracy": accuracy, "role_accuracy": {"proposer": accuracy - 0.125},
            "any_agent_right": min(1.0, accuracy + 0.125), "initial_accuracy": accuracy - 0.125,
            "wrong_to_right": 0.25, "right_to_wrong": 0.125, "tokens_per_problem": tokens,
            "calls_per_problem": 2.0, "seconds": 3.5, "tokens_per_second": 8 * tokens / 3.5, "extra": {}}


def message(agent: str, stage: str, rnd: int, text: str, answer: str | None) -> dict[str, Any]:
    role = agent.rpartition("_")[0]
    return {"agent": agent, "role": role, "round": rnd, "stage": stage, "text": text, "prompt_ids": [1, 2],
            "completion_ids": [3, 4, 5], "logprobs": [-0.1, -0.2, -0.3], "adapter": role, "answer": answer,
            "spoke": True}


def episode(step: int, index: int, right: bool, text: str = "I think the answer is 42.") -> dict[str, Any]:
    """A proposer/reviewer episode: propose, review, revise (3 messages)."""
    answer = "42" if right else "41"
    return {
        "problem_id": f"arith/train/{step}{index}", "group_id": f"s{step}:arith/train/{step}{index}",
        "agents": ["proposer_0", "reviewer_0"],
        "messages": [message("proposer_0", "propose", 0, text, answer),
                     message("reviewer_0", "review", 0, "RIGHT, looks fine to me.", None),
                     message("proposer_0", "revise", 1, f"Final answer: {answer}", answer)],
        "final_answer": answer, "reward": 1.0 if right else 0.0,
        "agent_answers": {"proposer_0": answer, "reviewer_0": None},
        "agent_correct": {"proposer_0": 1.0 if right else 0.0, "reviewer_0": 0.0},
        "tokens": 9, "calls": 3,
        "metadata": {"protocol": "proposer_reviewer", "initial_answer": answer, "verdicts": ["RIGHT"]},
    }


def advantages(right: bool) -> list[float]:
    """proposer, reviewer, proposer advantages of ``episode``'s three messages."""
    return [0.8, 0.01, 0.8] if right else [-0.6, -0.02, -0.6]


def training_line(step: int, kl: bool = True, speak_rate: bool = False) -> dict[str, Any]:
    line: dict[str, Any] = {
        "step": step, "reward_mean": 0.25 + 0.1 * step, "reward_std": 0.3, "accuracy": 0.1 + 0.1 * step,
        "groups": 4, "zero_variance_groups": 1, "samples": 36, "trained_adapters": ["proposer", "reviewer"],
        "adv_mean": {"proposer": 0.1 * step, "reviewer": 0.01},
        "credit_share": {"proposer": 0.7 + 0.04 * step, "reviewer": 0.3 - 0.04 * step}, "loss": 0.05, "ratio_mean": 1.0,
        "entropy": 1.2, "clip_fraction": 0.02 * step, "clip_fraction_epoch1": 0.0,
        "clip_fraction_epoch2": 0.04 * step, "grad_norm": 0.5, "optimizer_steps": 2,
        "skipped_nonfinite_steps": 0, "lr": 1e-5, "tokens": 1000 + 10 * step, "seconds": 12.0,
        "rollout_seconds": 10.0, "credit_seconds": 0.1,
        "reward_min": 0.0, "reward_max": 1.0, "adv_min": -1.5 * step, "adv_max": 1.5,
    }
    if kl:
        line["kl"] = 0.001 * step
    if speak_rate:
        line["speak_rate"] = {"reviewer_0/review": 1.0 - 0.1 * step}
    return line


def write_run(path: Path, steps: int = STEPS, heldout: bool = True, kl: bool = True,
              speak_rate: bool = False, episode_text: str = INJECTION) -> Path:
    """A run folder with ``steps`` training lines, 2 credited episodes per step (one right, one
    wrong; the first message of each is ``episode_text``) and, with ``heldout``, evaluations
    before training (step 0, accuracy 0.25) and after it (accuracy 0.5)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text(
        "task:\n  name: arith\n  split: train\nprotocol:\n  name: proposer_reviewer\n"
        "credit:\n  method: shapley\nobjective:\n  name: grpo\nmodel:\n  name: smollm2-135m\n"
        f"steps: {steps}\n", encoding="utf-8")
    lines = [{"step": 0, "heldout": eval_metrics(0.25)}] if heldout else []
    lines += [training_line(s, kl, speak_rate) for s in range(1, steps + 1)]
    if heldout:
        lines.append({"step": steps, "heldout_final": eval_metrics(0.5, tokens=100.0)})
    (path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    rows = []
    for s in range(1, steps + 1):
        for i, right in enumerate((True, False)):
            rows.append({"step": s, **episode(s, i, right, episode_text), "advantages": advantages(right)})
    (path / "episodes.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                         encoding="utf-8")
    return path


def write_eval(path: Path, accuracy: float = 0.5, protocol: str = "proposer_reviewer",
               episode_text: str = INJECTION) -> Path:
    """An eval folder: results.json and two transcripts (one right, one wrong)."""
    path.mkdir(parents=True, exist_ok=True)
    results = {"config": {"task": {"name": "arith", "split": "test"}, "protocol": {"name": protocol},
                          "model": {"name": "smollm2-135m"}},
               "metrics": eval_metrics(accuracy)}
    (path / "results.json").write_text(json.dumps(results, indent=2), encoding="utf-8")
    rows = [{"prompt": f"What is 40 + 2? {INJECTION}", "reference": "42", **episode(0, i, right, episode_text)}
            for i, right in enumerate((True, False))]
    (path / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_sweep(path: Path) -> Path:
    """A sweep folder as ``teamplay sweep`` writes it: 2 grid points (``grpo`` and a label carrying
    ``INJECTION``) x 2 seeds, each run a ``write_run`` folder with ``done.json``. The final held-out
    team accuracy of (point, seed) is 0.5 + 0.1 * point + 0.2 * seed (grpo: 0.5, 0.7; the other:
    0.6, 0.8), and every final evaluation carries team metrics (verdict accuracy 0.5 + 0.1 * seed)."""
    values = ["grpo", INJECTION]
    runs = []
    for p, value in enumerate(values):
        for seed in (0, 1):
            name = f"point{p}__seed{seed}"
            runs.append({"name": name, "label": f"credit.method={value}", "point": {"credit.method": value},
                         "seed": seed})
            run = write_run(path / "runs" / name)
            lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            for line in lines:
                if "heldout_final" in line:
                    final = line["heldout_final"]
                    final["team_accuracy"] = 0.5 + 0.1 * p + 0.2 * seed
                    final["extra"] = {"team": {"verdict_accuracy": 0.5 + 0.1 * seed, "wrong_caught": 0.4,
                                               "first_answer_accuracy": {"proposer": 0.3}}}
                if "reward_mean" in line:
                    line["reward_mean"] += 0.05 * seed + 0.1 * p
            (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
            (run / "done.json").write_text(json.dumps(runs[-1]), encoding="utf-8")
    manifest = {"base_config": {}, "grid": {"credit.method": values}, "seeds": [0, 1], "runs": runs}
    (path / "sweep.json").write_text(json.dumps(manifest), encoding="utf-8")
    return path
