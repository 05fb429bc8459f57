"""One base model, one LoRA adapter per adapter name: the policies of a whole team in memory once.

``TeamModel`` wraps a causal LM with peft. Each adapter (``Role.adapter_name``; roles may share one)
is a LoRA adapter of the same shape on the same frozen base weights. The reference policy of the KL
term is the base model itself (``disabled_adapters()``), so no second model is kept in memory.

Trainability: the base weights never train; an adapter trains unless it was declared frozen.
peft's own ``set_adapter`` makes the active adapter the only trainable one; ``TeamModel`` restores
its own rule after every switch, so a trainer may build the losses of several adapters in one step
and call one optimizer on ``trainable_parameters()``.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict, set_peft_model_state_dict
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from teamplay.agents.head_logprobs import head_logprobs, logits_logprobs
from teamplay.agents.lora_product import fuse_lora_layers
from teamplay.agents.roles import Team
from teamplay.atomic import staged_folder
from teamplay.errors import ConfigError, ModelLoadError

#: file names of the standard PEFT adapter format
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: file listing the adapters of a ``save_adapters`` folder and which are frozen
MANIFEST = "team_adapters.json"
#: architectures whose causal-LM logits are the output head applied to the body's last hidden state and
#: nothing else (no logit scaling or soft-capping), so scoring may run the head on chosen positions only
HEAD_ONLY_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "phi3", "olmo2", "smollm3"})


@dataclass(frozen=True)
class LoraSettings:
    """LoRA hyper-parameters shared by every adapter of a team.

    Fields:
        r: rank of the update ``B @ A``.
        alpha: scaling numerator; the update is scaled by ``alpha / r``.
        dropout: dropout on the adapter input (0 keeps the log-probs deterministic).
        target_modules: module names to adapt, or ``"all-linear"`` (every linear layer except the
            output head; right for llama-like models and most others).
        fused: compute each plain LoRA layer as one product in the base's precision
            (``agents.lora_product``); False keeps peft's own forward everywhere.
    """

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str | tuple[str, ...] = "all-linear"
    fused: bool = True

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ConfigError(f"lora.r must be >= 1, got {self.r}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"lora.dropout must be in [0, 1), got {self.dropout}")

    def peft_config(self) -> LoraConfig:
        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=targets, bias="none", task_type="CAUSAL_LM")


class TeamModel:
    """A base model with named LoRA adapters; the policies of a team.

    Args:
        model: the base causal LM (modified in place: LoRA layers are injected).
        tokenizer: its tokenizer (chat template, pad token, left padding: see ``load_model``).
        adapters: adapter names, unique; may be empty (then only the base model generates).
        r, alpha, dropout, target_modules, fused: LoRA settings of every adapter (see ``LoraSettings``).
        frozen: adapters that never train (their weights still load and generate).
        init_seed: seed of the LoRA initialisation (A matrices are random, B start at zero): the
            same seed gives the same adapters in every process, which exact resume and
            reproducible runs need. The global torch RNG is left untouched.
    """

    #: score chosen tokens through ``head_logprobs`` (one [N, V] buffer, values equal up to float32
    #: rounding) where the head runs apart; False: the head's logits, then ``log_softmax`` and a gather
    fused_head: bool = True

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 adapters: Sequence[str], *, r: int = 16, alpha: int = 32, dropout: float = 0.0,
                 target_modules: str | Sequence[str] = "all-linear", frozen: Iterable[str] = (),
                 init_seed: int = 0, fused: bool = True) -> None:
        names = tuple(adapters)
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(f"adapter names must be unique, repeated: {dupes}")
        frozen = frozenset(frozen)
        if frozen - set(names):
            raise ConfigError(f"frozen adapters {sorted(frozen - set(names))} are not among the adapters "
                              f"{list(names)}")
        self.tokenizer = tokenizer
        self.lora = LoraSettings(r=r, alpha=alpha, dropout=dropout, target_modules=(
            target_modules if isinstance(target_modules, str) else tuple(target_modules)), fused=fused)
        self.frozen = frozen
        self._names = names
        self.base_model = model
        for p in model.parameters():
            p.requires_grad_(False)
        if names:
            config = self.lora.peft_config()
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(init_seed)
                self.model: torch.nn.Module = get_peft_model(model, config, adapter_name=names[0])
                for name in names[1:]:
                    self.model.add_adapter(name, self.lora.peft_config())
            if fused:
                fuse_lora_layers(self.model)
            self._active: str | None = names[0]
            self._apply_trainability()
        else:
            self.model = model
            self._active = None

    @classmethod
    def from_team(cls, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, team: Team,
                  **lora: Any) -> TeamModel:
        """One adapter per ``team.adapter_names()``; an adapter is frozen when its roles do not train.
        ``lora`` holds the LoRA keyword arguments of the constructor (r, alpha, dropout, target_modules,
        fused).

        Raises ConfigError when roles sharing an adapter disagree on ``trainable``.
        """
        frozen = []
        for adapter in team.adapter_names():
            flags = {r.name: r.trainable for r in team.roles if r.adapter_name == adapter and not r.scripted}
            if len(set(flags.values())) > 1:
                raise ConfigError(f"team.roles: roles {sorted(flags)} share adapter {adapter!r} but disagree "
                                  f"on trainable ({flags}); give them separate adapters or the same flag")
            if not any(flags.values()):
                frozen.append(adapter)
        return cls(model, tokenizer, team.adapter_names(), frozen=frozen, **lora)

    # ------------------------------------------------------------------ adapters
    @property
    def adapter_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def device(self) -> torch.device:
        return next(self.base_model.parameters()).device

    def set_adapter(self, name: str | None) -> None:
        """Make ``name`` the adapter that forward passes use (``None``: keep the current one; use
        ``disabled_adapters()`` for the base model)."""
        if name is None or name == self._active:
            return
        self._check(name)
        self.model.set_adapter(name)
        self._active = name
        self._apply_trainability()

    @contextmanager
    def disabled_adapters(self) -> Iterator[None]:
        """Forward passes inside run the base model: the reference policy of the KL term."""
        if not self._names:
            yield
            return
        with self.model.disable_adapter():
            yield

    @contextmanager
    def using(self, adapter: str | None) -> Iterator[None]:
        """Forward passes inside use ``adapter``; ``None`` means the base model (adapters disabled)."""
        if adapter is None:
            with self.disabled_adapters():
                yield
        else:
            self.set_adapter(adapter)
            yield

    def adapter_parameters(self, name: str) -> list[torch.nn.Parameter]:
        """The LoRA parameters of adapter ``name`` (in module order)."""
        self._check(name)
        return [p for n, p in self.model.named_parameters() if _adapter_of(n) == name]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Parameters of every adapter that is not frozen: what one optimizer should update."""
        return [p for name in self._names if name not in self.frozen for p in self.adapter_parameters(name)]

    def _apply_trainability(self) -> None:
        for n, p in self.model.named_parameters():
            adapter = _adapter_of(n)
            p.requires_grad_(adapter is not None and adapter not in self.frozen)

    def _check(self, name: str) -> None:
        if name not in self._names:
            raise ConfigError(f"unknown adapter {name!r}; this team model has {list(self._names)}")

    # ------------------------------------------------------------------ log-probs
    def completion_logprobs(self, prompt_ids: Sequence[Sequence[int]],
                            completion_ids: Sequence[Sequence[int]], adapter: str | None,
                            temperature: float = 1.0, return_distributions: bool = False,
                            share_prompts: bool = False):
        """Log-probs of each completion token given its prompt, under ``adapter`` (``None``: base model).

        Each row is ``prompt + completion``, left-padded to the longest row, with position ids
        counted from the first real token (as ``generate`` does with left padding), so padding does
        not change the values. Only the real completion tokens' positions go through the output head
        (all ``C`` positions of every row with ``return_distributions``).

        Args:
            prompt_ids: B prompts, each of at least one token.
            completion_ids: B completions (may be empty).
            adapter: adapter to score with; ``None`` scores with adapters disabled (reference policy).
            temperature: logits are divided by it before the softmax (> 0); use the sampling
                temperature to get the behaviour policy's log-probs.

        Returns:
            ``(logp, mask)``, both [B, C] with C the longest completion; completion tokens are
            left-aligned (row b, column j is token j of completion b); ``mask`` is 1.0 on real tokens
            and 0.0 on padding, where ``logp`` is 0. ``logp`` carries gradients to the active
            adapter when grad is enabled. With ``return_distributions=True``: ``(logp_all, targets,
            mask)`` instead, the full next-token log-distributions [B, C, V] (rows of padding hold
            values of no meaning) and the completion token ids [B, C] (for token statistics such as
            entropies; callers keep B small, the tensor is B*C*V floats).
            share_prompts: run each distinct prompt once and continue its key/value cache for every
                completion that follows it (a group's G samples of one question share it); the
                values equal the plain path's up to float summation order, and so do the gradients
                with grad enabled (they flow through the shared cache to every row that continues
                it). The update scores with it, and so do the reference pass and token statistics.
        """
        if len(prompt_ids) != len(completion_ids):
            raise ValueError(f"{len(prompt_ids)} prompts but {len(completion_ids)} completions")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 to score log-probs, got {temperature}")
        if any(len(p) == 0 for p in prompt_ids):
            raise ValueError("every prompt needs at least one token (the first completion token is "
                             "predicted from the last prompt token)")
        batch = len(prompt_ids)
        lengths = [len(c) for c in completion_ids]
        c_max = max(lengths, default=0)
        device = self.device
        if batch == 0 or c_max == 0:
            if return_distributions:
                raise ValueError("token distributions need at least one non-empty completion")
            empty = torch.zeros(batch, c_max, device=device)
            return empty, empty.clone()
        c_len = torch.tensor(lengths, device=device)  # [B]
        j = torch.arange(c_max, device=device)  # [C]
        mask = (j[None, :] < c_len[:, None])  # [B, C]
        targets = torch.zeros(batch, c_max, dtype=torch.long, device=device)  # [B, C]
        for b, c in enumerate(completion_ids):
            targets[b, : len(c)] = torch.tensor(list(c), dtype=torch.long, device=device)
        owner, unique = prompt_owners(prompt_ids)
        shared = common_prefix(unique) if share_prompts else 0
        with self.using(adapter):
            if share_prompts and (len(unique) < batch or shared > 0):
                states = self._shared_prompt_states(unique, shared, owner, targets, mask)  # [B, C, D]
            else:
                rows = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids, strict=True)]
                input_ids, attention = left_pad(rows, self.tokenizer.pad_token_id, device)  # [B, L]
                positions = (attention.cumsum(-1) - 1).clamp(min=0)  # [B, L]
                kept, _ = self._run(keep=c_max + 1, input_ids=input_ids, attention_mask=attention,
                                    position_ids=positions)  # [B, C+1, D]
                # Token j of completion b sits at L - C_b + j and is predicted at L - C_b + j - 1,
                # i.e. at column C - C_b + j of the kept positions.
                column = (c_max - c_len[:, None] + j[None, :]).clamp(max=c_max)  # [B, C]
                states = kept.gather(1, column[..., None].expand(-1, -1, kept.shape[-1]))  # [B, C, D]
            if return_distributions:
                logp_all = torch.log_softmax(self._logits(states).float() / temperature, dim=-1)  # [B, C, V]
                return logp_all, targets, mask.to(logp_all.dtype)
            # only the real completion tokens go through the output head and the softmax: padding
            # is most of [B, C] when a batch's completions differ in length
            logp_real = self._token_logprobs(states[mask], targets[mask], temperature)  # [N], N = real tokens
        logp = torch.zeros(batch, c_max, dtype=logp_real.dtype, device=device).index_put(
            torch.nonzero(mask, as_tuple=True), logp_real)  # [B, C], 0 on padding
        return logp, mask.to(logp.dtype)

    @functools.cached_property
    def _body_and_head(self) -> tuple[torch.nn.Module, torch.nn.Module] | None:
        """``(body, head)`` of the base model when its logits are exactly ``head(body(...)
        .last_hidden_state)`` (``HEAD_ONLY_TYPES``), so a caller can run the head on the positions it
        needs; ``None`` for other architectures (logit scaling or soft-capping after the head),
        which are scored through their own forward."""
        if getattr(self.base_model.config, "model_type", None) not in HEAD_ONLY_TYPES:
            return None
        body = self.base_model.get_decoder() if hasattr(self.base_model, "get_decoder") else None
        head = self.base_model.get_output_embeddings()
        if body is None or head is None or body is self.base_model:
            return None
        return body, head

    def _run(self, keep: int, **inputs: Any) -> tuple[torch.Tensor, Any]:
        """``(states [B, keep, D], cache)``: a forward pass of ``inputs`` through the active adapter,
        kept at the last ``keep`` positions; states are final hidden states (D = hidden size) where
        the head can run apart (``_body_and_head``), else logits (D = V). ``_logits`` maps them to
        logits."""
        split = self._scoring_split()
        if split is None:
            out = self.model(logits_to_keep=keep, **inputs)
            return out.logits, getattr(out, self.cache_keyword, None)
        out = split[0](**inputs)
        return out.last_hidden_state[:, -keep:], getattr(out, self.cache_keyword, None)

    def _logits(self, states: torch.Tensor) -> torch.Tensor:
        """Logits [..., V] of ``_run``'s states [..., D]."""
        split = self._scoring_split()
        return states if split is None else split[1](states)

    def _token_logprobs(self, states: torch.Tensor, targets: torch.Tensor, temperature: float) -> torch.Tensor:
        """Float32 log-probs [N] of ``targets`` [N] from ``_run``'s states [N, D] at temperature
        ``temperature``; through ``head_logprobs`` (one [N, V] buffer) where the head runs apart."""
        split = self._scoring_split()
        if split is not None and self.fused_head:
            return head_logprobs(states, split[1], targets, temperature)
        return logits_logprobs(self._logits(states), targets, temperature)

    def _scoring_split(self) -> tuple[torch.nn.Module, torch.nn.Module] | None:
        """``_body_and_head``, unless FSDP2 shards the model (``distributed.sharding``): its root
        module gathers the embedding and the head before its own forward only, so scoring must call
        the whole model."""
        split = self._body_and_head
        if split is None:
            return None
        return None if any(_fsdp_sharded(m) for m in (self.model, _peft_root(self.model))) else split

    @functools.cached_property
    def cache_keyword(self) -> str:
        """The key/value cache's keyword and output field: ``cache`` in transformers 5,
        ``past_key_values`` in 4.x."""
        return "cache" if "cache" in inspect.signature(self.base_model.forward).parameters else "past_key_values"

    def _shared_prompt_states(self, unique: Sequence[tuple[int, ...]], shared: int, owner: torch.Tensor,
                              targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``_run``'s states [B, C, D] at every completion position (``_logits`` maps them to the
        next-token logits), each of the U ``unique`` prompts run once: its last position predicts
        token 0, its key/value cache (copied to the B rows that ``owner`` [B] maps to it) carries
        tokens 0..C-2 (right-padded, ``mask`` [B, C]) to predict 1..C-1.

        The prompts' common prefix of ``shared`` tokens (``common_prefix``: a team's system prompt
        and instructions, often most of a prompt) runs once for all U: its cache is copied to the U
        rows, which continue with their own remainders, left-padded after the prefix (padding in the
        middle is masked out, positions count real tokens only)."""
        device = targets.device
        owner = owner.to(device)
        prefix_kwargs = self.prefix_cache(unique[0][:shared], len(unique)) if shared else {}
        r_ids, p_mask = pad_after_prefix(unique, shared, self.tokenizer.pad_token_id, device)  # [U, R], [U, K+R]
        positions = (p_mask.cumsum(-1) - 1).clamp(min=0)[:, shared:]  # [U, R]
        last, cache = self._run(keep=1, input_ids=r_ids, attention_mask=p_mask, position_ids=positions,
                                use_cache=True, **prefix_kwargs)
        first = last[:, -1][owner]  # [B, D]: predicts completion token 0
        c_max = targets.shape[1]
        if c_max == 1:
            return first[:, None]
        cache.reorder_cache(owner)  # [U, ...] -> [B, ...]: row b continues its prompt
        fed = targets[:, :-1]  # [B, C-1] tokens 0..C-2 (padding past each completion's end)
        fed_mask = mask[:, :-1].long()  # [B, C-1]
        attention = torch.cat([p_mask[owner], fed_mask], dim=1)  # [B, P + C-1]
        positions = p_mask[owner].sum(-1, keepdim=True) + torch.arange(c_max - 1, device=device)[None, :]  # [B, C-1]
        rest, _ = self._run(keep=c_max - 1, input_ids=fed, attention_mask=attention, position_ids=positions,
                            **{self.cache_keyword: cache})  # [B, C-1, D]
        return torch.cat([first[:, None], rest], dim=1)

    def prefix_cache(self, prefix: Sequence[int], rows: int, model: torch.nn.Module | None = None,
                     cache: Any = None) -> dict[str, Any]:
        """``{cache keyword: cache}``: the key/value cache of ``prefix`` (K tokens), run once with the
        active adapter and copied to ``rows`` rows ([1, ...] -> [rows, ...]), for a forward pass or
        ``generate`` that continues every row from it (``pad_after_prefix`` builds its inputs).
        ``model``: run it instead of the team's (a merged copy of the same base, ``agents.merged``);
        ``cache``: an empty cache object to fill (a ``GrowingCache``) instead of the model's default."""
        head = torch.tensor([list(prefix)], dtype=torch.long, device=self.device)  # [1, K]
        model = self.model if model is None else model
        given = {} if cache is None else {self.cache_keyword: cache}
        cache = getattr(model(input_ids=head, use_cache=True, logits_to_keep=1, **given), self.cache_keyword)
        cache.reorder_cache(torch.zeros(rows, dtype=torch.long, device=self.device))
        return {self.cache_keyword: cache}

    def reference_logprobs(self, prompt_ids: Sequence[Sequence[int]], completion_ids: Sequence[Sequence[int]],
                           adapter: str | None = None, temperature: float = 1.0,
                           return_distributions: bool = False, share_prompts: bool = True):
        """``completion_logprobs`` of the reference policy of ``adapter`` (the base model with
        adapters disabled), without gradients. ``adapter`` only names whose reference is meant: with
        one base every adapter has the same one (a multi-base team routes it to the adapter's base).
        ``share_prompts=False`` runs one forward pass whatever the prompts (sharded ranks must all
        run the same number)."""
        with torch.no_grad(), self.disabled_adapters():
            return self.completion_logprobs(prompt_ids, completion_ids, adapter=None, temperature=temperature,
                                            return_distributions=return_distributions, share_prompts=share_prompts)

    # ------------------------------------------------------------------ save / load
    def save_adapters(self, folder: str | Path) -> Path:
        """Write every adapter in the standard PEFT format, one subfolder each (``folder/<name>/``).

        Each subfolder holds ``adapter_config.json`` and ``adapter_model.safetensors`` and loads with
        ``PeftModel.from_pretrained(base, folder/<name>)``; ``team_adapters.json`` lists the names
        and the frozen ones. The folder is written next to its final place and renamed, so a reader
        (a vLLM reload, a resume) never sees a half-written set; an existing folder is replaced.
        """
        if not self._names:
            raise ConfigError("this team model has no adapters to save")
        folder = Path(folder)
        folder.parent.mkdir(parents=True, exist_ok=True)
        # no fsync here: the callers that keep the folder write it inside a checkpoint's staging folder,
        # whose replace_folder fsyncs the whole tree; the vLLM backend publishes a scratch copy every step
        with staged_folder(folder, sync=False) as tmp:
            for name in self._names:
                sub = tmp / name
                sub.mkdir()
                config = self.model.peft_config[name]
                config.save_pretrained(sub)
                state = get_peft_model_state_dict(self.model, adapter_name=name)
                save_file({k: v.detach().contiguous().cpu() for k, v in state.items()}, sub / ADAPTER_WEIGHTS)
            (tmp / MANIFEST).write_text(json.dumps(
                {"adapters": list(self._names), "frozen": sorted(self.frozen)}, indent=2))
        return folder

    def load_adapters(self, folder: str | Path) -> tuple[str, ...]:
        """Load every adapter subfolder of ``folder`` (as ``save_adapters`` writes them).

        An adapter this model already has is overwritten in place (the parameter objects stay the
        same, so an optimizer holding them keeps working); a new name is added (trainable). Returns
        the names loaded.

        Raises ModelLoadError when the folder holds no adapter, when a saved adapter's LoRA shape
        (r, alpha, target modules) differs from the existing one, or when keys do not match.
        """
        folder = Path(folder)
        subdirs = sorted(p for p in folder.iterdir() if (p / ADAPTER_CONFIG).is_file()) if folder.is_dir() \
            else []
        if not subdirs:
            raise ModelLoadError(f"no adapters in {str(folder)!r}: expected subfolders with {ADAPTER_CONFIG} "
                                 "(written by TeamModel.save_adapters)")
        if not self._names:
            raise ModelLoadError("this team model was built without adapters; build it with the adapter "
                                 f"names of {str(folder)!r} first")
        loaded = []
        for sub in subdirs:
            name = sub.name
            saved = read_adapter_config(sub)
            if name in self._names:
                current = self.model.peft_config[name]
                for field in ("r", "lora_alpha", "target_modules"):
                    if getattr(saved, field) != getattr(current, field):
                        raise ModelLoadError(
                            f"adapter {str(sub)!r}: {field}={getattr(saved, field)!r} but this model's "
                            f"adapter {name!r} has {getattr(current, field)!r}")
                state = _read_adapter_weights(sub / ADAPTER_WEIGHTS, str(self.device))
                result = set_peft_model_state_dict(self.model, state, adapter_name=name)
                bad = [k for k in result.unexpected_keys]
                missing = [k for k in result.missing_keys if _adapter_of(k) == name]
                if bad or missing:
                    raise ModelLoadError(f"adapter {str(sub)!r} does not match the model: unexpected keys "
                                         f"{bad[:3]}, missing keys {missing[:3]}")
            else:
                assert isinstance(self.model, PeftModel)
                _read_adapter_weights(sub / ADAPTER_WEIGHTS, "cpu")  # a damaged file: one clear error
                self.model.load_adapter(str(sub), adapter_name=name, is_trainable=True)
                if self.lora.fused:  # a layer the new adapter adds gets the fused product too
                    fuse_lora_layers(self.model)
                self._names = self._names + (name,)
            loaded.append(name)
        if self._active is not None:
            self.model.set_adapter(self._active)
        self._apply_trainability()
        return tuple(loaded)


def read_adapter_config(folder: Path) -> LoraConfig:
    """``adapter_config.json`` of one adapter; ``ModelLoadError`` naming the file when it is damaged."""
    try:
        return LoraConfig.from_pretrained(folder)
    except (ValueError, TypeError, OSError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{folder / ADAPTER_CONFIG}: not a readable LoRA adapter config "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None


def _read_adapter_weights(path: Path, device: str) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file (a format that holds no code); ``ModelLoadError`` naming
    the file when it is missing or damaged."""
    try:
        return load_file(path, device=device)
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: not a readable safetensors file ({exc})") from None


def prompt_owners(prompt_ids: Sequence[Sequence[int]]) -> tuple[torch.Tensor, list[tuple[int, ...]]]:
    """``(owner [B], unique prompts)``: ``unique[owner[b]]`` is prompt b; first-seen order."""
    index: dict[tuple[int, ...], int] = {}
    owner = [index.setdefault(tuple(p), len(index)) for p in prompt_ids]
    return torch.tensor(owner, dtype=torch.long), list(index)


def common_prefix(unique: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix shared by every prompt of ``unique``, leaving each at least
    one token of its own (its last position predicts the completion's first token); 0 for one prompt."""
    if len(unique) < 2:
        return 0
    shortest = min(len(u) for u in unique)
    first = unique[0]
    for k in range(shortest - 1):
        if any(u[k] != first[k] for u in unique):
            return k
    return max(shortest - 1, 0)


def pad_after_prefix(rows: Sequence[Sequence[int]], shared: int, pad_id: int,
                     device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rest_ids [B, R], mask [B, K + R])`` for rows that share their first ``shared`` = K tokens:
    each row's remainder left-padded (padding between prefix and remainder, masked), and the mask
    over prefix and remainder, so positions from ``mask.cumsum`` count real tokens only."""
    rest, rest_mask = left_pad([r[shared:] for r in rows], pad_id, device)
    ones = torch.ones(len(rows), shared, dtype=rest_mask.dtype, device=device)
    return rest, torch.cat([ones, rest_mask], dim=1)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, attention_mask)``, both [B, L]: rows right-aligned, ``pad_id`` and 0 on the left."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        if row:
            ids[b, width - len(row):] = torch.tensor(list(row), dtype=torch.long)
            mask[b, width - len(row):] = 1
    return ids.to(device), mask.to(device)


def _fsdp_sharded(module: torch.nn.Module | None) -> bool:
    """Whether torch's FSDP2 ``fully_shard`` manages ``module``."""
    if module is None or not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)


def _peft_root(model: torch.nn.Module) -> torch.nn.Module | None:
    """peft's ``LoraModel`` inside a ``PeftModel`` (what ``shard_team_model`` shards), else ``None``."""
    return model.base_model if isinstance(model, PeftModel) else None


def _adapter_of(param_name: str) -> str | None:
    """Adapter name of a LoRA parameter (``...q_proj.lora_A.<adapter>.weight``), else ``None``."""
    parts = param_name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part.startswith("lora_"):
            return parts[i + 1]
    return None
