"""A key/value cache that grows in place: ``generate`` appends one token per step without copying.

transformers' ``DynamicCache`` appends each step's keys and values by concatenation, so every
decoding step copies the whole cache of every layer ([B, H, L, D] twice per layer): on a CPU that
copy was 16% of a float32 lock-step call of the embedded model (BENCHMARKS.md §2b). ``GrowingCache``
keeps each layer's keys and values in a buffer with room for ``reserve`` more tokens than the first
update brings (the call's ``max_new_tokens``), writes each step into the next free slot and hands the
attention a view of the filled part, so a call with a fixed token budget never reallocates.

The view has the shape and values a ``DynamicLayer`` would hold, so masks, positions and the
attention see the same numbers (tested: greedy transcripts and log-probs equal the dynamic cache's).
Operations that replace the tensors (reordering rows, repeating them) leave a plain tensor behind;
the next update then moves it into a new buffer, once.

It needs transformers' cache layers (``DynamicLayer`` and ``Cache(layer_class_to_replicate=...)``,
transformers 4.56 and later): ``SUPPORTED`` says whether this transformers has them; without them
``HFBackend`` generates with ``generate``'s own dynamic cache, as before (slower, same numbers).
"""

from __future__ import annotations

import inspect
from functools import partial

import torch
from transformers import cache_utils

#: whether this transformers has the cache layers GrowingCache is built of (module docstring)
SUPPORTED = hasattr(cache_utils, "DynamicLayer") and "layer_class_to_replicate" in inspect.signature(
    cache_utils.Cache.__init__).parameters
DynamicLayer = cache_utils.DynamicLayer if SUPPORTED else object
DynamicCache = cache_utils.DynamicCache


class GrowingLayer(DynamicLayer):
    """One layer's keys and values [B, H, L, D], held as views of buffers [B, H, C, D] with C >= L."""

    def __init__(self, reserve: int = 0) -> None:
        super().__init__()
        if reserve < 0:
            raise ValueError(f"reserve must be >= 0, got {reserve}")
        self.reserve = reserve
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def _backed(self) -> bool:
        """Whether ``keys`` and ``values`` are still the front of this layer's buffers."""
        buffer = self._key_buffer
        return (buffer is not None and self.keys.dim() == 4 and self.keys.shape[:2] == buffer.shape[:2]
                and self.keys.shape[-1] == buffer.shape[-1] and self.keys.dtype == buffer.dtype
                and (self.keys.numel() == 0 or self.keys.data_ptr() == buffer.data_ptr())
                and (self.values.numel() == 0 or self.values.data_ptr() == self._value_buffer.data_ptr()))

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, needed: int) -> None:
        """New buffers with room for ``needed`` tokens and ``reserve`` more, the cached ones copied in."""
        length = self.get_seq_length()
        capacity = needed + self.reserve
        rows, heads, _, key_dim = key_states.shape
        keys = key_states.new_empty((rows, heads, capacity, key_dim))
        values = value_states.new_empty((rows, heads, capacity, value_states.shape[-1]))
        if length:
            keys[..., :length, :].copy_(self.keys)
            values[..., :length, :].copy_(self.values)
        self._key_buffer, self._value_buffer = keys, values
        self.keys, self.values = keys[..., :length, :], values[..., :length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs,
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``key_states`` / ``value_states`` [B, H, T, D] after the cached tokens; return the
        cached keys and values [B, H, L + T, D] (views of the buffers)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        if not self._backed() or end > self._key_buffer.shape[-2]:
            self._grow(key_states, value_states, end)
        self._key_buffer[..., length:end, :].copy_(key_states)
        self._value_buffer[..., length:end, :].copy_(value_states)
        self.keys = self._key_buffer[..., :end, :]
        self.values = self._value_buffer[..., :end, :]
        return self.keys, self.values

    def reset(self) -> None:
        self._key_buffer = self._value_buffer = None
        super().reset()


class GrowingCache(DynamicCache):
    """A ``DynamicCache`` of ``GrowingLayer`` s, each reserving room for ``reserve`` more tokens than its
    first update brings (pass the call's ``max_new_tokens``)."""

    def __init__(self, reserve: int = 0) -> None:
        if reserve < 0:
            raise ValueError(f"reserve must be >= 0, got {reserve}")
        cache_utils.Cache.__init__(self, layer_class_to_replicate=partial(GrowingLayer, reserve))
