"""Building TOPLOC proofs and their byte format.

Byte-compatible with the reference library's format: per chunk of `chunk_size` decode tokens,
proof = modulus m (uint16 big-endian) + the interpolated polynomial's coefficients in ascending
powers (uint16 big-endian each), i.e. 258 bytes at topk = 128.

Proofs are built for many samples at once (`build_proofs_batch`): every chunk of every sample
goes through one `topk` per chunk size and one interpolation per point count, so a worker pays
the fixed costs once per generation call instead of once per sample. `build_proofs` is the same
code for one sample.

Differences from the reference on purpose: fp16/fp32 input is cast to bf16 instead of crashing or
proofing the wrong bits; a build error raises `ToplocError` instead of silently returning all-zero
"null" proofs with modulus 0; a chunk with fewer than `topk` entries proofs all of them (the
reference crashes on it and returns null proofs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
import torch

from proofpool.core.toploc.field import PRIME, Int64Array, ToplocError, find_injective_moduli, interpolate

DEFAULT_CHUNK_SIZE: Final = 32
"""Decode tokens per proof (the reference's `decode_batching_size`)."""
DEFAULT_TOPK: Final = 128
"""Largest-|value| activations committed to per chunk."""
_WORD: Final = 2
"""Bytes per field element on the wire (the modulus and each coefficient)."""
_EXP_BITS: Final = 0x7F80
"""bf16 exponent bits; all set means infinity or NaN."""
_TOPK_BATCH_ENTRIES: Final = 1 << 24
"""Activations (bf16) concatenated for one `topk` call at most: 32 MB, so batching many long
samples does not double the memory their activations already take."""


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
class ChunkGroup:
    """Chunks with the same number of top-k entries, from any samples, handled as one batch."""

    owners: tuple[tuple[int, int], ...]
    """(sample, chunk) of each row."""
    indices: Int64Array
    """int64 [rows, k]: positions in each chunk flattened row-major (torch.topk's set, in no set order)."""
    bits: Int64Array
    """int64 [rows, k]: the bf16 bit patterns (0..65535) of the values at those positions."""


@dataclass(frozen=True)
class DecodedProofs:
    """A batch of proofs over the same number of points: the usable ones and why the others are not."""

    usable: Int64Array
    """int64 [u]: positions (in the decoded sequence) of the well-formed proofs."""
    moduli: Int64Array
    """int64 [u]: their moduli, each in [max(points, 1), PRIME]."""
    coeffs: Int64Array
    """int64 [u, points]: their coefficients, ascending powers, each in [0, PRIME)."""
    errors: dict[int, tuple[FormatReason, str]] = field(default_factory=dict)
    """Position -> (reason, detail) of every unusable proof."""


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
    if activations.dtype == torch.bfloat16 and activations.device.type == "cpu" and activations.is_contiguous():
        return activations.detach()  # the common case, with no copy
    return activations.detach().to(device="cpu", dtype=torch.bfloat16).contiguous()


def chunk_count(n_tokens: int, chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
    """Proofs a completion of `n_tokens` carries (the last chunk may be shorter)."""
    return -(-n_tokens // chunk_size)


def chunk_groups(
    activations: Sequence[torch.Tensor], chunk_size: int, topk: int, *, require_finite: bool = False
) -> list[ChunkGroup]:
    """Top-`topk` |value| entries of every chunk of `chunk_size` rows of every sample's bf16 activations.

    Chunks with the same number of entries (rows x hidden) go through one batched `topk` (ties
    broken by torch's CPU `topk` on the bf16 magnitudes, exactly as the reference does, row by
    row, which the vectors pin down); groups are then merged by their number of points k, so
    each k is one batch downstream. A chunk with fewer than `topk` entries contributes all of them.
    `sorted=False` selects the same set as the reference's sorted call (the sort only orders the
    selection; a test pins this on tie-heavy input) and nothing downstream depends on the order.

    Raises:
        ToplocError: bad `chunk_size`/`topk`, or (with `require_finite`) NaN or infinite activations.
    """
    if chunk_size < 1 or topk < 1:
        raise ToplocError(f"chunk_size ({chunk_size}) and topk ({topk}) must be >= 1")
    pieces: dict[int, list[tuple[torch.Tensor, list[tuple[int, int]]]]] = {}  # entries -> [chunks, entries]
    tails: dict[tuple[int, int], list[tuple[torch.Tensor, tuple[int, int]]]] = {}  # short last chunks by shape
    for sample, acts in enumerate(activations):
        tokens = acts.shape[0]
        full = tokens // chunk_size
        if full:
            flat = acts[: full * chunk_size].reshape(full, -1)
            pieces.setdefault(flat.shape[1], []).append((flat, [(sample, c) for c in range(full)]))
        if tokens > full * chunk_size:
            tail = acts[full * chunk_size :] if full else acts
            tails.setdefault(tuple(tail.shape), []).append((tail, (sample, full)))
    for (rows, hidden), items in tails.items():  # one copy per shape instead of one view per sample
        step = max(1, _TOPK_BATCH_ENTRIES // (rows * hidden))
        for start in range(0, len(items), step):
            part = items[start : start + step]
            stacked = torch.stack([t for t, _ in part]).reshape(len(part), rows * hidden)
            pieces.setdefault(rows * hidden, []).append((stacked, [owner for _, owner in part]))
    by_points: dict[int, list[tuple[list[tuple[int, int]], Int64Array, Int64Array]]] = {}
    for entries, parts in pieces.items():
        k = min(topk, entries)
        for batch in _bounded_batches(parts, max(1, _TOPK_BATCH_ENTRIES // entries)):
            flat = torch.cat([t for t, _ in batch]) if len(batch) > 1 else batch[0][0]
            owners = [o for _, chunk_owners in batch for o in chunk_owners]
            indices = flat.abs().topk(k, dim=1, sorted=False).indices  # [chunks, k]
            bits = flat.gather(1, indices).view(torch.int16).numpy().astype(np.int64) & 0xFFFF
            if require_finite:
                _check_finite(bits, owners)
            by_points.setdefault(k, []).append((owners, indices.numpy().astype(np.int64), bits))
    return [
        ChunkGroup(
            owners=tuple(o for owners, _, _ in parts for o in owners),
            indices=np.concatenate([i for _, i, _ in parts]),
            bits=np.concatenate([b for _, _, b in parts]),
        )
        for parts in by_points.values()
    ]


def _bounded_batches(
    parts: list[tuple[torch.Tensor, list[tuple[int, int]]]], max_chunks: int
) -> list[list[tuple[torch.Tensor, list[tuple[int, int]]]]]:
    """Consecutive parts grouped so a batch holds about `max_chunks` chunks (at least one part)."""
    batches: list[list[tuple[torch.Tensor, list[tuple[int, int]]]]] = []
    size = max_chunks
    for part in parts:
        if size + part[0].shape[0] > max_chunks:
            batches.append([])
            size = 0
        batches[-1].append(part)
        size += part[0].shape[0]
    return batches


def _check_finite(bits: Int64Array, owners: list[tuple[int, int]]) -> None:
    """A proof over NaNs would commit to bits no honest recomputation reproduces.

    Checking the top-k suffices: torch's `topk` ranks NaN above every number and |inf| is the
    largest magnitude, so a chunk with any non-finite entry has one among its top-k (a test pins
    this). Non-finite bf16 values are those whose exponent bits are all ones.
    """
    bad = ((bits & _EXP_BITS) == _EXP_BITS).any(axis=1)
    if bad.any():
        sample, chunk = owners[int(np.flatnonzero(bad)[0])]
        raise ToplocError(f"activations of sample {sample} contain NaN or infinity (chunk {chunk})")


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


def encode_proofs(moduli: Int64Array, coeffs: Int64Array) -> list[bytes]:
    """The wire form of a batch: per row, the modulus then the coefficients, big-endian uint16 each."""
    words = np.concatenate([np.asarray(moduli, dtype=np.int64)[:, None], np.asarray(coeffs, dtype=np.int64)], axis=1)
    if words.size and (int(words.min()) < 0 or int(words.max()) > 0xFFFF):
        raise ToplocError("modulus and coefficients must fit in uint16")
    raw = words.astype(">u2").tobytes()
    size = _WORD * words.shape[1]
    return [raw[i * size : (i + 1) * size] for i in range(words.shape[0])]


def encode_proof(modulus: int, coeffs: Sequence[int] | Int64Array) -> bytes:
    """`encode_proofs` for one proof."""
    return encode_proofs(np.array([modulus]), np.asarray(coeffs, dtype=np.int64).reshape(1, -1))[0]


def decode_proofs(data: Sequence[object], n_entries: int) -> DecodedProofs:
    """Parse and bound-check proofs that must each cover `n_entries` points; never raises on them.

    Unusable proofs are reported by reason: `proof_not_bytes`, `proof_wrong_length`,
    `proof_bad_modulus` (0, above PRIME, or below the point count, which no honest builder
    produces), `proof_bad_coefficient` (>= PRIME); the first rule broken wins, in that order.
    """
    length = proof_length(n_entries)
    errors: dict[int, tuple[FormatReason, str]] = {}
    positions: list[int] = []
    raws: list[bytes] = []
    for i, item in enumerate(data):
        if not isinstance(item, bytes | bytearray | memoryview):
            errors[i] = ("proof_not_bytes", f"got {type(item).__name__}")
            continue
        raw = bytes(item)
        if len(raw) != length:
            errors[i] = ("proof_wrong_length", f"{len(raw)} bytes, expected {length}")
            continue
        positions.append(i)
        raws.append(raw)
    words = np.frombuffer(b"".join(raws), dtype=">u2").astype(np.int64).reshape(len(raws), n_entries + 1)
    moduli, coeffs = words[:, 0], words[:, 1:]
    lowest = max(n_entries, 1)
    bad_modulus = (moduli < lowest) | (moduli > PRIME)
    top = coeffs.max(axis=1) if n_entries else np.zeros(len(raws), dtype=np.int64)
    bad_coeff = ~bad_modulus & (top >= PRIME)
    for row in np.flatnonzero(bad_modulus):
        errors[positions[row]] = ("proof_bad_modulus", f"modulus {moduli[row]} outside [{lowest}, {PRIME}]")
    for row in np.flatnonzero(bad_coeff):
        errors[positions[row]] = ("proof_bad_coefficient", f"coefficient {top[row]} >= {PRIME}")
    keep = ~(bad_modulus | bad_coeff)
    return DecodedProofs(
        usable=np.asarray(positions, dtype=np.int64)[keep], moduli=moduli[keep], coeffs=coeffs[keep], errors=errors
    )


def decode_proof(data: object, n_entries: int) -> Proof:
    """`decode_proofs` for one proof.

    Raises:
        ProofFormatError: with the reason `decode_proofs` reports.
    """
    decoded = decode_proofs([data], n_entries)
    if decoded.errors:
        raise ProofFormatError(*decoded.errors[0])
    return Proof(modulus=int(decoded.moduli[0]), coeffs=tuple(int(c) for c in decoded.coeffs[0]))


def build_proofs_batch(
    activations: Sequence[torch.Tensor], chunk_size: int = DEFAULT_CHUNK_SIZE, topk: int = DEFAULT_TOPK
) -> list[list[bytes]]:
    """Per sample, one proof per chunk of `chunk_size` decode tokens of its last hidden states
    [tokens_i, hidden]; all chunks of all samples are proven in one vectorized pass.

    Raises:
        ToplocError: activations not 2-D floating point, or not finite (a proof over NaNs would
            commit to bits no honest recomputation reproduces).
    """
    acts = [to_bf16(a) for a in activations]
    proofs: list[list[bytes]] = [[b""] * chunk_count(a.shape[0], chunk_size) for a in acts]
    for group in chunk_groups(acts, chunk_size, topk, require_finite=True):
        moduli = find_injective_moduli(group.indices)
        coeffs = interpolate(group.indices % moduli[:, None], group.bits)
        for (sample, chunk), proof in zip(group.owners, encode_proofs(moduli, coeffs), strict=True):
            proofs[sample][chunk] = proof
    return proofs


def build_proofs(
    activations: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE, topk: int = DEFAULT_TOPK
) -> list[bytes]:
    """`build_proofs_batch` for one sample's activations [tokens, hidden]."""
    return build_proofs_batch([activations], chunk_size, topk)[0]


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
