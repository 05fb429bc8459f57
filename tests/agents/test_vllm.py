"""The vllm backend: a clear error without vLLM; multi-LoRA generation where vLLM and a GPU exist."""

import importlib.util
import sys

import pytest
import torch

from teamplay.agents.team_model import TeamModel
from teamplay.errors import ModelLoadError
from teamplay.records import ChatMessage, SamplingParams, TurnRequest
from tests.tiny import save_tiny


def test_without_vllm_construction_names_the_install_command(monkeypatch, tmp_path):
    from teamplay.agents.backends import get_backend

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ModelLoadError, match="pip install"):
        get_backend("vllm", team_model=None)


@pytest.mark.vllm
@pytest.mark.slow
def test_multi_lora_generation_and_adapter_reload(tmp_path):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (pip install vllm, on a machine with a CUDA GPU)")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    from teamplay.agents.backends.vllm import VLLMBackend
    from teamplay.agents.models import load_model

    # head_dim 64 (hidden 256, 4 heads): vLLM's attention kernels do not take the default tiny 8
    folder = save_tiny(tmp_path / "tiny", hidden=256)
    model, tokenizer = load_model(str(folder))
    team_model = TeamModel(model, tokenizer, ("proposer", "reviewer"), r=8)
    backend = VLLMBackend(team_model, max_prompt_tokens=256, adapter_dir=tmp_path / "adapters",
                          gpu_memory_utilization=0.3, max_model_len=512, enforce_eager=True)
    chat = (ChatMessage("system", "s"), ChatMessage("user", "2+2?"), ChatMessage("user", "Go"))
    request = TurnRequest(agent="proposer_0", role="proposer", stage="propose", round=0, adapter="proposer",
                          chat=chat)
    greedy = SamplingParams(max_new_tokens=8)
    before = backend.generate([request, request], greedy)
    assert before[0].completion_ids == before[1].completion_ids
    assert len(before[0].logprobs) == len(before[0].completion_ids) > 0
    # recorded log-probs agree with the trainer's recomputation (greedy: T=1 distribution)
    with torch.no_grad():
        logp, _ = team_model.completion_logprobs([before[0].prompt_ids], [before[0].completion_ids],
                                                 "proposer")
    torch.testing.assert_close(logp[0].cpu(), torch.tensor(before[0].logprobs), atol=2e-3, rtol=0)
    with torch.no_grad():
        for p in team_model.adapter_parameters("proposer"):
            p.copy_(torch.randn_like(p))
    backend.sync_adapters()
    after = backend.generate([request], greedy)[0]
    assert after.completion_ids != before[0].completion_ids
    backend.close()
