"""Batched greedy decoding with llama.cpp (``llama-cpp-python``'s bindings of ``llama.h``), the
anchor of ``benchmarks.anchors``: every prompt is one sequence of a single batch, so one
``llama_decode`` call advances all of them by one token, as teamplay's lock-step backend does.

The high-level ``Llama`` class decodes one sequence at a time; the batch API below is the one
llama.cpp's own ``batched`` example uses. Greedy: the arg-max of each sequence's logits, read as
one [n_seq, vocab] array per step (the same work for every engine of the table: prompts decoded to a
fixed number of tokens).
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Any


def _first(module: Any, *names: str) -> Any:
    """The first of ``names`` the bindings define (llama.cpp renamed several functions)."""
    for name in names:
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"llama_cpp has none of {names}")


def batched_greedy(gguf: Path, prompts: list[list[int]], new_tokens: int, threads: int,
                   lora: Path | None = None, lora_scale: float = 1.0) -> dict[str, Any]:
    """Seconds (prefill and decode, model load excluded) and tokens of decoding each of ``prompts``
    (token ids) to ``new_tokens`` greedy tokens as one batch of sequences, on ``threads`` threads;
    ``lora``: a GGUF LoRA adapter applied at ``lora_scale``."""
    import llama_cpp
    import numpy as np

    n_seq = len(prompts)
    _quiet(llama_cpp)
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    model = _first(llama_cpp, "llama_model_load_from_file", "llama_load_model_from_file")(str(gguf).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {gguf}")
    cparams = llama_cpp.llama_context_default_params()
    # each distinct prompt is prefilled once, its cells shared by every sequence that starts with it
    # (a token of the batch may belong to several sequences), as teamplay's backend runs a group's
    # prompt once; the sequences then decode in one batch over the shared cache
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    owners = {p: [s for s, q in enumerate(prompts) if tuple(q) == p] for p in distinct}
    prefill_tokens = sum(len(p) for p in distinct)
    cparams.kv_unified = True  # one cache whose cells several sequences own (a stream each could not share)
    cparams.n_ctx = -(-(prefill_tokens + n_seq * new_tokens + 64) // 256) * 256
    cparams.n_batch = max(prefill_tokens, n_seq)
    cparams.n_ubatch = min(512, cparams.n_batch)
    cparams.n_seq_max = n_seq
    cparams.n_threads = cparams.n_threads_batch = threads
    ctx = _first(llama_cpp, "llama_init_from_model", "llama_new_context_with_model")(model, cparams)
    if not ctx:
        raise RuntimeError("llama.cpp could not make a context")
    adapter = None
    if lora is not None:
        adapter = llama_cpp.llama_adapter_lora_init(model, str(lora).encode())
        if not adapter:
            raise RuntimeError(f"llama.cpp could not load the adapter {lora}")
        llama_cpp.llama_set_adapter_lora(ctx, adapter, lora_scale)
    vocab = llama_cpp.llama_model_get_vocab(model) if hasattr(llama_cpp, "llama_model_get_vocab") else model
    n_vocab = _first(llama_cpp, "llama_vocab_n_tokens", "llama_n_vocab")(vocab)
    batch = llama_cpp.llama_batch_init(max(prefill_tokens, n_seq), 0, n_seq)
    try:
        start = time.perf_counter()
        # prefill: every distinct prompt's tokens once, owned by its sequences; its last asks for logits
        n = 0
        last = [0] * n_seq
        for ids in distinct:
            for pos, token in enumerate(ids):
                _put(batch, n, token, pos, owners[ids], pos == len(ids) - 1)
                n += 1
            for s in owners[ids]:
                last[s] = n - 1
        batch.n_tokens = n
        _decode(llama_cpp, ctx, batch)
        prefill = time.perf_counter() - start
        positions = [len(p) for p in prompts]
        rows = last
        made = 0
        for step in range(new_tokens):
            logits = np.stack([np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, i), shape=(n_vocab,))
                               for i in rows])  # [n_seq, vocab]
            tokens = logits.argmax(axis=1)
            made += n_seq
            if step == new_tokens - 1:  # the last token needs no forward pass of its own
                break
            for s in range(n_seq):
                _put(batch, s, int(tokens[s]), positions[s], [s], True)
                positions[s] += 1
            batch.n_tokens = n_seq
            rows = list(range(n_seq))
            _decode(llama_cpp, ctx, batch)
        seconds = time.perf_counter() - start
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
        _first(llama_cpp, "llama_model_free", "llama_free_model")(model)
    info = llama_cpp.llama_print_system_info()
    return {"seconds": seconds, "prefill_seconds": prefill, "prefill_tokens": prefill_tokens, "tokens": made,
            "sequences": n_seq,
            "threads": threads, "lora": lora is not None, "llama_cpp_python": llama_cpp.__version__,
            "system_info": info.decode() if isinstance(info, bytes) else str(info)}


#: the embedded model's linear layers as llama.cpp names them: (GGUF tensor, in features, out features)
SMOLLM2_LINEARS = (("attn_q", 576, 576), ("attn_k", 576, 192), ("attn_v", 576, 192), ("attn_output", 576, 576),
                   ("ffn_gate", 576, 1536), ("ffn_up", 576, 1536), ("ffn_down", 1536, 576))
SMOLLM2_LAYERS = 30


def write_random_lora(path: Path, r: int = 8, alpha: float = 16.0, seed: int = 0) -> Path:
    """A GGUF LoRA adapter of the demo's shapes (rank ``r`` on every linear layer of the embedded
    model) with random values, for timing only: how fast llama.cpp applies an adapter does not depend
    on its values. Tensors ``blk.N.<name>.weight.lora_a`` [r, in] and ``.lora_b`` [out, r] in float32,
    the keys llama.cpp's adapter loader reads (``general.type`` adapter, ``adapter.type`` lora,
    ``adapter.lora.alpha``)."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
    for layer in range(SMOLLM2_LAYERS):
        for name, d_in, d_out in SMOLLM2_LINEARS:
            base = f"blk.{layer}.{name}.weight"
            writer.add_tensor(f"{base}.lora_a", (rng.standard_normal((r, d_in)) * 0.02).astype(np.float32))
            writer.add_tensor(f"{base}.lora_b", (rng.standard_normal((d_out, r)) * 0.02).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


_SILENT: list[Any] = []  # the log callback, kept alive while llama.cpp may call it


def _quiet(llama_cpp: Any) -> None:
    """llama.cpp's own log lines (model loading, every context) off: the benchmark prints its table."""
    if not _SILENT:
        _SILENT.append(llama_cpp.llama_log_callback(lambda level, text, data: None))
        llama_cpp.llama_log_set(_SILENT[0], ctypes.c_void_p(0))


def _put(batch: Any, i: int, token: int, pos: int, seqs: list[int], logits: bool) -> None:
    """Slot ``i`` of ``batch``: ``token`` at ``pos`` of the sequences ``seqs`` (one cell they share),
    its logits kept or not."""
    batch.token[i] = token
    batch.pos[i] = pos
    batch.n_seq_id[i] = len(seqs)
    for k, seq in enumerate(seqs):
        batch.seq_id[i][k] = seq
    batch.logits[i] = ctypes.c_int8(1 if logits else 0).value


def _decode(llama_cpp: Any, ctx: Any, batch: Any) -> None:
    code = llama_cpp.llama_decode(ctx, batch)
    if code != 0:
        raise RuntimeError(f"llama_decode returned {code}")
