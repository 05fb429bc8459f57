"""Generation with transformers: batched, left-padded, one decoding loop per adapter and micro-batch.

``HFBackend.generate`` builds each request's prompt with the chat template under the token budget
(``teamplay.agents.prompts``), groups the requests by adapter (``None`` = base model, adapters
disabled), sorts each group by prompt length (less padding) and cuts it into micro-batches. Each
micro-batch is decoded by ``teamplay.agents.decode`` (teamplay's own loop: rows that finished leave
the batch) with an attention mask; position ids follow the mask, so a left-padded prompt gets the
same positions as the prompt alone (tested: batched greedy output equals one-at-a-time output and
``generate``'s).

Shared prompt prefix: the prompts of a micro-batch usually start alike (the role's system prompt,
the task's answer instruction, often most of a short prompt), and on a CPU the prompt's forward pass
is most of a turn's cost. When every prompt of the micro-batch shares at least ``MIN_SHARED_PREFIX``
leading tokens, that prefix runs once: its key/value cache is copied to every row, and decoding
continues from it with each row's own remainder, left-padded after the prefix (the padding in the
middle is masked; positions follow the mask, so each row sees the positions of its prompt alone).
Identical prompts in a micro-batch (a group's samples of one question) go further: each distinct
prompt runs once, and its cache and first scores are copied to its rows before the first token is
drawn (``decode``'s ``owner``). Outputs equal the unshared path's up to float rounding (tested).
``share_prompt_prefix=False`` turns both off.

Sampling and behaviour log-probs: temperature, then top-k, then top-p are applied
(``sampling_processors``, in ``generate``'s own order), then the token is drawn from that processed
distribution by inverse CDF (``decode.inverse_cdf_tokens``: one uniform and a cumulative sum per row,
where ``torch.multinomial`` draws an exponential variate for every vocabulary token at every step,
the larger cost on a CPU), and its log-prob under it is recorded: one number per row and step, never
the full-vocabulary scores of every step. Asked for (``SamplingParams.entropies``), the entropy of
that same distribution at each token is recorded as well (``Generation.entropies``): token-level
credit reads it instead of scoring the message again. Greedy decoding records the log-probs of the
T=1 model distribution (what ``TeamModel.completion_logprobs(..., temperature=1)`` recomputes).

Random streams: a sampled micro-batch draws from a generator seeded with the call's seed, its
adapter and its place (``_derive_seed``; unseeded calls use the global torch generator). A request
that carries ``TurnRequest.row_seed`` (a server batching seeded sampled requests) is drawn from a
generator of its own, seeded with it; a row without one in such a batch gets a generator seeded
from the call's seed and its place. So a seeded row's completion does not depend on its batch, up
to the float rounding of its logits (tested: a row alone and beside others sample the same tokens).
``sampler="multinomial"`` decodes as teamplay did before its own loop: ``model.generate`` with its
own ``torch.multinomial`` draws from the global generator, seeded with the same per-micro-batch seed
(and restored after), ``SampledLogprobs`` recording the log-probs and ``RowSampler`` drawing rows that
have their own seeds; same seed, same tokens as those runs.

Merged adapters (``merge_adapters=True``, the default): a micro-batch generates with a LoRA-free copy
of the base model into which its adapter is merged (``teamplay.agents.merged``), so decoding runs
the plain model's forward pass instead of peft's side path on every adapted layer; the merge is
redone only after the adapter changed. In float32 the tokens and log-probs equal peft's up to float
summation order (tested); a model whose adapters cannot be merged (DoRA, adapted embeddings)
generates through peft, and ``merged_generation`` says why.

A completion ends after the first stop token (the tokenizer's eos and the model's generation-config
eos ids), which it includes; nothing after it is returned.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np
import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from teamplay.agents import kv_cache
from teamplay.agents.backends.base import GenerationBackend
from teamplay.agents.decode import Streams, decode
from teamplay.agents.kv_cache import DynamicCache, GrowingCache
from teamplay.agents.merged import MergedAdapterModel, unsupported
from teamplay.agents.prompts import build_prompt_ids, build_reply_ids
from teamplay.agents.team_model import TeamModel, common_prefix, left_pad, pad_after_prefix, prompt_owners
from teamplay.errors import ConfigError
from teamplay.records import ChatMessage, Generation, SamplingParams, TurnRequest, derived_seed

#: words whose first token counts as "yes" / "no" in ``yes_probability``
YES_WORDS = ("yes", "Yes")
NO_WORDS = ("no", "No")
#: how a sampled token can be drawn (module docstring)
SAMPLERS = ("inverse_cdf", "multinomial")
#: fewest common leading tokens worth a separate prefix pass (the pass has a fixed cost per layer)
MIN_SHARED_PREFIX = 8


class HFBackend(GenerationBackend):
    """Generate with a ``TeamModel`` in this process.

    Args:
        team_model: base model + adapters; requests name adapters of it (or ``None``).
        max_prompt_tokens: prompt budget; longer chats are cut (``Generation.truncated``).
        micro_batch_size: most sequences in one forward / generate call (bounds memory).
        share_prompt_prefix: run a micro-batch's common prompt prefix once, and each of its distinct
            prompts once (module docstring).
        merge_adapters: generate with the adapter merged into a LoRA-free copy of the base model
            (module docstring); False generates through peft's LoRA layers.
        sampler: ``inverse_cdf`` (teamplay's decoding loop, ``teamplay.agents.decode``) or
            ``multinomial`` (``generate`` and its own ``torch.multinomial``, the draws of earlier
            teamplay versions: same seed, same tokens).

    Attributes:
        merged_generation: None when generation runs merged, else why it does not (a sentence).
    """

    name = "hf"
    row_seeds = True
    #: run each distinct prompt of a micro-batch once (with ``share_prompt_prefix``; module docstring);
    #: off only to measure what it saves, side by side (``benchmarks/rollout_gain.py``)
    dedupe_prompts = True
    #: decode under ``torch.inference_mode`` (no version counters or view tracking); off (``no_grad``
    #: only, as before 2026-12-05) only to measure what it saves (``benchmarks/rollout_gain.py``)
    inference_mode = True

    def __init__(self, team_model: TeamModel, max_prompt_tokens: int = 2048,
                 micro_batch_size: int = 16, share_prompt_prefix: bool = True,
                 merge_adapters: bool = True, sampler: str = "inverse_cdf") -> None:
        if max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens must be >= 1, got {max_prompt_tokens}")
        if micro_batch_size < 1:
            raise ConfigError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        if sampler not in SAMPLERS:
            raise ConfigError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
        self.sampler = sampler
        self.team_model = team_model
        self.tokenizer = team_model.tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.micro_batch_size = micro_batch_size
        self.share_prompt_prefix = share_prompt_prefix
        self.stop_ids = self._stop_ids()
        self.merge_adapters = merge_adapters
        self._merged: MergedAdapterModel | None = None
        self.merged_generation = unsupported(team_model) if merge_adapters else "merge_adapters is off"

    def for_model(self, team_model: TeamModel) -> HFBackend:
        """A backend with this one's settings over another team model (an asynchronous run's
        generation copy: ``teamplay.training.run.asynchronous.rollouts``). Same weights, same settings,
        same seeds: the same generations."""
        twin = HFBackend(team_model, self.max_prompt_tokens, self.micro_batch_size, self.share_prompt_prefix,
                         self.merge_adapters, self.sampler)
        twin.dedupe_prompts, twin.inference_mode = self.dedupe_prompts, self.inference_mode
        return twin

    def _generation_model(self, adapter: str | None) -> torch.nn.Module | None:
        """The plain model with ``adapter`` merged, or None to generate through peft (the copy is
        built on first use, so a backend that never generates never holds it)."""
        if self.merged_generation is not None:
            return None
        if self._merged is None:
            self._merged = MergedAdapterModel(self.team_model)
        return self._merged.use(adapter)

    def adapters(self) -> tuple[str, ...]:
        return self.team_model.adapter_names

    def _stop_ids(self) -> tuple[int, ...]:
        ids = []
        configured = self.team_model.base_model.generation_config.eos_token_id
        if configured is not None:
            ids.extend(configured if isinstance(configured, (list, tuple)) else [configured])
        if self.tokenizer.eos_token_id is not None:
            ids.append(self.tokenizer.eos_token_id)
        if not ids:
            raise ConfigError("the model has no eos token id: generation could never stop")
        return tuple(dict.fromkeys(int(i) for i in ids))

    # ------------------------------------------------------------------ generate
    def generate(self, requests: Sequence[TurnRequest], sampling: SamplingParams) -> list[Generation]:
        """One ``Generation`` per request, in request order (see the module docstring)."""
        for r in requests:
            if r.adapter is not None and r.adapter not in self.team_model.adapter_names:
                raise ConfigError(f"request of {r.agent} names adapter {r.adapter!r}; the model has "
                                  f"{list(self.team_model.adapter_names)}")
        self.stop_ids = self._stop_ids()  # the caller may have changed the generation config
        prompts = [build_reply_ids(self.tokenizer, r.chat, self.max_prompt_tokens, r.reply_prefix) for r in requests]
        results: list[Generation | None] = [None] * len(requests)
        groups: dict[str | None, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault(r.adapter, []).append(i)
        for adapter, members in groups.items():
            members = sorted(members, key=lambda i: len(prompts[i][0]))
            for start in range(0, len(members), self.micro_batch_size):
                chunk = members[start:start + self.micro_batch_size]
                seed = None if sampling.seed is None else _derive_seed(sampling.seed, adapter, start)
                row_seeds = None
                if not sampling.greedy and any(requests[i].row_seed is not None for i in chunk):
                    row_seeds = [requests[i].row_seed if requests[i].row_seed is not None
                                 else _derive_seed(seed or 0, adapter, start + k) for k, i in enumerate(chunk)]
                outs = self._generate_chunk([prompts[i][0] for i in chunk], adapter, sampling, seed, row_seeds)
                for i, (ids, logps, ents) in zip(chunk, outs, strict=True):
                    results[i] = Generation(
                        text=requests[i].reply_prefix + self.tokenizer.decode(ids, skip_special_tokens=True),
                        prompt_ids=tuple(prompts[i][0]), completion_ids=tuple(ids), logprobs=tuple(logps),
                        adapter=adapter, truncated=prompts[i][1], entropies=tuple(ents),
                        cut=len(ids) >= sampling.max_new_tokens and ids[-1] not in self.stop_ids)
        return [g for g in results if g is not None]

    def _generation_config(self, sampling: SamplingParams, draws: bool) -> GenerationConfig:
        # Built from scratch: a checkpoint's own generation_config (temperature 0.2, repetition
        # penalty, ...) must not change what SamplingParams asked for.
        # Temperature, top-k and top-p are left out here: ``sampling_processors`` applies them, so that
        # the log-prob recorder runs after them; ``draws``: generate draws the token itself, else
        # RowSampler has drawn it and generate runs greedy over what it left.
        common = dict(max_new_tokens=sampling.max_new_tokens, eos_token_id=list(self.stop_ids),
                      pad_token_id=self.tokenizer.pad_token_id, return_dict_in_generate=True)
        if not draws:
            return GenerationConfig(do_sample=False, **common)
        return GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, **common)

    @torch.no_grad()
    def _generate_chunk(self, prompts: list[list[int]], adapter: str | None, sampling: SamplingParams,
                        seed: int | None, row_seeds: Sequence[int] | None = None,
                        ) -> list[tuple[list[int], list[float], list[float]]]:
        """(completion ids up to and including the first stop token, their log-probs, entropies or [])
        per prompt of one micro-batch."""
        device = self.team_model.device
        shared = common_prefix(prompts) if self.share_prompt_prefix else 0
        if shared < MIN_SHARED_PREFIX:
            shared = 0
        tm = self.team_model
        merged = self._generation_model(adapter)
        with tm.using(adapter) if merged is None else contextlib.nullcontext():
            model = tm.model if merged is None else merged
            if self.sampler == "multinomial" and not sampling.greedy:
                # [B, K + R]: the shared prefix (K tokens, 0 when not shared), then each remainder left-padded
                rest, attention = pad_after_prefix(prompts, shared, self.tokenizer.pad_token_id, device)
                return self._generate_multinomial(model, prompts, shared, rest, attention, sampling, seed, row_seeds)
            # a group's samples of one question: each distinct prompt runs once (decode's ``owner``)
            owner, distinct = prompt_owners(prompts)
            dedupe = self.dedupe_prompts and self.share_prompt_prefix and len(distinct) < len(prompts)
            rows = [list(p) for p in distinct] if dedupe else prompts
            rest, attention = pad_after_prefix(rows, shared, self.tokenizer.pad_token_id, device)  # [U, K + R]
            # a cache that grows in place, with room for the completion (teamplay.agents.kv_cache)
            cache = GrowingCache(reserve=sampling.max_new_tokens) if kv_cache.SUPPORTED else DynamicCache()
            # inference mode (no version counters, no view tracking): every tensor made here (the
            # cache, the scores) lives and dies inside this call; the merged weights were made above
            with torch.inference_mode(self.inference_mode):
                if shared:
                    tm.prefix_cache(prompts[0][:shared], len(rows), model, cache=cache)
                out = decode(model, tm.cache_keyword, cache, rest, attention,
                             processors=sampling_processors(sampling),
                             streams=None if sampling.greedy else _streams(seed, row_seeds, device),
                             max_new_tokens=sampling.max_new_tokens, stop_ids=self.stop_ids,
                             pad_id=self.tokenizer.pad_token_id, entropies=sampling.entropies,
                             owner=owner if dedupe else None)
        ents = out.entropies or [[] for _ in prompts]
        return list(zip(out.ids, out.logprobs, ents, strict=True))

    def _generate_multinomial(self, model: torch.nn.Module, prompts: list[list[int]], shared: int,
                              rest: torch.Tensor, attention: torch.Tensor, sampling: SamplingParams,
                              seed: int | None, row_seeds: Sequence[int] | None,
                              ) -> list[tuple[list[int], list[float], list[float]]]:
        """``sampler: multinomial``: ``generate`` with its own draws (``_generate_chunk``'s results)."""
        device, tm = self.team_model.device, self.team_model
        head = torch.tensor([prompts[0][:shared]], dtype=torch.long, device=device)  # [1, K]
        input_ids = torch.cat([head.expand(len(prompts), -1), rest], dim=1)  # [B, K + R]
        recorder = SampledLogprobs(entropies=sampling.entropies)
        own = [] if row_seeds is None else [RowSampler(row_seeds, device)]
        processors = LogitsProcessorList([*sampling_processors(sampling), recorder, *own])
        config = self._generation_config(sampling, draws=not own)
        # generate's multinomial draws from the global generator: seeded here, and restored after
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            if seed is not None:
                torch.manual_seed(seed)
            prefix = tm.prefix_cache(prompts[0][:shared], len(prompts), model) if shared else {}
            # with a filled cache, generate runs only the uncached part of input_ids
            out = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config,
                                 logits_processor=processors, **prefix)
        new = out.sequences[:, input_ids.shape[1]:]  # [B, N]
        logps, entropies = recorder.finish(out.sequences)  # [B, N] each (entropies None unless asked)
        stops = torch.tensor(self.stop_ids, device=device)
        results = []
        for b in range(new.shape[0]):
            is_stop = torch.isin(new[b], stops)  # [N]
            length = int(is_stop.nonzero()[0, 0]) + 1 if bool(is_stop.any()) else new.shape[1]
            results.append((new[b, :length].tolist(), logps[b, :length].tolist(),
                            entropies[b, :length].tolist() if entropies is not None else []))
        return results

    # ------------------------------------------------------------------ judge
    def yes_probability(self, prompts: Sequence[str | Sequence[ChatMessage]],
                        adapter: str | None = None) -> np.ndarray:
        """P(yes) / (P(yes) + P(no)) of the first answer token, for each prompt: an LLM judge.

        A prompt is a string (sent as one user message) or a chat; it is rendered with the chat
        template and the assistant generation prompt, cut to ``max_prompt_tokens``. "yes" is the
        first token of any of ``YES_WORDS``, "no" of ``NO_WORDS`` (T=1 model distribution).

        Returns a float64 array [N] in [0, 1]. Raises ConfigError if a "yes" first token is also a
        "no" first token for this tokenizer (the judge would be meaningless).
        """
        yes = self._first_tokens(YES_WORDS)
        no = self._first_tokens(NO_WORDS)
        if set(yes) & set(no):
            raise ConfigError(f"yes_probability: the tokenizer starts {YES_WORDS} and {NO_WORDS} with "
                              f"the same token(s) {sorted(set(yes) & set(no))}")
        chats = [(ChatMessage("user", p),) if isinstance(p, str) else tuple(p) for p in prompts]
        ids = [build_prompt_ids(self.tokenizer, c, self.max_prompt_tokens)[0] for c in chats]
        out = np.zeros(len(ids), dtype=np.float64)
        device = self.team_model.device
        for start in range(0, len(ids), self.micro_batch_size):
            chunk = ids[start:start + self.micro_batch_size]
            input_ids, attention = left_pad(chunk, self.tokenizer.pad_token_id, device)  # [b, P]
            positions = (attention.cumsum(-1) - 1).clamp(min=0)  # [b, P]
            with torch.no_grad(), self.team_model.using(adapter):
                logits = self.team_model.model(input_ids=input_ids, attention_mask=attention,
                                               position_ids=positions, logits_to_keep=1).logits
            logits = logits[:, -1]  # [b, V]
            probs = torch.softmax(logits.double(), dim=-1)  # [b, V]
            p_yes = probs[:, list(yes)].sum(-1)  # [b]
            p_no = probs[:, list(no)].sum(-1)  # [b]
            out[start:start + len(chunk)] = (p_yes / (p_yes + p_no)).cpu().numpy()
        return out

    def _first_tokens(self, words: Sequence[str]) -> tuple[int, ...]:
        firsts = (self.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in words)
        return tuple(dict.fromkeys(firsts))


def sampling_processors(sampling: SamplingParams) -> list[LogitsProcessor]:
    """Temperature, top-k and top-p as ``generate`` builds them for ``sampling`` (same order, same
    ``min_tokens_to_keep``); none for greedy decoding."""
    if sampling.greedy:
        return []
    out: list[LogitsProcessor] = []
    if sampling.temperature != 1.0:
        out.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k:
        out.append(TopKLogitsWarper(top_k=sampling.top_k, min_tokens_to_keep=1))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=sampling.top_p, min_tokens_to_keep=1))
    return out


class SampledLogprobs(LogitsProcessor):
    """The last logits processor of a ``generate`` call: records, for each step, the log-prob of the
    token sampled from that step's (processed) scores, and its entropy when asked for.

    The token of step t is known only at step t+1 (the last column of ``input_ids``) or, for the
    last step, from the returned sequences (``finish``); so one step's scores [B, V] are held until
    then, never all of them. Scores are returned unchanged.
    """

    def __init__(self, entropies: bool = False) -> None:
        self.entropies = entropies
        self._pending: torch.Tensor | None = None  # [B, V] scores of the step whose token is not known yet
        self._logps: list[torch.Tensor] = []  # N x [B]
        self._entropies: list[torch.Tensor] = []  # N x [B]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._pending is not None:
            self._take(input_ids[:, -1])
        self._pending = scores
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        scores = self._pending.float()  # [B, V]
        norm = torch.logsumexp(scores, dim=-1)  # [B]
        self._logps.append(scores.gather(-1, tokens[:, None]).squeeze(-1) - norm)  # [B]
        if self.entropies:  # tokens that top-k / top-p removed have p = 0 and add nothing
            log_dist = scores - norm[:, None]  # [B, V]
            self._entropies.append(-torch.where(log_dist.isfinite(), log_dist.exp() * log_dist, 0.0).sum(-1))
        self._pending = None

    def finish(self, sequences: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(logps, entropies)`` [B, N] of the N generated tokens (the last N columns of
        ``sequences`` [B, P + N]); ``entropies`` is None unless asked for."""
        if self._pending is not None:
            self._take(sequences[:, -1])
        n = len(self._logps)
        empty = sequences.new_zeros((sequences.shape[0], 0), dtype=torch.float32)
        logps = torch.stack(self._logps, dim=1) if n else empty  # [B, N]
        entropies = (torch.stack(self._entropies, dim=1) if n else empty) if self.entropies else None
        return logps, entropies


class RowSampler(LogitsProcessor):
    """``sampler: multinomial`` with own streams: draws each row's next token from that row's own
    generator by ``torch.multinomial`` (the draws of teamplay before its own decoding loop) and leaves
    only its score.

    Runs after the warpers and the log-prob recorder (which keep the distribution actually sampled);
    ``generate`` then runs greedy, so the token drawn here is the one it takes. Row b's draws depend
    only on ``seeds[b]`` and its own scores, not on the other rows of the batch.
    """

    def __init__(self, seeds: Sequence[int], device: torch.device) -> None:
        self.generators = [torch.Generator(device=device).manual_seed(int(s) & 0x7FFF_FFFF_FFFF_FFFF) for s in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(scores.float(), dim=-1)  # [B, V]
        tokens = torch.cat([torch.multinomial(probs[b], 1, generator=g)
                            for b, g in enumerate(self.generators)])  # [B]
        only = torch.full_like(scores, float("-inf"))
        return only.scatter_(1, tokens[:, None], 0.0)


def _streams(seed: int | None, row_seeds: Sequence[int] | None, device: torch.device) -> Streams:
    """The random streams of a sampled micro-batch: one generator per row where the rows carry their own
    seeds, else one seeded with the chunk's seed, else the global torch generator."""
    if row_seeds is not None:
        return Streams(per_row=[torch.Generator(device=device).manual_seed(int(s) & 0x7FFF_FFFF_FFFF_FFFF)
                                for s in row_seeds])
    return Streams(shared=None if seed is None else torch.Generator(device=device).manual_seed(
        seed & 0x7FFF_FFFF_FFFF_FFFF))


def _derive_seed(seed: int, adapter: str | None, start: int) -> int:
    """A seed per (call seed, adapter group, micro-batch): a chunk's samples do not depend on how
    many random numbers other chunks drew."""
    return derived_seed(seed, adapter, start)
