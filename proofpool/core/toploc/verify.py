"""Checking TOPLOC proofs against the verifier's own recomputed activations.

Per chunk the verifier takes its own top-k entries, evaluates the proof's polynomial at
(index mod m) and compares the bf16 bits: the exponents must mostly agree, and where they agree
the mantissas must be close. The statistics equal the reference library's (checked against its
vectors): `mant_err_median` is the upper median (element n // 2 of the sorted errors), the mean is
a float64, and a chunk where no exponent matches reports 2**64 for both.

Hardening on purpose (the reference's faults): the index is reduced by the proof's own modulus
before evaluation (the reference evaluated at the raw index, so every honest chunk whose modulus
was below 65497 was rejected); proofs of any shape or type, a zero modulus, or the wrong number
of proofs give a `ChunkCheck` with `error` set, never an exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import torch

from proofpool.core.toploc.field import Int64Array, evaluate
from proofpool.core.toploc.proof import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TOPK,
    chunk_count,
    chunk_groups,
    decode_proofs,
    split_proofs,
    to_bf16,
)

NO_MATCH: Final = float(2**64)
"""Mantissa error reported when no exponent matches (the reference's sentinel)."""

MAX_EXP_MISMATCHES: Final = 38
"""Of 128: honest vLLM-vs-prefill recomputation shows at most a handful (DESIGN.md)."""
MAX_MANT_ERR_MEAN: Final = 10.0
"""Mean |mantissa difference| (in units of the 7-bit bf16 mantissa) over exponent matches."""
MAX_MANT_ERR_MEDIAN: Final = 8.0
"""Upper median of the same differences."""

ProofError = Literal[
    "proof_missing",
    "proof_extra",
    "proofs_not_a_list",
    "proof_not_bytes",
    "proof_wrong_length",
    "proof_bad_modulus",
    "proof_bad_coefficient",
]
"""Why a chunk's proof could not be used (`ChunkCheck.error`)."""
ToplocReason = Literal["proof_count_mismatch", "proof_malformed", "toploc_exp_mismatch", "toploc_mantissa"]
"""Why `toploc_verdict` rejected a sample."""

_COUNT_ERRORS: Final = frozenset({"proof_missing", "proof_extra"})
_EXP_MASK: Final = 0x7F80
_MANT_MASK: Final = 0x007F


@dataclass(frozen=True)
class ChunkCheck:
    """What one chunk's proof says about the verifier's activations.

    When `error` is set the proof could not be used and the numbers are the worst possible
    (every entry mismatched), so any threshold check also fails.
    """

    exp_mismatches: int
    """Entries whose bf16 exponent bits differ (sign ignored, as in the reference)."""
    mant_err_mean: float
    """Mean |mantissa bits difference| over entries with matching exponents; NO_MATCH if none."""
    mant_err_median: float
    """Upper median of those differences; NO_MATCH if none."""
    error: ProofError | None = None
    """Why the proof was unusable, None when it was evaluated."""


def _failed(error: ProofError, n_entries: int) -> ChunkCheck:
    return ChunkCheck(exp_mismatches=n_entries, mant_err_mean=NO_MATCH, mant_err_median=NO_MATCH, error=error)


def verify_proofs_batch(
    activations: Sequence[torch.Tensor],
    proofs: Sequence[object],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
) -> list[list[ChunkCheck]]:
    """Per sample, one `ChunkCheck` per chunk of the verifier's activations [tokens_i, hidden] (plus
    one per surplus proof), comparing them with that sample's claimed `proofs` (a list of proof
    bytes); all chunks of all samples are checked in one vectorized pass.

    Each `proofs[i]` comes from an untrusted file, so any value is accepted and judged; the
    activations are the verifier's own, so a malformed tensor raises `ToplocError` (a verifier bug),
    and so does a `proofs` sequence whose length differs from `activations` (ValueError).
    """
    if len(activations) != len(proofs):
        raise ValueError(f"{len(activations)} samples of activations but {len(proofs)} of proofs")
    claims: list[Sequence[object] | ProofError] = [
        p if isinstance(p, list | tuple) else "proofs_not_a_list" for p in proofs
    ]
    return _verify([to_bf16(a) for a in activations], claims, chunk_size, topk)


def verify_proofs(
    activations: torch.Tensor,
    proofs: object,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
) -> list[ChunkCheck]:
    """`verify_proofs_batch` for one sample: activations [tokens, hidden] and its list of proofs."""
    return verify_proofs_batch([activations], [proofs], chunk_size, topk)[0]


def verify_proof_blobs_batch(
    activations: Sequence[torch.Tensor],
    blobs: Sequence[object],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
) -> list[list[ChunkCheck]]:
    """`verify_proofs_batch` for rollout rows' concatenated `proofs` columns (a non-bytes value fails
    every chunk of its sample with `proof_not_bytes`)."""
    if len(activations) != len(blobs):
        raise ValueError(f"{len(activations)} samples of activations but {len(blobs)} proof blobs")
    acts = [to_bf16(a) for a in activations]
    claims: list[Sequence[object] | ProofError] = [
        split_proofs(blob, a.shape[0], a.shape[1], chunk_size, topk)
        if isinstance(blob, bytes | bytearray | memoryview)
        else "proof_not_bytes"
        for a, blob in zip(acts, blobs, strict=True)
    ]
    return _verify(acts, claims, chunk_size, topk)


def verify_proof_blob(
    activations: torch.Tensor,
    blob: object,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
) -> list[ChunkCheck]:
    """`verify_proof_blobs_batch` for one rollout row."""
    return verify_proof_blobs_batch([activations], [blob], chunk_size, topk)[0]


def _verify(
    acts: list[torch.Tensor], claims: list[Sequence[object] | ProofError], chunk_size: int, topk: int
) -> list[list[ChunkCheck]]:
    """Checks for bf16 activations against per-sample proofs, or an error that fails all of a sample's chunks."""
    groups = chunk_groups(acts, chunk_size, topk)
    points = [[0] * chunk_count(a.shape[0], chunk_size) for a in acts]  # entries per chunk
    for group in groups:
        for sample, chunk in group.owners:
            points[sample][chunk] = group.indices.shape[1]
    checks: list[list[ChunkCheck | None]] = []
    for sample, claim in enumerate(claims):
        if isinstance(claim, str):
            checks.append([_failed(claim, k) for k in points[sample]] or [_failed(claim, topk)])
            continue
        row: list[ChunkCheck | None] = [None] * max(len(points[sample]), len(claim))
        for chunk in range(len(points[sample]), len(claim)):
            row[chunk] = _failed("proof_extra", topk)
        for chunk in range(len(claim), len(points[sample])):
            row[chunk] = _failed("proof_missing", points[sample][chunk])
        checks.append(row)
    for group in groups:
        k = group.indices.shape[1]
        rows = [r for r, (s, c) in enumerate(group.owners) if not isinstance(claims[s], str) and c < len(claims[s])]
        decoded = decode_proofs([claims[s][c] for s, c in (group.owners[r] for r in rows)], k)
        for position, (reason, _) in decoded.errors.items():
            sample, chunk = group.owners[rows[position]]
            checks[sample][chunk] = _failed(reason, k)
        usable = np.asarray(rows, dtype=np.int64)[decoded.usable]
        compared = _compare(group.indices[usable], group.bits[usable], decoded.moduli, decoded.coeffs)
        for r, check in zip(usable.tolist(), compared, strict=True):
            sample, chunk = group.owners[r]
            checks[sample][chunk] = check
    return [[c for c in row if c is not None] for row in checks]


def _compare(indices: Int64Array, bits: Int64Array, moduli: Int64Array, coeffs: Int64Array) -> list[ChunkCheck]:
    """Evaluate a batch of proofs [u, k] at the verifier's indices [u, k] and compare the bits [u, k]."""
    if not len(indices):
        return []
    claimed = evaluate(coeffs, indices % moduli[:, None])  # the fix: reduce by the proof's modulus
    exp_match = (claimed & _EXP_MASK) == (bits & _EXP_MASK)
    mant_err = np.abs((claimed & _MANT_MASK) - (bits & _MANT_MASK))
    matches = exp_match.sum(axis=1)
    # Mismatched entries sort after every real error (< 128), leaving the matches in front.
    ordered = np.sort(np.where(exp_match, mant_err, np.iinfo(np.int64).max), axis=1)
    sums = np.where(exp_match, mant_err, 0).sum(axis=1)
    medians = ordered[np.arange(len(ordered)), matches // 2]
    k = indices.shape[1]
    return [
        ChunkCheck(exp_mismatches=k - n, mant_err_mean=float(total) / n, mant_err_median=float(median))
        if n
        else ChunkCheck(exp_mismatches=k, mant_err_mean=NO_MATCH, mant_err_median=NO_MATCH)
        for n, total, median in zip(matches.tolist(), sums.tolist(), medians.tolist(), strict=True)
    ]


def toploc_verdict(
    checks: Sequence[ChunkCheck],
    max_exp_mismatches: int = MAX_EXP_MISMATCHES,
    max_mant_err_mean: float = MAX_MANT_ERR_MEAN,
    max_mant_err_median: float = MAX_MANT_ERR_MEDIAN,
) -> tuple[bool, ToplocReason | None]:
    """Accept or reject one sample's proofs; the reason code names the first failing rule.

    Rules in order: every proof present and no extra one (`proof_count_mismatch`), every proof
    well-formed (`proof_malformed`), exponent mismatches within bound (`toploc_exp_mismatch`),
    mantissa mean and median within bound (`toploc_mantissa`). Bounds are inclusive. No checks
    (an empty completion with no proofs) is accepted: there is nothing to disagree with, and
    completion length is judged elsewhere.
    """
    if any(c.error in _COUNT_ERRORS for c in checks):
        return False, "proof_count_mismatch"
    if any(c.error is not None for c in checks):
        return False, "proof_malformed"
    if any(c.exp_mismatches > max_exp_mismatches for c in checks):
        return False, "toploc_exp_mismatch"
    if any(c.mant_err_mean > max_mant_err_mean or c.mant_err_median > max_mant_err_median for c in checks):
        return False, "toploc_mantissa"
    return True, None
