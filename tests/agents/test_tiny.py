"""The shared tiny model and tokenizer: any text round-trips, ChatML template, seeds fix weights."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.tiny import CHATML_TEMPLATE, save_tiny, tiny_model_and_tokenizer, tiny_tokenizer

TOKENIZER = tiny_tokenizer()


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_round_trips(text):
    ids = TOKENIZER.encode(text, add_special_tokens=False)
    # one token per UTF-8 byte, none of them special
    assert len(ids) == len(text.encode("utf-8"))
    assert all(i >= 4 for i in ids)
    assert TOKENIZER.decode(ids) == text


def test_special_tokens_and_chat_template():
    assert (TOKENIZER.pad_token_id, TOKENIZER.bos_token_id, TOKENIZER.eos_token_id) == (0, 1, 2)
    assert TOKENIZER.convert_tokens_to_ids("<|im_start|>") == 3
    assert len(TOKENIZER) == 260
    assert TOKENIZER.padding_side == "left"
    text = TOKENIZER.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
        tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    assert TOKENIZER.chat_template == CHATML_TEMPLATE


def test_same_seed_same_weights_other_seed_other_weights():
    a, _ = tiny_model_and_tokenizer(seed=1)
    b, _ = tiny_model_and_tokenizer(seed=1)
    c, _ = tiny_model_and_tokenizer(seed=2)
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb)  # exact: one seed, one process: the same draws
    assert not torch.equal(wa, wc)  # exact: one seed, one process: the same draws
    assert a.config.vocab_size == 260 and a.config.num_hidden_layers == 2 and a.config.hidden_size == 32


def test_seeding_does_not_touch_the_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny_model_and_tokenizer(seed=5)
    assert torch.equal(torch.rand(3), expected)  # exact: one seed, one process: the same draws


def test_save_tiny_writes_a_pretrained_folder(tmp_path):
    folder = save_tiny(tmp_path / "tiny", seed=3)
    assert (folder / "config.json").is_file()
    assert (folder / "tokenizer.json").is_file()
