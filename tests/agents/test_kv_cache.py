"""GrowingCache: the keys and values a DynamicCache would hold, written in place into a buffer."""

import inspect

import pytest
import torch

from teamplay.agents.kv_cache import SUPPORTED, DynamicCache, GrowingCache, GrowingLayer
from tests.tiny import tiny_model_and_tokenizer

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="this transformers has no cache layers (before 4.56)")


def states(rows: int, tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, tokens, 4, generator=gen), torch.randn(rows, 2, tokens, 4, generator=gen)


def test_a_layer_holds_what_concatenation_holds_and_never_moves_within_its_reserve():
    layer, reference = GrowingLayer(reserve=3), []
    keys, values = states(2, 5, 0)  # a prompt of 5 tokens, then 3 single-token steps
    out_k, out_v = layer.update(keys, values)
    buffer = out_k.data_ptr()
    reference.append((keys, values))
    for step in range(3):
        k, v = states(2, 1, step + 1)
        out_k, out_v = layer.update(k, v)
        reference.append((k, v))
        assert out_k.data_ptr() == buffer  # written in place: no copy of the cache
    # exact: the cache copies tensors, no arithmetic
    assert torch.equal(out_k, torch.cat([k for k, _ in reference], dim=-2))
    # exact: the cache copies tensors, no arithmetic
    assert torch.equal(out_v, torch.cat([v for _, v in reference], dim=-2))
    assert layer.get_seq_length() == 8
    # past the reserve it moves once, to a buffer with the reserve again, and keeps every token
    k, v = states(2, 1, 9)
    grown_k, grown_v = layer.update(k, v)
    assert grown_k.data_ptr() != buffer and layer._key_buffer.shape[-2] == 9 + 3
    # exact: the cache copies tensors, no arithmetic
    assert torch.equal(grown_k, torch.cat([out_k, k], dim=-2)) and torch.equal(grown_v, torch.cat([out_v, v], dim=-2))


def test_reordered_rows_move_into_a_new_buffer_and_keep_their_tokens():
    layer = GrowingLayer(reserve=4)
    keys, values = states(3, 2, 0)
    layer.update(keys, values)
    layer.batch_select_indices(torch.tensor([2, 2, 0, 1]))  # rows copied and reordered: [4, ...]
    k, v = states(4, 1, 1)
    out_k, out_v = layer.update(k, v)
    # exact: rows copied and reordered, no arithmetic
    assert torch.equal(out_k, torch.cat([keys[[2, 2, 0, 1]], k], dim=-2))
    # exact: rows copied and reordered, no arithmetic
    assert torch.equal(out_v, torch.cat([values[[2, 2, 0, 1]], v], dim=-2))


def test_a_negative_reserve_is_refused():
    with pytest.raises(ValueError, match="reserve must be >= 0"):
        GrowingCache(reserve=-1)


@pytest.mark.parametrize("rows", [1, 3])
def test_decoding_through_it_gives_the_dynamic_caches_logits(rows):
    # the same model, the same tokens, token by token: the growing cache hands the attention the
    # same keys and values (as a view), so the logits are equal up to float32 summation order
    model, _ = tiny_model_and_tokenizer(seed=0)
    keyword = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    prompt = torch.arange(3, 3 + 7 * rows).reshape(rows, 7)  # [rows, 7]
    steps = torch.arange(40, 46).repeat(rows, 1)  # [rows, 6]
    logits = {}
    for name, cache in (("dynamic", DynamicCache()), ("growing", GrowingCache(reserve=4))):  # 4 < 6: grows once
        with torch.no_grad():
            out = [model(input_ids=prompt, **{keyword: cache}, use_cache=True).logits[:, -1]]
            for t in range(steps.shape[1]):
                out.append(model(input_ids=steps[:, t:t + 1], **{keyword: cache}, use_cache=True).logits[:, -1])
        logits[name] = torch.stack(out, 1)  # [rows, 7, V]
    torch.testing.assert_close(logits["growing"], logits["dynamic"], atol=1e-5, rtol=1e-5)
