"""Building TOPLOC proofs and their byte format.

Byte-compatible with the reference library's format: per chunk of `chunk_size` decode tokens,
proof = modulus m (uint16 big-endian) + the interpolated polynomial's coefficients in ascending
powers (uint16 big-endian each), i.e. 258 bytes at topk = 128.

Differences from the reference on purpose: fp16/fp32 input is cast to bf16 instead of crashing or
proofing the wrong bits; a build error raises `ToplocError` instead of silently returning all-zero
"null" proofs with modulus 0; a chunk with fewer than `topk` entries proofs all of them (the
reference crashes on it and returns null proofs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import torch

from proofpool.toploc.field import PRIME, Int64Array, ToplocError, find_injective_modulus, interpolate

DEFAULT_CHUNK_SIZE: Final = 32
"""Decode tokens per proof (the reference's `decode_batching_size`)."""
DEFAULT_TOPK: Final = 128
"""Largest-|value| activations committed to per chunk."""
_WORD: Final = 2
"""Bytes per field element on the wire (the modulus and each coefficient)."""


FormatReason = Literal["proof_not_bytes", "proof_wrong_length", "proof_bad_modulus", "proof_bad_coefficient"]


class ProofFormatError(ToplocError):
    """A proof's bytes cannot be used; `reason` is the `ChunkCheck.error` code."""

    def __init__(self, reason: FormatReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: FormatReason = reason


@dataclass(frozen=True)
class Proof:
    """A decoded proof: the modulus applied to flat indices and the polynomial's coefficients."""

    modulus: int
    coeffs: tuple[int, ...]
    """Ascending powers, each in [0, PRIME)."""


@dataclass(frozen=True)
class ChunkEntries:
    """One chunk's top-k activations: where they are and what they hold."""

    indices: Int64Array
    """int64 [k]: positions in the chunk flattened row-major, in torch.topk order."""
    bits: Int64Array
    """int64 [k]: the bf16 bit patterns (0..65535) of the values at those positions."""


def to_bf16(activations: torch.Tensor) -> torch.Tensor:
    """The activations as a contiguous 2-D bf16 tensor [tokens, hidden] on the CPU.

    Proofs commit to bf16 bits, so fp16/fp32 input (a PyTorch prefill, a model run in fp32) is
    rounded to bf16 explicitly; the reference read fp16 bits as if they were bf16.
    """
    if not isinstance(activations, torch.Tensor):
        raise ToplocError(f"activations must be a torch.Tensor, not {type(activations).__name__}")
    if activations.dim() != 2:
        raise ToplocError(f"activations must be 2-D [tokens, hidden], got shape {tuple(activations.shape)}")
    if not activations.is_floating_point():
        raise ToplocError(f"activations must be floating point, got {activations.dtype}")
    if activations.shape[0] and activations.shape[1] == 0:
        raise ToplocError("activations have hidden size 0")
    return activations.detach().to(device="cpu", dtype=torch.bfloat16).contiguous()


def chunk_entries(activations: torch.Tensor, chunk_size: int, topk: int) -> list[ChunkEntries]:
    """Top-`topk` |value| entries of each chunk of `chunk_size` rows of bf16 activations.

    Full chunks go through one batched `topk`; a shorter last chunk is done on its own. Ties are
    broken by torch's CPU `topk` on the bf16 magnitudes, exactly as the reference does, which the
    vectors pin down. A chunk with fewer than `topk` entries contributes all of them.
    """
    if chunk_size < 1 or topk < 1:
        raise ToplocError(f"chunk_size ({chunk_size}) and topk ({topk}) must be >= 1")
    tokens, hidden = activations.shape
    full = tokens // chunk_size
    out: list[ChunkEntries] = []
    if full:
        flat = activations[: full * chunk_size].reshape(full, chunk_size * hidden)
        out.extend(_batched_entries(flat, topk))
    if tokens > full * chunk_size:
        flat = activations[full * chunk_size :].reshape(1, -1)
        out.extend(_batched_entries(flat, topk))
    return out


def _batched_entries(flat: torch.Tensor, topk: int) -> list[ChunkEntries]:
    """Per row of a [chunks, entries] bf16 tensor: the top-k |value| indices and their bits."""
    k = min(topk, flat.shape[1])
    indices = flat.abs().topk(k, dim=1).indices  # [chunks, k]
    values = flat.gather(1, indices)
    bits = values.view(torch.int16).numpy().astype(np.int64) & 0xFFFF
    idx = indices.numpy().astype(np.int64)
    return [ChunkEntries(indices=idx[i], bits=bits[i]) for i in range(flat.shape[0])]


def proof_length(n_entries: int) -> int:
    """Bytes of a proof over `n_entries` points: the modulus plus one word per coefficient."""
    return _WORD * (1 + n_entries)


def expected_proof_lengths(
    n_tokens: int, hidden: int, chunk_size: int = DEFAULT_CHUNK_SIZE, topk: int = DEFAULT_TOPK
) -> list[int]:
    """Length of each proof a completion of `n_tokens` x `hidden` activations must carry."""
    lengths = []
    for start in range(0, n_tokens, chunk_size):
        rows = min(chunk_size, n_tokens - start)
        lengths.append(proof_length(min(topk, rows * hidden)))
    return lengths


def encode_proof(modulus: int, coeffs: Sequence[int] | Int64Array) -> bytes:
    """The wire form: modulus then coefficients, each a big-endian uint16."""
    words = np.concatenate([[modulus], np.asarray(coeffs, dtype=np.int64)])
    if words.min(initial=0) < 0 or words.max(initial=0) > 0xFFFF:
        raise ToplocError("modulus and coefficients must fit in uint16")
    return words.astype(">u2").tobytes()


def decode_proof(data: object, n_entries: int) -> Proof:
    """Parse and bound-check one proof that must cover `n_entries` points.

    Raises:
        ProofFormatError: with `reason` one of `proof_not_bytes`, `proof_wrong_length`,
            `proof_bad_modulus` (0, above PRIME, or below the point count, which no honest
            builder produces), `proof_bad_coefficient` (>= PRIME).
    """
    if not isinstance(data, bytes | bytearray | memoryview):
        raise ProofFormatError("proof_not_bytes", f"got {type(data).__name__}")
    raw = bytes(data)
    if len(raw) != proof_length(n_entries):
        raise ProofFormatError("proof_wrong_length", f"{len(raw)} bytes, expected {proof_length(n_entries)}")
    words = np.frombuffer(raw, dtype=">u2").astype(np.int64)
    modulus = int(words[0])
    if not max(n_entries, 1) <= modulus <= PRIME:
        raise ProofFormatError("proof_bad_modulus", f"modulus {modulus} outside [{max(n_entries, 1)}, {PRIME}]")
    coeffs = words[1:]
    if coeffs.size and int(coeffs.max()) >= PRIME:
        raise ProofFormatError("proof_bad_coefficient", f"coefficient {int(coeffs.max())} >= {PRIME}")
    return Proof(modulus=modulus, coeffs=tuple(int(c) for c in coeffs))


def build_proofs(
    activations: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE, topk: int = DEFAULT_TOPK
) -> list[bytes]:
    """One proof per chunk of `chunk_size` decode tokens of last hidden states [tokens, hidden].

    Raises:
        ToplocError: activations not 2-D floating point, or not finite (a proof over NaNs would
            commit to bits no honest recomputation reproduces).
    """
    acts = to_bf16(activations)
    if not bool(torch.isfinite(acts).all()):
        raise ToplocError("activations contain NaN or infinity")
    entries = chunk_entries(acts, chunk_size, topk)
    proofs: list[bytes] = []
    for group in _same_size_runs(entries):
        moduli = np.array([find_injective_modulus(e.indices) for e in group], dtype=np.int64)
        xs = np.stack([e.indices for e in group]) % moduli[:, None]
        coeffs = interpolate(xs, np.stack([e.bits for e in group]))
        proofs.extend(encode_proof(int(m), c) for m, c in zip(moduli, coeffs, strict=True))
    return proofs


def _same_size_runs(entries: list[ChunkEntries]) -> list[list[ChunkEntries]]:
    """Consecutive chunks with the same entry count (all but possibly the last), kept in order."""
    runs: list[list[ChunkEntries]] = []
    for e in entries:
        if runs and runs[-1][0].indices.size == e.indices.size:
            runs[-1].append(e)
        else:
            runs.append([e])
    return runs


def join_proofs(proofs: Sequence[bytes]) -> bytes:
    """A sample's proofs as the one `proofs` blob of its rollout row."""
    return b"".join(proofs)


def split_proofs(
    blob: object, n_tokens: int, hidden: int, chunk_size: int = DEFAULT_CHUNK_SIZE, topk: int = DEFAULT_TOPK
) -> list[object]:
    """Cut a rollout row's `proofs` blob into the proofs its completion should carry.

    Never raises on hostile input: a short blob yields truncated or missing pieces, a long one a
    trailing extra piece, a non-bytes value is passed through as the only "proof"; `verify_proofs`
    then reports them as `proof_wrong_length`, `proof_missing`, `proof_extra`, `proof_not_bytes`.
    """
    if not isinstance(blob, bytes | bytearray | memoryview):
        return [blob]
    raw = bytes(blob)
    pieces: list[object] = []
    offset = 0
    for length in expected_proof_lengths(n_tokens, hidden, chunk_size, topk):
        if offset >= len(raw):
            break
        pieces.append(raw[offset : offset + length])
        offset += length
    if offset < len(raw):
        pieces.append(raw[offset:])
    return pieces
