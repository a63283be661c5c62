"""The devnet tokenizer: one token per character of the arithmetic task, built locally.

Nothing can be downloaded from a model hub on the devnet, so the tokenizer is made here with the
`tokenizers` library and saved in the Hugging Face layout (`tokenizer.json`,
`tokenizer_config.json`, `special_tokens_map.json`) that both `transformers.AutoTokenizer` and
vLLM load. The vocabulary is fixed in code (`VOCAB`), so token ids are the same on every machine
and pure-Python helpers (`encode_text`, `decode_tokens`) can map between text and ids without
loading any file: validators recompute rewards from token ids alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

PAD_TOKEN: Final = "<pad>"
BOS_TOKEN: Final = "<bos>"
EOS_TOKEN: Final = "<eos>"
UNK_TOKEN: Final = "<unk>"
SPECIAL_TOKENS: Final = (PAD_TOKEN, BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)
CHARACTERS: Final = (*"0123456789", "+", "=")
VOCAB: Final[tuple[str, ...]] = (*SPECIAL_TOKENS, *CHARACTERS)
"""Token id -> token. 16 entries: a power of two keeps the embedding table aligned."""

PAD_ID: Final = VOCAB.index(PAD_TOKEN)
BOS_ID: Final = VOCAB.index(BOS_TOKEN)
EOS_ID: Final = VOCAB.index(EOS_TOKEN)
UNK_ID: Final = VOCAB.index(UNK_TOKEN)
VOCAB_SIZE: Final = len(VOCAB)

MAX_LENGTH: Final = 64
"""Longest sequence (prompt + completion) the devnet model is built for."""

_TOKEN_TO_ID: Final = {token: i for i, token in enumerate(VOCAB)}


def build_tokenizer() -> Tokenizer:
    """The devnet tokenizer as a `tokenizers.Tokenizer`.

    Every character is its own token (a `Split` on any single character), so digits never merge
    and the model sees numbers digit by digit, which is what makes addition learnable at this
    size. The post-processor prepends `<bos>` when special tokens are requested, as Llama
    tokenizers do; the `Fuse` decoder joins tokens without spaces.
    """
    tokenizer = Tokenizer(models.WordLevel(vocab=dict(_TOKEN_TO_ID), unk_token=UNK_TOKEN))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A",
        pair=f"{BOS_TOKEN} $A $B",
        special_tokens=[(BOS_TOKEN, BOS_ID)],
    )
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def save_tokenizer(directory: Path) -> Path:
    """Write the tokenizer in Hugging Face format into `directory` and return it.

    The files are written directly (no `transformers` import) with the keys both transformers
    4.x and 5.x and vLLM read: `tokenizer.json` (the fast tokenizer), `tokenizer_config.json`
    (class and special tokens) and `special_tokens_map.json`.
    """
    directory.mkdir(parents=True, exist_ok=True)
    build_tokenizer().save(str(directory / "tokenizer.json"))
    specials = {
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "unk_token": UNK_TOKEN,
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "model_max_length": MAX_LENGTH,
        "padding_side": "right",
        "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (directory / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n")
    return directory


def encode_text(text: str, *, add_bos: bool = False) -> list[int]:
    """Token ids of `text`, one per character; unknown characters map to `<unk>`."""
    ids = [_TOKEN_TO_ID.get(ch, UNK_ID) for ch in text]
    return [BOS_ID, *ids] if add_bos else ids


def decode_tokens(token_ids: Iterable[int], *, stop_at_eos: bool = True) -> str:
    """Text of `token_ids` without special tokens.

    With `stop_at_eos`, everything from the first `<eos>` on is dropped, as a completion ends
    there. Ids outside the vocabulary decode to nothing rather than raising: completions come
    from untrusted workers and the caller judges them, it must not crash on them.
    """
    chars: list[str] = []
    for token_id in token_ids:
        if stop_at_eos and token_id == EOS_ID:
            break
        if 0 <= token_id < VOCAB_SIZE and VOCAB[token_id] in CHARACTERS:
            chars.append(VOCAB[token_id])
    return "".join(chars)
