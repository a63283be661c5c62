"""A tiny Qwen3 with a byte-level BPE tokenizer and a ChatML template, built offline in seconds.

The generic model path (any allowlisted Hugging Face architecture, its chat template, several stop
ids) needs a model that looks like a real one to every role: a tokenizer trained with `tokenizers`
(byte-level, so any text round-trips), special tokens and a chat template as Qwen ships them, a
`generation_config.json` that lists two stop ids, and a `Qwen3ForCausalLM` built from a config.
It is small enough for CI (about 0.5 M parameters), and its weights are random: it answers
nothing, it only has to run, be proven and be checked exactly as a real model is. No model hub is
reachable, so everything is built here from a seed and a text corpus.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CHATML_TEMPLATE: Final = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""Qwen's chat format: each turn between <|im_start|>role and <|im_end|>; no BOS token."""
SPECIAL_TOKENS: Final = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Ids 0, 1, 2 of the vocabulary: padding/end of text, turn start, turn end (the chat's stop token)."""
BASE_CORPUS: Final = (
    "You are a helpful assistant. Think step by step, then answer.",
    "Put the final answer inside <answer> </answer> tags, or in \\boxed{} for math.",
    "def solve(x: int) -> int:\n    return x + 1\n",
    "```python\nprint('hello world')\n```",
    "What is 12 + 34? The answer is 46. 0 1 2 3 4 5 6 7 8 9 + - * / = ( ) [ ] { } < > , . : ;",
)
"""Text every tiny tokenizer learns from, so prompts of any environment tokenize into merges."""


@dataclass(frozen=True)
class TinyQwenSpec:
    """What fixes a tiny model: same spec, same files, byte for byte."""

    seed: int = 0
    vocab_size: int = 512
    hidden_size: int = 128
    """With 4 heads, a head size of 32: the smallest vLLM's CPU attention runs."""
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    max_positions: int = 4096


def byte_level_bpe(texts: Iterable[str], vocab_size: int, special_tokens: Sequence[str]) -> object:
    """A byte-level BPE `tokenizers.Tokenizer` of `vocab_size` ids trained on `texts`, with
    `special_tokens` first (ids 0, 1, ...): deterministic, offline, every byte encodable."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def train_tokenizer(corpus: Iterable[str], vocab_size: int) -> object:
    """A byte-level BPE `tokenizers.Tokenizer` trained on `corpus` with the ChatML special tokens first."""
    return byte_level_bpe([*BASE_CORPUS, *corpus], vocab_size, SPECIAL_TOKENS)


def build_tiny_qwen3(directory: Path, corpus: Iterable[str] = (), spec: TinyQwenSpec | None = None) -> Path:
    """Write a tiny `Qwen3ForCausalLM` model directory (weights, config, tokenizer, chat template,
    generation config) to `directory` and return it."""
    import torch
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    spec = spec or TinyQwenSpec()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    raw = train_tokenizer(corpus, spec.vocab_size)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHATML_TEMPLATE,
    )
    tokenizer.save_pretrained(directory)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.hidden_size * 3,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=spec.kv_heads,
        head_dim=spec.hidden_size // spec.heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    torch.manual_seed(spec.seed)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(directory)
    GenerationConfig(
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        bos_token_id=None,
    ).save_pretrained(directory)
    (directory / "proofpool-tiny.json").write_text(json.dumps(spec.__dict__, sort_keys=True))
    return directory
