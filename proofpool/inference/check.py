"""Judge rollout samples: their TOPLOC proofs, then their sampling, against a recomputation.

The two checks cover each other's blind spots. TOPLOC says the committed activations are the
model's on these tokens (catches another model, a perturbed model, a changed prompt, foreign
or broken proofs) but not that the tokens were sampled from the model; the sampling check says
each token is what the seeded sampler picks from the recomputed logits (catches tokens from a
cheap model proven afterwards with the right one, edited tokens, a false temperature or seed).
TOPLOC runs first, so a sample that fails both reports the TOPLOC reason, in the order the
validator lists its checks.

A file is checked in one batched prefill and one batched pass of each check (`check_samples`).
With `sample_rate` < 1 only a subset of rows is recomputed (spot-checking): the rows are drawn
from `selection_seed`, which the caller takes from something the worker could not know when it
built the file. A file with c cheated rows out of n, k of them checked, is caught with probability
`detection_probability(n, c, k)` = 1 - C(n - c, k) / C(n, k) (see docs/verifiable-inference.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from proofpool.inference.prefill import Recomputation, prefill_batch
from proofpool.sampling.verify import (
    DEFAULT_TIE_TOLERANCE,
    SamplingCheck,
    SamplingInput,
    SamplingReason,
    sampling_verdict,
    verify_batch,
)
from proofpool.toploc import ChunkCheck, toploc_verdict, verify_proof_blobs_batch
from proofpool.toploc.verify import ToplocReason

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

    from proofpool.rollout import RolloutSample

SampleReason = ToplocReason | SamplingReason

_SELECTION_DOMAIN: Final = b"proofpool/spot-check/v1"
"""Prefix of the per-row selection hash, so the draw cannot be confused with any other use of the seed."""


@dataclass(frozen=True)
class SampleVerdict:
    """The verdict on one sample, with the evidence behind it."""

    accepted: bool
    reason: SampleReason | None
    """First failing rule (TOPLOC rules, then sampling rules); None when accepted."""
    toploc: tuple[ChunkCheck, ...]
    sampling: SamplingCheck
    row: int
    """The sample's row (= sample index) in its rollout file."""


def check_sample(
    recomputed: Recomputation,
    completion_tokens: Sequence[int],
    proofs: object,
    *,
    temperature: float,
    sampling_seed: int,
    sample_index: int,
    eos_token_id: int,
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> SampleVerdict:
    """TOPLOC + sampling verdict for one sample, given the verifier's recomputation of it.

    `proofs` is the rollout row's concatenated proof blob, taken as untrusted: any value is
    judged, never raised on. `sample_index` is the row's index in its rollout file.
    """
    return _judge(
        [recomputed],
        [proofs],
        [SamplingInput(recomputed.logits, completion_tokens, temperature, sampling_seed, sample_index)],
        eos_token_id=eos_token_id,
        max_tokens=max_tokens,
        tie_tolerance=tie_tolerance,
    )[0]


def check_recomputed(
    samples: Sequence[RolloutSample],
    recomputed: Sequence[Recomputation],
    rows: Sequence[int],
    *,
    eos_token_id: int,
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> list[SampleVerdict]:
    """Verdicts for rollout rows already recomputed: `samples[i]` is row `rows[i]` of its file and
    `recomputed[i]` the verifier's prefill of it. TOPLOC and sampling each run once for all of them."""
    return _judge(
        recomputed,
        [s.proofs for s in samples],
        [
            SamplingInput(r.logits, s.completion_tokens, s.temperature, s.sampling_seed, row)
            for s, r, row in zip(samples, recomputed, rows, strict=True)
        ],
        eos_token_id=eos_token_id,
        max_tokens=max_tokens,
        tie_tolerance=tie_tolerance,
    )


def check_samples(
    model: LlamaForCausalLM,
    samples: Sequence[RolloutSample],
    *,
    eos_token_id: int,
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
    sample_rate: float = 1.0,
    selection_seed: bytes | None = None,
) -> list[SampleVerdict]:
    """Verdicts for the rows of a rollout file (row i has sample index i): one batched prefill, then
    batched TOPLOC and sampling checks.

    With `sample_rate` < 1 only `spot_check_rows(len(samples), sample_rate, selection_seed)` are
    recomputed and judged (at least one row); the verdicts come in row order and `SampleVerdict.row`
    says which rows they are. `selection_seed` must then be bytes the worker could not know when it
    built the file (the validator's own random bytes, or the hash of the block that recorded the
    submission); it is ignored at rate 1.

    Rows are expected to have passed the schema and bounds checks (token ids within the
    vocabulary, lengths within limits); out-of-vocabulary ids raise ValueError here.
    """
    rows = spot_check_rows(len(samples), sample_rate, selection_seed)
    chosen = [samples[i] for i in rows]
    recomputed = prefill_batch(model, [(s.prompt_tokens, s.completion_tokens) for s in chosen])
    return check_recomputed(
        chosen, recomputed, rows, eos_token_id=eos_token_id, max_tokens=max_tokens, tie_tolerance=tie_tolerance
    )


def spot_check_rows(n_rows: int, sample_rate: float, selection_seed: bytes | None) -> list[int]:
    """The rows a validator recomputes, ascending: all of them at rate 1, else the ceil(rate * n)
    (at least one) rows whose sha256(domain + seed + row) are smallest, a uniform draw without
    replacement that anyone holding the seed can repeat.

    Raises:
        ValueError: `sample_rate` outside (0, 1], or no `selection_seed` (bytes) below rate 1.
    """
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if sample_rate == 1:
        return list(range(n_rows))
    if not isinstance(selection_seed, bytes) or not selection_seed:
        raise ValueError("spot-checking needs a selection_seed (bytes the worker could not know)")
    k = min(n_rows, max(1, math.ceil(sample_rate * n_rows - 1e-9)))  # 0.1 * 30 is 3.0000000000000004
    prefix = hashlib.sha256(_SELECTION_DOMAIN + len(selection_seed).to_bytes(4, "big") + selection_seed)
    ranks = []
    for row in range(n_rows):
        h = prefix.copy()
        h.update(row.to_bytes(8, "big"))
        ranks.append((h.digest(), row))
    return sorted(row for _, row in sorted(ranks)[:k])


def detection_probability(n_rows: int, cheated_rows: int, checked_rows: int) -> float:
    """Chance that `checked_rows` rows drawn without replacement from `n_rows` include at least one
    of `cheated_rows`: 1 - C(n - c, k) / C(n, k). Assumes every checked cheated row is rejected
    (true for the cheats TOPLOC and the sampling check catch per sample; see the detection matrix)."""
    if not 0 <= cheated_rows <= n_rows or not 0 <= checked_rows <= n_rows:
        raise ValueError(f"need 0 <= cheated ({cheated_rows}), checked ({checked_rows}) <= rows ({n_rows})")
    return 1.0 - math.comb(n_rows - cheated_rows, checked_rows) / math.comb(n_rows, checked_rows)


def _judge(
    recomputed: Sequence[Recomputation],
    proofs: Sequence[object],
    sampling_inputs: Sequence[SamplingInput],
    *,
    eos_token_id: int,
    max_tokens: int,
    tie_tolerance: float,
) -> list[SampleVerdict]:
    """TOPLOC for every sample in one batch, sampling in one batch, then one verdict per sample."""
    toploc = verify_proof_blobs_batch([r.hidden_states for r in recomputed], proofs)
    sampling = verify_batch(sampling_inputs, eos_token_id, max_tokens, tie_tolerance=tie_tolerance)
    verdicts = []
    for chunks, check, claim in zip(toploc, sampling, sampling_inputs, strict=True):
        toploc_ok, toploc_reason = toploc_verdict(chunks)
        sampling_ok, sampling_reason = sampling_verdict(check)
        reason: SampleReason | None = toploc_reason if not toploc_ok else sampling_reason
        verdicts.append(
            SampleVerdict(
                accepted=toploc_ok and sampling_ok,
                reason=reason,
                toploc=tuple(chunks),
                sampling=check,
                row=claim.sample_index,
            )
        )
    return verdicts
