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
