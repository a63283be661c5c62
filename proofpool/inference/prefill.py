"""Validator-side recomputation: one plain PyTorch forward pass per sample.

A validator re-runs prompt + completion through the model (transformers, no vLLM) and takes,
for a completion of n tokens, the same n rows the worker's engine captured: the final-norm
hidden states at the last prompt position and at each completion token but the last, i.e. the
states that produced each completion token. From those rows it also takes the logits (float32)
for the sampling check. The hidden states feed TOPLOC; they come out in the model's dtype
(bf16 or fp32, whichever the validator loaded), and TOPLOC rounds them to bf16 itself.

Batches are right-padded: under a causal mask, padding after a sequence cannot change any of
its rows, so no attention mask is needed and each sample's rows equal its unbatched ones up to
kernel numerics, which TOPLOC and the sampling check tolerate by design.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from proofpool.inference.model import decoder_and_head

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class Recomputation:
    """What the verifier's prefill says about one completion of n tokens."""

    hidden_states: torch.Tensor
    """[n, hidden] in the model's dtype: final-norm states that produced each completion token."""
    logits: torch.Tensor
    """float32 [n, vocab]: row i are the logits that produced completion token i."""


def _check_tokens(tokens: Sequence[int], vocab_size: int, what: str) -> None:
    bad = [t for t in tokens if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"{what} has token ids outside the vocabulary (size {vocab_size}): {bad[:5]}")


def prefill_batch(
    model: PreTrainedModel,
    samples: Sequence[tuple[Sequence[int], Sequence[int]]],
    max_batch_tokens: int = 16_384,
) -> list[Recomputation]:
    """Recompute hidden states and logits for (prompt_tokens, completion_tokens) pairs.

    Samples are run in right-padded batches of at most `max_batch_tokens` padded tokens.
    Token ids must be within the vocabulary (the validator's bounds check runs first); a
    violation raises ValueError, as it would be the verifier's bug.
    """
    vocab_size = int(model.config.vocab_size)
    pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    sequences: list[list[int]] = []
    for prompt, completion in samples:
        if not prompt:
            raise ValueError("prompt must not be empty")
        _check_tokens(prompt, vocab_size, "prompt")
        _check_tokens(completion, vocab_size, "completion")
        sequences.append([int(t) for t in prompt] + [int(t) for t in completion[:-1]])
    results: list[Recomputation | None] = [None] * len(samples)
    order = sorted(range(len(samples)), key=lambda i: len(sequences[i]))  # similar lengths pad less
    batch: list[int] = []
    for i in order:
        width = max(len(sequences[j]) for j in [*batch, i])
        if batch and width * (len(batch) + 1) > max_batch_tokens:
            _run(model, samples, sequences, batch, pad_id, results)
            batch = []
        batch.append(i)
    if batch:
        _run(model, samples, sequences, batch, pad_id, results)
    return [r for r in results if r is not None]


def _run(
    model: PreTrainedModel,
    samples: Sequence[tuple[Sequence[int], Sequence[int]]],
    sequences: list[list[int]],
    batch: list[int],
    pad_id: int,
    results: list[Recomputation | None],
) -> None:
    """One forward pass over `batch` (indices into `sequences`), filling `results`."""
    width = max(len(sequences[i]) for i in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    for row, i in enumerate(batch):
        input_ids[row, : len(sequences[i])] = torch.tensor(sequences[i], dtype=torch.long)
    decoder, head = decoder_and_head(model)
    with torch.inference_mode():
        hidden = decoder(input_ids=input_ids).last_hidden_state  # [batch, width, hidden], post-norm
        for row, i in enumerate(batch):
            prompt_len, n = len(samples[i][0]), len(samples[i][1])
            rows = hidden[row, prompt_len - 1 : prompt_len - 1 + n]  # [n, hidden]
            logits = head(rows).float()  # [n, vocab]
            results[i] = Recomputation(hidden_states=rows.clone(), logits=logits)


def prefill(model: PreTrainedModel, prompt_tokens: Sequence[int], completion_tokens: Sequence[int]) -> Recomputation:
    """`prefill_batch` for a single sample."""
    return prefill_batch(model, [(prompt_tokens, completion_tokens)])[0]
