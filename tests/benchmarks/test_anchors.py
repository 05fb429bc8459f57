"""The anchors benchmark's pieces that need no timing: its table from stored numbers, and the LoRA
adapter it hands llama.cpp (the shapes and keys llama.cpp's adapter loader checks)."""

from __future__ import annotations

import gguf
import numpy as np

from benchmarks.anchors import BODY_FLOP_PER_TOKEN, FLOP_PER_TOKEN, result_of
from benchmarks.llama_cpp_decode import SMOLLM2_LAYERS, SMOLLM2_LINEARS, write_random_lora


def numbers(llama) -> dict:
    kernels = {
        name: {"batch": 32, "threads": 2,
               "matmul_gflops": {"square 1024": 150.0, "decode, batch 32": 90.0, "update, 3,200 tokens": 140.0},
               "generation": {"teamplay backend": {"seconds": 10.0, "tokens": 1536},
                              "raw generate, peft": {"seconds": 20.0, "tokens": 1536},
                              "raw generate, plain": {"seconds": 16.0, "tokens": 1536}},
               "update": {"seconds": 40.0, "samples": 40, "tokens": 4000, "completion_tokens": 1000,
                          "nominal_gflop": 3 * FLOP_PER_TOKEN * 4000 / 1e9}}
        for name in ("native", "avx2")}
    return {"machine": {}, "new_tokens": 48, "flop_per_token": FLOP_PER_TOKEN, "kernels": kernels, "llama_cpp": llama,
            "prompt_tokens": 3200, "distinct_prompt_tokens": 800}


def test_the_table_reads_tokens_per_second_and_the_ratio_to_llama_cpp():
    run = {"seconds": 5.0, "tokens": 1536, "sequences": 32, "prefill_tokens": 800, "llama_cpp_python": "0.3.36",
           "system_info": "AVX2 = 1"}
    result = result_of(numbers({"base": run, "lora": {**run, "seconds": 6.0}}))
    # 1536 tokens in 10 s is 154 tokens/s; llama.cpp with its adapter: 1536 in 6 s = 256, so 0.60x
    assert "| teamplay backend | native | batch 32 | 154 tokens/s |" in result.table
    assert "| llama.cpp + LoRA adapter | its build | 32 sequences | 256 tokens/s |" in result.table
    assert "154 tokens/s at batch 32" in result.headline and "256 (0.60x" in result.headline
    # a generator's work: 3,200 prompt tokens through the body and 1,536 decoded tokens through body and head
    work = 3200 * BODY_FLOP_PER_TOKEN + 1536 * FLOP_PER_TOKEN
    assert f"| raw generate, plain | avx2 | batch 32 | 96 tokens/s | {work / 16.0 / 1e9:.1f} | 90 |" in result.table
    # the backend prefills each distinct prompt once (800 tokens); llama.cpp says what it prefilled
    once = 800 * BODY_FLOP_PER_TOKEN + 1536 * FLOP_PER_TOKEN
    assert f"| teamplay backend | native | batch 32 | 154 tokens/s | {once / 10.0 / 1e9:.1f} | 90 |" in result.table
    # the update's nominal rate: 3 x forward FLOP over its tokens per second
    nominal = 3 * FLOP_PER_TOKEN * 4000 / 1e9 / 40.0
    assert f"| update of one demo step | avx2 | 40 samples, 4000 tokens | 40.0 s | {nominal:.1f} (nominal) |" in \
        result.table


def test_without_llama_cpp_the_table_says_why():
    result = result_of(numbers("llama-cpp-python is not installed"))
    assert "llama.cpp" not in result.table and result.headline == "llama.cpp not measured"
    assert any("not installed" in note for note in result.notes)


def test_the_adapter_has_the_shapes_and_keys_llama_cpp_loads(tmp_path):
    path = write_random_lora(tmp_path / "lora.gguf", r=8, alpha=16.0)
    reader = gguf.GGUFReader(str(path))
    fields = {name: reader.fields[name] for name in ("general.type", "adapter.type", "adapter.lora.alpha")}
    assert bytes(fields["general.type"].parts[-1]).decode() == "adapter"
    assert bytes(fields["adapter.type"].parts[-1]).decode() == "lora"
    assert float(fields["adapter.lora.alpha"].parts[-1][0]) == 16.0  # exact: 16 is a float32 exactly
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 2 * len(SMOLLM2_LINEARS) * SMOLLM2_LAYERS
    for name, d_in, d_out in SMOLLM2_LINEARS:
        # ggml order: lora_a is [in, r] and lora_b [r, out], as llama.cpp checks against the base tensor
        a, b = tensors[f"blk.29.{name}.weight.lora_a"], tensors[f"blk.29.{name}.weight.lora_b"]
        assert list(a.shape) == [d_in, 8] and list(b.shape) == [8, d_out]
        assert a.data.dtype == np.float32 and np.isfinite(a.data).all()
