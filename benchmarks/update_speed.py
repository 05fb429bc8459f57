"""The policy update of one demo step: prompts shared or not, old log-probs from the generation or
the trainer, float32 against ``model.dtype: auto``.

The demo's team (``configs/demo.yaml``: proposer/reviewer, Shapley credit, one LoRA adapter per role,
48 new tokens) plays one training step; the step's policy samples (the messages of the groups that
train) are kept, and ``PolicyUpdater.update`` runs on them again and again, from the same adapter
weights and a fresh optimiser each time, in six variants, alternating their order over the
repeats (the machine is noisy):

* ``before``: every row's prompt and completion run whole (``share_prompts`` off), the ratio's old
  log-probs the generation's, peft's LoRA layers and the head's logits log-softmaxed: the update as
  it was;
* ``shared, head on every position``: each adapter's share runs its distinct prompts once and their
  common prefix (the role's system prompt) once, gradients through the shared key/value cache
  (``PolicyUpdater.share_prompts``), and the output head runs on every completion position of the
  padded batch, through the model's own forward (what ``TeamModel`` still does for an architecture
  outside ``HEAD_ONLY_TYPES``); peft's LoRA layers;
* ``shared, peft LoRA``: as above with the head on the real completion tokens only, its logits
  log-softmaxed and gathered (``TeamModel.fused_head`` off), through peft's LoRA layers
  (``lora.fused: false``);
* ``shared, fused head``: as that, the chosen tokens' log-probs through ``head_logprobs`` (one
  [N, V] buffer);
* ``shared``: as that, every LoRA layer as one product in the base's precision
  (``agents.lora_product``): the update's path now;
* ``shared + trainer old``: as ``shared``, with ``objective.old_logprobs: trainer`` (a no-grad pass
  on the starting weights for every minibatch after the first optimiser step): ``auto``'s choice
  for a bfloat16 model.

Each dtype loads its own model and plays its own step (the samples differ between dtypes, so compare
the dtypes by seconds per sample token). The losses of the variants are compared too: equal up to
float summation order in float32, and within bfloat16 rounding in bfloat16 (the fused LoRA product
rounds its rank-r intermediate to bfloat16).

    python -m benchmarks update_speed
    python -m benchmarks.update_speed --quick
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import EMBEDDED_MODEL, Result, fmt_ratio, markdown_table, script_main

VARIANTS = ("before", "shared, head on every position", "shared, peft LoRA", "shared, fused head", "shared",
            "shared + trainer old")
#: the variants that run peft's own LoRA layers, and those that log-softmax the head's logits
PEFT_LORA = frozenset(VARIANTS[:4])
PLAIN_HEAD = frozenset(VARIANTS[:3])
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def demo_config(model: str, dtype: str, out: Path, quick: bool) -> dict[str, Any]:
    """The demo's config (``configs/demo.yaml``) for one step of ``model`` in ``dtype``; ``quick``:
    1 problem x 2 episodes of 4 new tokens (``step_samples`` then gives them synthetic advantages)."""
    import yaml

    raw = yaml.safe_load(DEMO_CONFIG.read_text())
    raw["model"] = {**raw["model"], "name": model, "dtype": dtype}
    raw.update(steps=1, output_dir=str(out), tensorboard=False)
    if quick:
        raw["rollout"] = {"problems_per_step": 1, "group_size": 2}
        raw["sampling"] = {**raw["sampling"], "max_new_tokens": 4, "temperature": 1.0}
        raw["task"] = {**raw["task"], "limit": 8}
    return raw


def step_samples(raw: dict[str, Any], synthetic: bool = False):
    """A ``Trainer`` of ``raw`` and the policy samples of its first step (its update not run).
    ``synthetic``: every generated message of the step, with advantages of +1 and -1 in turn (a tiny
    random model's rewards are all equal, so its step would train nothing)."""
    from teamplay.config import TrainConfig, build_config
    from teamplay.training.learn.samples import PolicySample
    from teamplay.training.run.trainer import Trainer

    trainer = Trainer(build_config(TrainConfig, raw))
    captured: list = []
    episodes: list = []
    play = trainer.runner.run

    def keep(samples, step, **_):
        captured.extend(samples)
        return {"optimizer_steps": 0}

    def played(*args, **kwargs):
        out = play(*args, **kwargs)
        episodes.extend(out)
        return out

    trainer.update.learner.update = keep
    trainer.runner.run = played
    trainer.step()
    if synthetic:
        messages = [m for ep in episodes for m in ep.messages if m.completion_ids and m.adapter]
        captured = [PolicySample(adapter=m.adapter, role=m.role, prompt_ids=tuple(m.prompt_ids),
                                 completion_ids=tuple(m.completion_ids), old_logprobs=tuple(m.logprobs),
                                 advantage=(1.0, -1.0)[k % 2], group_id="synthetic")
                    for k, m in enumerate(messages)]
    return trainer, captured


def time_variants(trainer, samples, repeats: int) -> dict[str, Any]:
    """Seconds of each variant's update (best and all repeats) and its loss."""
    import torch

    from teamplay.agents.lora_product import fuse_lora_layers, unfuse_lora_layers
    from teamplay.training.learn.update import PolicyUpdater
    from teamplay.training.run.sections import update_settings

    tm = trainer.team_model
    params = trainer.update.learner.updater.params
    start = {name: [p.detach().clone() for p in ps] for name, ps in params.items()}
    split = tm._body_and_head
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    losses: dict[str, float] = {}
    for r in range(repeats):
        for variant in (VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))):
            with torch.no_grad():
                for name, ps in params.items():
                    for p, p0 in zip(ps, start[name], strict=True):
                        p.copy_(p0)
            cfg = trainer.cfg.model_copy(deep=True)
            cfg.objective.old_logprobs = "trainer" if variant.endswith("trainer old") else "generation"
            optimizer = torch.optim.AdamW([p for ps in params.values() for p in ps], lr=cfg.optim.lr)
            updater = PolicyUpdater(update_settings(cfg), tm, params, optimizer)
            updater.share_prompts = variant != "before"
            # the model's own forward, head on every kept position (TeamModel's path for other architectures)
            tm.__dict__["_body_and_head"] = None if variant == "shared, head on every position" else split
            tm.fused_head = variant not in PLAIN_HEAD
            (unfuse_lora_layers if variant in PEFT_LORA else fuse_lora_layers)(tm.model)
            t0 = time.perf_counter()
            metrics = updater.update(samples, step=0)
            seconds[variant].append(time.perf_counter() - t0)
            losses[variant] = float(metrics.get("loss", float("nan")))
    tm.__dict__["_body_and_head"] = split
    tm.fused_head = True
    fuse_lora_layers(tm.model)
    return {"seconds": seconds, "best": {v: min(s) for v, s in seconds.items()}, "loss": losses}


def run(quick: bool = False, model: str = EMBEDDED_MODEL) -> Result:
    """``quick``: one repeat of a 1 x 2 step with 4 new tokens, float32 only; otherwise 3 repeats per
    variant, float32 and auto."""
    from teamplay.agents.models import resolve_dtype

    dtypes, repeats = (("float32",), 1) if quick else (("float32", "auto"), 3)
    data: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in dtypes:
            trainer, samples = step_samples(demo_config(model, dtype, Path(tmp) / dtype, quick), synthetic=quick)
            try:
                if not samples:
                    raise RuntimeError(f"the {dtype} step trained no message (every group had equal rewards)")
                timed = time_variants(trainer, samples, repeats)
            finally:
                trainer.close()
            timed.update(samples=len(samples), resolved=resolve_dtype(dtype),
                         prompt_tokens=sum(len(s.prompt_ids) for s in samples),
                         completion_tokens=sum(len(s.completion_ids) for s in samples),
                         distinct_prompts=len({s.prompt_ids for s in samples}))
            data[dtype] = timed
    rows = []
    for dtype, d in data.items():
        tokens = d["prompt_tokens"] + d["completion_tokens"]
        for variant in VARIANTS:
            best = d["best"][variant]
            rows.append([f"{dtype} ({d['resolved']})", variant, d["samples"], f"{best:.2f}",
                         ", ".join(f"{s:.2f}" for s in d["seconds"][variant]), f"{1000 * best / tokens:.2f}",
                         f"**{fmt_ratio(d['best']['before'] / best)}**", f"{d['loss'][variant]:.6f}"])
    table = markdown_table(["dtype", "variant", "samples", "best s", "repeats s", "ms per row token",
                            "before / variant", "loss"], rows)
    shapes = "; ".join(f"{dtype}: {d['samples']} samples, {d['distinct_prompts']} distinct prompts, "
                       f"{d['prompt_tokens']} prompt + {d['completion_tokens']} completion tokens"
                       for dtype, d in data.items())
    notes = (f"The demo's first training step ({'quick sizes' if quick else 'configs/demo.yaml'}), its update "
             f"alone, {repeats} repeat(s) per variant alternating their order, from the same adapter weights "
             f"and a fresh AdamW each time. {shapes}.",)
    gains = ", ".join(f"{dtype} {fmt_ratio(d['best']['before'] / d['best']['shared'])}" for dtype, d in data.items())
    headline = f"sharing prompts in the update: before / shared = {gains}"
    def gain(slower: str, faster: str) -> str:
        return ", ".join(f"{dtype} {fmt_ratio(d['best'][slower] / d['best'][faster])}" for dtype, d in data.items())

    headline += f"; the head on real tokens only: {gain('shared, head on every position', 'shared, peft LoRA')}"
    headline += f"; the fused head: {gain('shared, peft LoRA', 'shared, fused head')}"
    headline += f"; LoRA layers as one product: {gain('shared, fused head', 'shared')}"
    if "auto" in data:
        f32, auto = data["float32"], data["auto"]
        per_token = (f32["best"]["before"] / (f32["prompt_tokens"] + f32["completion_tokens"])) / (
            auto["best"]["shared + trainer old"] / (auto["prompt_tokens"] + auto["completion_tokens"]))
        cost = auto["best"]["shared + trainer old"] / auto["best"]["shared"]
        headline += (f"; the trainer's old log-probs cost {fmt_ratio(cost)} of the shared update (auto); auto with "
                     f"both against float32 before, per row token: {fmt_ratio(per_token)}")
    return Result("update_speed", table, headline + ".", None, notes, data)


if __name__ == "__main__":
    script_main(run, "the policy update of one demo step: shared prompts, old log-probs, dtype")
