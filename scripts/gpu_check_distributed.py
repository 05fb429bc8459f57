"""The GPU check of the distributed path; run it with ``bash scripts/gpu_check.sh`` (the vLLM backend's own
check is ``scripts/gpu_check.py``).

Prints one line per check (PASS/FAIL with the measured numbers) and exits 0 only when all pass;
exits 2 with one line when there is no CUDA GPU or no vLLM.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

#: largest |vLLM log-prob - hf log-prob| accepted per token (float32 on both sides)
LOGPROB_TOL = 2e-3


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA GPU visible; this check needs one", file=sys.stderr)
        return 2
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        print(f"error: vLLM is not installed ({exc}); pip install -e '.[vllm]'", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="teamplay-gpucheck-"))
    model_dir = tiny_model(work / "tiny")
    results = [check_vllm_vs_hf(model_dir), check_distributed_step(model_dir, work)]
    ok = all(results)
    print("ALL PASS" if ok else "SOME CHECKS FAILED")
    return 0 if ok else 1


def tiny_model(folder: Path) -> Path:
    """A random Llama (2 layers, hidden 256, head dim 64: sizes vLLM's kernels accept), byte tokenizer."""
    import torch

    from tests.tiny import tiny_model_and_tokenizer

    model, tokenizer = tiny_model_and_tokenizer(seed=0, hidden=256, vocab=512)
    with torch.no_grad():
        model.lm_head.weight.mul_(20.0)  # peaked distributions: greedy ties are unlikely
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def team_with_adapters(model_dir: Path):
    """proposer/reviewer team model (r=8) whose LoRA B matrices are seeded noise, so each adapter
    changes the outputs (B = 0 at init would make every adapter the base)."""
    import torch

    from teamplay.agents.roles import Role, Team
    from teamplay.config import LoraConfig, ModelConfig
    from teamplay.training.wiring.model import build_team_model

    team = Team(roles=(Role(name="proposer"), Role(name="reviewer")))
    cfg = ModelConfig(name=str(model_dir), lora=LoraConfig(r=8, alpha=16))
    tm = build_team_model(cfg, team, seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name in tm.adapter_names:
            for n, p in tm.model.named_parameters():
                if ".lora_B." in n and f".{name}." in n:
                    p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return team, tm


def requests_for(adapters):
    from teamplay.records import ChatMessage, TurnRequest

    prompts = [f"Problem {i}: what is {i} + {2 * i}?" for i in range(8)]
    return [TurnRequest(agent=f"{a}_0", role=a, stage="solve", round=0, adapter=a,
                        chat=(ChatMessage("system", "You are a careful solver."), ChatMessage("user", p)))
            for a in adapters for p in prompts]


def check_vllm_vs_hf(model_dir: Path) -> bool:
    import torch

    from teamplay.agents.backends.hf import HFBackend
    from teamplay.agents.backends.vllm import VLLMBackend
    from teamplay.records import SamplingParams

    _, tm = team_with_adapters(model_dir)
    tm.model.to("cuda")
    requests = requests_for(tm.adapter_names)
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    t0 = time.perf_counter()
    hf = HFBackend(tm, max_prompt_tokens=512).generate(requests, greedy)
    engine = VLLMBackend(tm, max_prompt_tokens=512, model_path=str(model_dir), gpu_memory_utilization=0.3,
                         enforce_eager=True)
    vl = engine.generate(requests, greedy)
    same = [a.completion_ids == b.completion_ids for a, b in zip(hf, vl, strict=True)]
    by_adapter = {a: sum(s for s, r in zip(same, requests, strict=True) if r.adapter == a) for a in tm.adapter_names}
    n_each = len(requests) // len(tm.adapter_names)
    tokens_ok = all(same)
    print(f"{'PASS' if tokens_ok else 'FAIL'} vllm greedy == hf greedy: identical sequences per adapter "
          + ", ".join(f"{a} {k}/{n_each}" for a, k in by_adapter.items()))
    # log-probs of vLLM's own tokens, recomputed by the hf scorer under the same adapter (T=1)
    worst = 0.0
    for adapter in tm.adapter_names:
        idx = [i for i, r in enumerate(requests) if r.adapter == adapter]
        logp, mask = tm.completion_logprobs([list(vl[i].prompt_ids) for i in idx],
                                            [list(vl[i].completion_ids) for i in idx], adapter=adapter)
        for row, i in enumerate(idx):
            n = len(vl[i].completion_ids)
            diff = (logp[row, :n].float().cpu() - torch.tensor(vl[i].logprobs)).abs().max()
            worst = max(worst, float(diff))
    lp_ok = worst <= LOGPROB_TOL
    print(f"{'PASS' if lp_ok else 'FAIL'} vllm log-probs vs hf: max |diff| {worst:.2e} (tolerance {LOGPROB_TOL:g}); "
          f"{time.perf_counter() - t0:.0f} s")
    close = getattr(engine, "close", None)
    if close is not None:
        close()
    del engine
    return tokens_ok and lp_ok


def check_distributed_step(model_dir: Path, work: Path) -> bool:
    from teamplay.config import TrainConfig, build_config
    from teamplay.distributed.compose import make_trainer
    from tests.training.fixtures import FirstTokenTask

    cfg = build_config(TrainConfig, {
        "steps": 1, "protocol": {"name": "proposer_reviewer", "options": {"rounds": 2}},
        "model": {"name": str(model_dir), "lora": {"r": 8, "alpha": 16}},
        "rollout": {"problems_per_step": 4, "group_size": 4},
        "sampling": {"max_new_tokens": 4, "temperature": 1.0}, "optim": {"lr": 0.01, "minibatch_size": 16},
        "output_dir": str(work / "run"), "tensorboard": False, "checkpoint_every": 1,
        "distributed": {"address": "local", "rollout_workers": 2, "learner_workers": 1,
                        "resources": {"rollout": {"num_cpus": 1, "num_gpus": 0.3},
                                      "learner": {"num_cpus": 1, "num_gpus": 0.3}}}})
    task = FirstTokenTask("".join(chr(c) for c in range(32, 127)))
    t0 = time.perf_counter()
    [metrics] = make_trainer(cfg, task=task, items=task.load("train", limit=8)).train().history
    ok = metrics["rollout_episodes"] == 16 and (work / "run" / "checkpoints" / "step-000001").is_dir()
    print(f"{'PASS' if ok else 'FAIL'} distributed step, 2 rollout workers on the GPU + NCCL learner: "
          f"{metrics['rollout_episodes']} episodes, {metrics['optimizer_steps']} optimiser steps, "
          f"adapter sync {metrics.get('adapter_sync_bytes', 0)} bytes; {time.perf_counter() - t0:.0f} s")
    return ok


if __name__ == "__main__":
    sys.exit(main())
