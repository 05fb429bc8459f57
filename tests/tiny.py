"""A tiny random model and a real in-memory tokenizer, for tests that must run on CPU in seconds.

``tiny_model_and_tokenizer()`` builds a randomly initialised ``LlamaForCausalLM`` (2 layers,
hidden 32) and a ``PreTrainedTokenizerFast`` over a byte-level vocabulary: the 256 byte symbols of
GPT-2's byte-level alphabet and no merges, so ANY text encodes (one token per UTF-8 byte) and
decodes back exactly. Special tokens: ``<s>`` (bos), ``<|im_end|>`` (eos, ends a chat turn, as in
ChatML instruct models), ``<pad>`` and ``<|im_start|>``. The ``chat_template`` is ChatML::

    <|im_start|>system\\n...<|im_end|>\\n<|im_start|>user\\n...<|im_end|>\\n<|im_start|>assistant\\n

Nothing is downloaded. Outputs of the random model are gibberish but deterministic for a seed,
which is all that generation, log-prob and trainer tests need. ``tiny_train_config()`` is the
config of a short ``teamplay train`` run of a saved tiny model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

BOS, EOS, PAD, IM_START = "<s>", "<|im_end|>", "<pad>", "<|im_start|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, IM_START)

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with 260 tokens: ids 0-3 are ``SPECIAL_TOKENS``, 4-259 the bytes."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins of the bytes
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for symbol in sorted(alphabet):
        vocab[symbol] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    # add_prefix_space=False: "yes" and " yes" must stay different texts, as in real tokenizers.
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token=BOS, eos_token=EOS, pad_token=PAD,
        additional_special_tokens=[IM_START], padding_side="left",
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def tiny_model_and_tokenizer(
    seed: int = 0, vocab: int | None = None, hidden: int = 32, layers: int = 2,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A random ``LlamaForCausalLM`` and ``tiny_tokenizer()``.

    Args:
        seed: seeds the weight initialisation (same seed -> identical weights).
        vocab: model vocabulary size; ``None`` = the tokenizer's 260 tokens. A larger value adds
            rows no text maps to; a smaller one is refused.
        hidden: hidden size (4 attention heads, 2 key/value heads, so it must divide by 4).
        layers: number of decoder layers.

    The model is in eval mode, float32, with eager attention (exact and fast at this size); its
    ``generation_config`` names the tokenizer's bos/eos/pad ids.
    """
    tokenizer = tiny_tokenizer()
    n_vocab = len(tokenizer) if vocab is None else vocab
    if n_vocab < len(tokenizer):
        raise ValueError(f"vocab={vocab} is smaller than the tokenizer's {len(tokenizer)} tokens")
    config = LlamaConfig(
        vocab_size=n_vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=1024, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    config._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer


def save_tiny(folder: Path, seed: int = 0, **kwargs: int) -> Path:
    """Save a tiny model and its tokenizer to ``folder`` (a ``from_pretrained`` folder); returns it."""
    model, tokenizer = tiny_model_and_tokenizer(seed=seed, **kwargs)
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_train_config(model: str | Path, output_dir: str | Path, *, task_name: str = "arith", limit: int = 4,
                      lora_r: int = 4, max_prompt_tokens: int = 512, problems_per_step: int = 1,
                      group_size: int = 2, max_new_tokens: int = 3, **fields: Any) -> dict[str, Any]:
    """A ``teamplay train`` config (as the dict a YAML file holds; JSON is YAML) of a short run of
    the tiny model saved at ``model``, writing to ``output_dir``: the first ``limit`` problems of
    ``task_name``'s train split, protocol single, a LoRA adapter of rank ``lora_r`` (alpha
    ``2 * lora_r``), prompts cut at ``max_prompt_tokens``, ``problems_per_step`` problems a step with
    ``group_size`` episodes each, up to ``max_new_tokens`` sampled at temperature 1, no TensorBoard.
    ``fields`` add top-level fields or replace them whole (``protocol``, ``steps``, ``task``, ...)."""
    return {
        "model": {"name": str(model), "lora": {"r": lora_r, "alpha": 2 * lora_r}},
        "backend": {"max_prompt_tokens": max_prompt_tokens},
        "task": {"name": task_name, "split": "train", "limit": limit},
        "protocol": {"name": "single"},
        "rollout": {"problems_per_step": problems_per_step, "group_size": group_size},
        "sampling": {"max_new_tokens": max_new_tokens, "temperature": 1.0},
        "tensorboard": False, "output_dir": str(output_dir), **fields,
    }
