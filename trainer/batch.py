"""From rollout rows to tensors for a causal LM, per-token log-probabilities, and the data filters.

A row is `prompt + completion`. A causal LM's logits at position t predict token t + 1, so the
positions that carry loss are those whose *next* token is a completion token: for a prompt of
length p and a completion of length c, positions p - 1 .. p + c - 2 of the [seq - 1] prediction
axis. Rows are right-padded with PAD; under causal attention padding after a sequence cannot
change its earlier positions, and the mask keeps it out of the loss.

Filters: GRPO learns nothing from a group whose advantages are all zero (every sample got the
same reward), so `online_filter` drops such groups before the forward pass. `offline_filter` is
the same idea one level up, for the orchestrator choosing problems: a problem every sample
solves, or none does, yields only such groups.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from proofpool.core.rollout import RolloutSample

PAD_FILL = 0
"""The id in padded positions: any id of any vocabulary does, since the attention mask and the loss
mask leave those positions out."""

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class TokenBatch:
    """Padded tensors of some rollout rows, ready for a causal LM forward pass."""

    input_ids: Tensor
    """int64 [batch, seq]: prompt + completion, right-padded with PAD."""
    attention_mask: Tensor
    """int64 [batch, seq]: 1 on real tokens, 0 on padding."""
    mask: Tensor
    """bool [batch, seq - 1]: True where the position predicts a completion token."""
    advantages: Tensor
    """float32 [batch, seq - 1]: the row's advantage on its masked positions, 0 elsewhere."""

    @property
    def targets(self) -> Tensor:
        """int64 [batch, seq - 1]: the token each position predicts (input_ids shifted left)."""
        return self.input_ids[:, 1:]

    @property
    def tokens(self) -> int:
        """Completion tokens in the batch (the positions that carry loss)."""
        return int(self.mask.sum())


def make_batch(rows: Sequence[RolloutSample]) -> TokenBatch:
    """Right-padded tensors for `rows` (see `TokenBatch`); the longest row sets the width.

    Raises:
        ValueError: no rows, or a row with an empty prompt (nothing would predict its first token).
    """
    if not rows:
        raise ValueError("a batch needs at least one row")
    width = max(len(r.prompt_tokens) + len(r.completion_tokens) for r in rows)
    input_ids = torch.full((len(rows), width), PAD_FILL, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), max(width - 1, 0)), dtype=torch.bool)
    advantages = torch.zeros((len(rows), max(width - 1, 0)), dtype=torch.float32)
    for i, row in enumerate(rows):
        p, c = len(row.prompt_tokens), len(row.completion_tokens)
        if p == 0:
            raise ValueError(f"row {i} ({row.problem_id}) has an empty prompt")
        input_ids[i, : p + c] = torch.tensor([*row.prompt_tokens, *row.completion_tokens], dtype=torch.long)
        attention_mask[i, : p + c] = 1
        mask[i, p - 1 : p + c - 1] = True
        advantages[i, p - 1 : p + c - 1] = row.advantage
    return TokenBatch(input_ids, attention_mask, mask, advantages)


BehaviorKey = tuple[int, tuple[int, ...], tuple[int, ...]]
"""A row as the policy that generated it saw it: (model version, prompt, completion). Identical
keys have identical behaviour log-probabilities, so a mapping by key survives filtering and
sharding of the rows."""


def behavior_key(row: RolloutSample) -> BehaviorKey:
    return (row.model_version, tuple(row.prompt_tokens), tuple(row.completion_tokens))


def completion_logprobs(model: PreTrainedModel, rows: Sequence[RolloutSample]) -> dict[BehaviorKey, list[float]]:
    """Each row's completion-token log-probabilities under `model` (no grad)."""
    out: dict[BehaviorKey, list[float]] = {}
    with torch.no_grad():
        for start in range(0, len(rows), 64):
            chunk = rows[start : start + 64]
            logprobs = token_logprobs(model, make_batch(chunk))
            for i, row in enumerate(chunk):
                p, c = len(row.prompt_tokens), len(row.completion_tokens)
                out[behavior_key(row)] = logprobs[i, p - 1 : p + c - 1].tolist()
    return out


def place_logprobs(
    rows: Sequence[RolloutSample], batch: TokenBatch, logprobs: Mapping[BehaviorKey, Sequence[float]]
) -> Tensor:
    """float32 [batch, seq - 1]: per-row completion log-probabilities laid out like `batch.mask`."""
    out = torch.zeros_like(batch.advantages)
    for i, row in enumerate(rows):
        p, c = len(row.prompt_tokens), len(row.completion_tokens)
        values = logprobs[behavior_key(row)]
        if len(values) != c:
            raise ValueError(f"row {i}: {len(values)} behaviour log-probabilities for {c} completion tokens")
        out[i, p - 1 : p + c - 1] = torch.tensor(values, dtype=torch.float32)
    return out


def _log_softmax(model: PreTrainedModel, batch: TokenBatch) -> Tensor:
    """float32 [batch, seq - 1, vocab]: next-token log-probabilities at each position."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    return torch.log_softmax(logits[:, :-1].float(), dim=-1)


def _gather(logp: Tensor, batch: TokenBatch) -> Tensor:
    """float32 [batch, seq - 1]: log-probability of each target, 0 where not masked."""
    picked = logp.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    return torch.where(batch.mask, picked, torch.zeros((), dtype=picked.dtype))


def token_logprobs(model: PreTrainedModel, batch: TokenBatch) -> Tensor:
    """float32 [batch, seq - 1]: log-probability of each completion token under `model`, 0 elsewhere.

    Log-softmax in float32 whatever the model's dtype: ratios exp(logp - logp_old) of bf16
    log-probabilities would be noise. Grad flows if the caller has it enabled.
    """
    return _gather(_log_softmax(model, batch), batch)


def token_logprobs_and_entropy(model: PreTrainedModel, batch: TokenBatch) -> tuple[Tensor, Tensor]:
    """`token_logprobs` and, from the same forward pass, the entropy [batch, seq - 1] of each
    masked position's next-token distribution (0 elsewhere), for the entropy bonus."""
    logp = _log_softmax(model, batch)  # [batch, seq - 1, vocab]
    entropy = -(logp.exp() * logp).sum(dim=-1)
    return _gather(logp, batch), torch.where(batch.mask, entropy, torch.zeros((), dtype=entropy.dtype))


def group_key(row: RolloutSample) -> tuple[int, int, str, int]:
    """The group a row belongs to, across files.

    Group ids are numbered per rollout file (0, 1, ...), so rows gathered from several files are
    told apart by what their file's assignment fixed as well: sampling seed and model version.
    """
    return (row.sampling_seed, row.model_version, row.problem_id, row.group_id)


@dataclass(frozen=True)
class FilteredRows:
    """What the online filter kept, and how much it dropped."""

    rows: list[RolloutSample]
    groups_kept: int
    groups_dropped: int
    samples_dropped: int


def online_filter(rows: Sequence[RolloutSample]) -> FilteredRows:
    """Drop whole groups whose advantages are all zero; keep the other rows in their order.

    With group-centred advantages such a group (all rewards equal) has zero loss and zero
    gradient under any policy: it would cost a forward and backward pass and teach nothing.
    """
    informative: dict[tuple[int, int, str, int], bool] = {}
    for row in rows:
        key = group_key(row)
        informative[key] = informative.get(key, False) or row.advantage != 0.0
    kept = [row for row in rows if informative[group_key(row)]]
    groups_kept = sum(informative.values())
    return FilteredRows(kept, groups_kept, len(informative) - groups_kept, len(rows) - len(kept))


def pass_rates(rows: Sequence[RolloutSample], solved: float = 1.0) -> dict[str, float]:
    """Per problem id: the fraction of its samples whose reward reaches `solved`.

    What the orchestrator would accumulate (e.g. from accepted files or an evaluation pass) to
    feed `offline_filter`.
    """
    hits: dict[str, list[int]] = {}
    for row in rows:
        counts = hits.setdefault(row.problem_id, [0, 0])
        counts[0] += row.reward >= solved
        counts[1] += 1
    return {pid: h / n for pid, (h, n) in hits.items()}


def offline_filter(pass_rates: Mapping[str, float], low: float = 0.0, high: float = 1.0) -> list[str]:
    """The task ids worth assigning: pass rate strictly between `low` and `high`, in mapping order.

    Pure and stateless: what the orchestrator would consult before handing out task batches.
    With the defaults it drops the problems every sample solves (rate 1) and those none does
    (rate 0), whose groups the online filter would drop anyway after paying for the rollouts.

    Raises:
        ValueError: bounds not 0 <= low < high <= 1, or a rate that is not in [0, 1].
    """
    if not 0.0 <= low < high <= 1.0:
        raise ValueError(f"need 0 <= low < high <= 1, got low={low} high={high}")
    for task_id, rate in pass_rates.items():
        if math.isnan(rate) or not 0.0 <= rate <= 1.0:
            raise ValueError(f"pass rate of {task_id!r} is {rate}, not in [0, 1]")
    return [task_id for task_id, rate in pass_rates.items() if low < rate < high]
