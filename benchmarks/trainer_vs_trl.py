"""One single-agent GRPO training step: teamplay's ``Trainer`` against TRL's ``GRPOTrainer``.

Same model (a fresh copy each, the embedded SmolLM2-135M-Instruct by default), same LoRA (r=8,
alpha=16, all linear layers, no dropout), same arith level-1 training problems and chat prompts,
same batch (B problems x G completions, one optimiser step per batch, one epoch), beta=0 (no
reference model), temperature 1, the same learning rate, and the same completion length: a hook
on the output head masks every stop token, so both generate exactly ``max_new_tokens`` tokens per
completion and neither can win by stopping early. TRL's own defaults that teamplay does not do
are switched off (gradient checkpointing, logging, saving); its loss is ``grpo`` (sequence mean of
token means, as teamplay's default ``seq_mean_token_mean``).

Each trainer runs a warm-up step and then ``steps`` timed steps, one after the other in the same
process; the figure is the ratio of mean step times, TRL / teamplay: above 1 means teamplay is
faster.

    python -m benchmarks trainer_vs_trl
    python -m benchmarks.trainer_vs_trl --quick

Needs ``trl`` (``pip install "trl>=1.16"``); without it the benchmark raises a ConfigError saying so.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, script_main

LORA_R, LORA_ALPHA, LR = 8, 16, 1e-5
#: TRL's step time over teamplay's that the benchmark asks for
TARGET = 1.5


def closeness_task():
    """Arith level 1 scored by closeness, ``1 / (1 + |answer - reference|)`` (0 without an integer
    answer), so that a group of a 135M model's completions almost never has four equal rewards.
    With exact-match scoring most groups would be all-wrong; teamplay skips such zero-signal
    groups (no backward) while TRL still backpropagates their zero advantages, and the benchmark
    would time a skipped update against a real one."""
    from teamplay.envs.tasks.catalog.arith import ArithTask

    class ClosenessArith(ArithTask):
        name = "arith_closeness"

        def score(self, completion, item):
            answer = self.extract(completion)
            try:
                return 1.0 / (1.0 + abs(int(answer) - int(item.reference)))
            except (TypeError, ValueError):
                return 0.0

        def score_answer(self, answer, item):
            return 0.0 if answer is None else self.score(answer, item)

    return ClosenessArith(level=1)


def mask_stop_tokens(model, stop_ids) -> None:
    """Make ``stop_ids`` impossible to generate: their logits become the dtype's minimum."""
    import torch

    ids = torch.tensor(sorted(set(stop_ids)))

    def hook(_module, _inputs, logits):
        logits[..., ids] = torch.finfo(logits.dtype).min  # [B, L, V] in place
        return logits

    model.get_output_embeddings().register_forward_hook(hook)


def stop_ids_of(model, tokenizer) -> list[int]:
    eos = model.generation_config.eos_token_id
    ids = list(eos) if isinstance(eos, (list, tuple)) else ([eos] if eos is not None else [])
    return ids + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])


def teamplay_steps(model: str, problems: int, group: int, max_new: int, steps: int,
                   out: Path) -> tuple[list[float], list[int]]:
    """Seconds of each ``Trainer.step()`` (the first one is the warm-up) and the completions each
    step trained on (fewer than B x G when a group had equal rewards)."""
    from teamplay.agents.backends.hf import HFBackend
    from teamplay.config import TrainConfig, build_config
    from teamplay.training.run.trainer import Trainer
    from teamplay.training.wiring.envs import env_factory
    from teamplay.training.wiring.model import build_team_model

    cfg = build_config(TrainConfig, {
        "protocol": {"name": "single"},
        "model": {"name": model, "lora": {"r": LORA_R, "alpha": LORA_ALPHA}},
        "credit": {"method": "grpo"},
        "objective": {"name": "grpo", "kl_beta": 0.0},
        "rollout": {"problems_per_step": problems, "group_size": group},
        "sampling": {"max_new_tokens": max_new, "temperature": 1.0},
        "optim": {"lr": LR, "epochs": 1, "minibatch_size": problems * group},
        "steps": steps + 1, "output_dir": str(out / "teamplay"), "tensorboard": False,
    })
    task = closeness_task()
    items = task.load("train", limit=64, seed=0)
    _, team = env_factory(task, cfg.protocol, cfg.team)
    team_model = build_team_model(cfg.model, team, cfg.seed)
    mask_stop_tokens(team_model.base_model, stop_ids_of(team_model.base_model, team_model.tokenizer))
    trainer = Trainer(cfg, team_model=team_model, backend=HFBackend(team_model, max_prompt_tokens=1536),
                      task=task, items=items)
    times, trained = [], []
    for _ in range(steps + 1):
        start = time.perf_counter()
        metrics = trainer.step().metrics
        times.append(time.perf_counter() - start)
        trained.append(metrics["samples"])
        expected = problems * group * max_new
        if metrics["tokens"] != expected:
            raise RuntimeError(f"teamplay generated {metrics['tokens']} tokens, expected {expected}: the "
                               f"stop-token mask did not force the completion length")
    return times, trained


def trl_steps(model: str, problems: int, group: int, max_new: int, steps: int, out: Path) -> tuple[list[float], str]:
    """Seconds of each TRL optimiser step (the first one is the warm-up) and TRL's version."""
    try:
        import trl
        from datasets import Dataset
        from peft import LoraConfig
        from transformers import TrainerCallback
        from trl import GRPOConfig, GRPOTrainer
    except ImportError as exc:
        from teamplay.errors import ConfigError

        raise ConfigError(f"trainer_vs_trl needs TRL: pip install 'trl>=1.16' ({exc})") from None
    from teamplay.agents.models import load_model
    from teamplay.config import ProtocolConfig
    from teamplay.training.wiring.envs import env_factory

    task = closeness_task()
    items = task.load("train", limit=64, seed=0)
    make_env, _ = env_factory(task, ProtocolConfig(name="single"), None)
    rows = []
    for i, item in enumerate(items):  # the chat teamplay's `single` protocol shows the model
        env = make_env()
        env.reset(seed=i, options={"item": item, "group_id": "trl"})
        chat = env.infos[env.agent_selection]["turn"].chat
        rows.append({"prompt": [{"role": m.role, "content": m.content} for m in chat], "item_index": i})
    dataset = Dataset.from_list(rows)

    def reward(completions, item_index, **_):  # what teamplay's env rewards: the extracted answer's score
        return [task.score_answer(task.extract(c[-1]["content"]), items[i])
                for c, i in zip(completions, item_index, strict=True)]

    base, tokenizer = load_model(model)
    mask_stop_tokens(base, stop_ids_of(base, tokenizer))
    ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    config = GRPOConfig(
        output_dir=str(out / "trl"), per_device_train_batch_size=problems * group, num_generations=group,
        gradient_accumulation_steps=1, max_completion_length=max_new, beta=0.0, num_iterations=1,
        learning_rate=LR, loss_type="grpo", temperature=1.0, top_p=1.0, max_steps=steps + 1,
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, report_to="none",
        logging_steps=10_000, save_strategy="no", disable_dropout=True, seed=0, dataloader_num_workers=0)
    lora = LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear",
                      bias="none", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=base, reward_funcs=reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, peft_config=lora, callbacks=[StepClock()])
    trainer.train()
    return [b - a for a, b in zip(ends[:-1], ends[1:], strict=True)], trl.__version__


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: 2 problems x 2 completions of 4 tokens, 1 timed step; otherwise 4 x 4 of 32
    tokens, 3 timed steps (each after one warm-up step)."""
    problems, group, max_new, steps = (2, 2, 4, 1) if quick else (4, 4, 32, 3)
    with tempfile.TemporaryDirectory() as tmp:
        ours, trained = teamplay_steps(model, problems, group, max_new, steps, Path(tmp))
        theirs, version = trl_steps(model, problems, group, max_new, steps, Path(tmp))
    if len(theirs) != steps + 1:
        raise RuntimeError(f"TRL ran {len(theirs)} steps, expected {steps + 1}")
    mean_ours = sum(ours[1:]) / steps
    mean_theirs = sum(theirs[1:]) / steps
    ratio = mean_theirs / mean_ours
    rows = [["teamplay `Trainer` (single, grpo)", f"{ours[0]:.2f}", ", ".join(f"{t:.2f}" for t in ours[1:]),
             f"{mean_ours:.2f}"],
            [f"TRL {version} `GRPOTrainer`", f"{theirs[0]:.2f}", ", ".join(f"{t:.2f}" for t in theirs[1:]),
             f"{mean_theirs:.2f}"],
            ["**TRL / teamplay**", "", "", f"**{fmt_ratio(ratio)}**"]]
    table = markdown_table(["trainer", "warm-up step s", "timed steps s", "mean s"], rows)
    met = ratio >= TARGET
    headline = (f"a teamplay GRPO step takes {mean_ours:.2f} s, TRL {version}'s {mean_theirs:.2f} s: TRL / "
                f"teamplay = {fmt_ratio(ratio)} ({'teamplay faster' if ratio >= 1 else 'TRL faster'}); "
                f"target ≥ {fmt_ratio(TARGET)} {'met' if met else 'NOT met'}.")
    notes = (f"Model {model}, arith level 1 scored by closeness to the answer, {problems} problems × {group} "
             f"completions of exactly {max_new} tokens per step, LoRA r={LORA_R}, beta=0, one epoch, one "
             f"optimiser step per batch; ratio > 1 means teamplay is faster. Completions teamplay trained on "
             f"per step (it skips groups with equal rewards; TRL always trains on all "
             f"{problems * group}): {', '.join(map(str, trained))}.",)
    data = {"model": model, "trl": version, "problems": problems, "group": group, "max_new_tokens": max_new,
            "teamplay_step_seconds": ours,
            "teamplay_trained_completions": trained, "trl_step_seconds": theirs, "trl_over_teamplay": ratio}
    return Result("trainer_vs_trl", table, headline, met, notes, data)


def main() -> None:
    script_main(run, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
