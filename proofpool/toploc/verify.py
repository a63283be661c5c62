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

from proofpool.toploc.field import evaluate
from proofpool.toploc.proof import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_TOPK,
    ChunkEntries,
    Proof,
    ProofFormatError,
    chunk_entries,
    decode_proof,
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


def verify_proofs(
    activations: torch.Tensor,
    proofs: object,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
) -> list[ChunkCheck]:
    """One `ChunkCheck` per chunk of the verifier's activations [tokens, hidden] (plus one per
    surplus proof), comparing them with the worker's `proofs` (a list of proof bytes).

    `proofs` comes from an untrusted file, so any value is accepted and judged; `activations`
    are the verifier's own, so a malformed tensor raises `ToplocError` (a verifier bug).
    """
    acts = to_bf16(activations)
    entries = chunk_entries(acts, chunk_size, topk)
    if not isinstance(proofs, list | tuple):
        return [_failed("proofs_not_a_list", e.indices.size) for e in entries] or [_failed("proofs_not_a_list", topk)]
    checks: list[ChunkCheck | None] = [None] * max(len(entries), len(proofs))
    usable: list[tuple[int, ChunkEntries, Proof]] = []
    for i in range(len(checks)):
        if i >= len(entries):
            checks[i] = _failed("proof_extra", topk)
        elif i >= len(proofs):
            checks[i] = _failed("proof_missing", entries[i].indices.size)
        else:
            try:
                usable.append((i, entries[i], decode_proof(proofs[i], entries[i].indices.size)))
            except ProofFormatError as exc:
                checks[i] = _failed(exc.reason, entries[i].indices.size)
    for group in _same_size_groups(usable):
        for (i, _, _), check in zip(group, _compare(group), strict=True):
            checks[i] = check
    return [c for c in checks if c is not None]


def verify_proof_blob(
    activations: torch.Tensor,
    blob: object,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    topk: int = DEFAULT_TOPK,
) -> list[ChunkCheck]:
    """`verify_proofs` for a rollout row's concatenated `proofs` column (a non-bytes value fails
    every chunk with `proof_not_bytes`)."""
    acts = to_bf16(activations)
    if not isinstance(blob, bytes | bytearray | memoryview):
        entries = chunk_entries(acts, chunk_size, topk)
        return [_failed("proof_not_bytes", e.indices.size) for e in entries] or [_failed("proof_not_bytes", topk)]
    return verify_proofs(acts, split_proofs(blob, acts.shape[0], acts.shape[1], chunk_size, topk), chunk_size, topk)


def _same_size_groups(
    usable: list[tuple[int, ChunkEntries, Proof]],
) -> list[list[tuple[int, ChunkEntries, Proof]]]:
    """Usable chunks grouped by entry count, so each group evaluates as one batch."""
    groups: dict[int, list[tuple[int, ChunkEntries, Proof]]] = {}
    for item in usable:
        groups.setdefault(item[1].indices.size, []).append(item)
    return list(groups.values())


def _compare(group: list[tuple[int, ChunkEntries, Proof]]) -> list[ChunkCheck]:
    """Evaluate a batch of proofs at the verifier's indices and compare the bits."""
    moduli = np.array([proof.modulus for _, _, proof in group], dtype=np.int64)
    coeffs = np.array([proof.coeffs for _, _, proof in group], dtype=np.int64)  # [B, k]
    indices = np.stack([e.indices for _, e, _ in group])  # [B, k]
    claimed = evaluate(coeffs, indices % moduli[:, None])  # the fix: reduce by the proof's modulus
    own = np.stack([e.bits for _, e, _ in group])
    exp_match = (claimed & _EXP_MASK) == (own & _EXP_MASK)
    mant_err = np.abs((claimed & _MANT_MASK) - (own & _MANT_MASK))
    matches = exp_match.sum(axis=1)
    # Mismatched entries sort after every real error (< 128), leaving the matches in front.
    ordered = np.sort(np.where(exp_match, mant_err, np.iinfo(np.int64).max), axis=1)
    sums = np.where(exp_match, mant_err, 0).sum(axis=1)
    checks = []
    for b in range(len(group)):
        n = int(matches[b])
        if n == 0:
            checks.append(ChunkCheck(exp_mismatches=indices.shape[1], mant_err_mean=NO_MATCH, mant_err_median=NO_MATCH))
            continue
        checks.append(
            ChunkCheck(
                exp_mismatches=indices.shape[1] - n,
                mant_err_mean=float(sums[b]) / n,
                mant_err_median=float(ordered[b, n // 2]),
            )
        )
    return checks


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
