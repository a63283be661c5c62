"""Seeded Gumbel-max sampling: the worker's sampler and the validator's reference for it.

Sampling token i of a completion is `argmax(logits / T + g)` where g is standard Gumbel noise
fixed by (sampling_seed, sample_index, position, token id). Given the same logits, anyone can
therefore recompute which token had to be chosen, whatever the batch it was generated in.

The noise is counter-based, so no generator state exists (protocol constants, do not change):

    step(z)     = fmix64(z + GOLDEN)            # one splitmix64 output (fmix64 below)
    row_key     = step(step(step(seed) ^ sample_index) ^ position)
    bits(token) = step(row_key + token * GOLDEN)  # the (token+1)-th splitmix64 output from row_key
    u           = ((bits >> 12) + 0.5) / 2**52   # 52 bits, strictly inside (0, 1)
    g           = -log(-log(u))                  # float64, then rounded to float32

All integer steps are mod 2**64 and bit-exact on every machine. Only 52 bits feed u (not 53):
(k + 0.5) / 2**52 is exact in float64 for every 52-bit k, whereas a 53-bit k + 0.5 rounds the top
value to u = 1 and g = inf. The two logs are float64 logs, and which log computes them depends
on the path: the compiled kernels (`gumbel_kernel`, used by `sample_tokens`, `score_blocks`,
`batch_score_blocks`, `scores` and `gumbel_noise`) call the C library's `log` (glibc's on Linux,
which itself picks an FMA or a plain variant by CPU), and the numpy reference
(`reference_scores`, `reference_sample_tokens`) calls numpy's float64 log, which is that same libm
`log` on CPUs without AVX-512 (bit-identical to the kernels there, tested) and numpy's own SIMD
log on AVX-512 CPUs. Any two of these may differ in the last ulp of g before rounding to float32;
that almost never survives the rounding, and the verifier's tie tolerance absorbs it when it does.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from typing import Final

import numpy as np
import numpy.typing as npt
import torch

from proofpool.core.sampling.gumbel_kernel import (
    GOLDEN,
    MIX1,
    MIX2,
    argmax_rows,
    noise_rows,
    row_keys,
    score_rows,
    stream_keys,
)
from proofpool.core.sampling.gumbel_kernel import bounds as _bounds

_U64: Final = (1 << 64) - 1
_MIX1: Final = np.uint64(MIX1)
_MIX2: Final = np.uint64(MIX2)
_BLOCK_ELEMENTS: Final = 1 << 18
"""Elements per block of noise. numpy, single-threaded, in place on 2 MB buffers that stay in
cache: ~0.25 s for [256, 152000] on this 2-core CPU, and steady when other processes load the
cores (torch's intra-op threads took 0.2 s idle but 1-8 s under contention, stalling at every
per-op barrier). Validators run several processes per machine, so steady wins."""

U64Array = npt.NDArray[np.uint64]


def _fmix64_(z: U64Array, scratch: U64Array) -> U64Array:
    """splitmix64's finalizer, in place (uint64 arithmetic wraps mod 2**64, shifts are logical)."""
    for shift, multiplier in ((30, _MIX1), (27, _MIX2), (31, None)):
        np.right_shift(z, np.uint64(shift), out=scratch)
        np.bitwise_xor(z, scratch, out=z)
        if multiplier is not None:
            np.multiply(z, multiplier, out=z)
    return z


def _check_stream(seed: int, sample_index: int) -> None:
    if not 0 <= seed <= _U64:
        raise ValueError(f"seed must be a uint64, got {seed}")
    if not 0 <= sample_index <= _U64:
        raise ValueError(f"sample_index must be >= 0, got {sample_index}")


def _stream_keys(seeds: Sequence[int], sample_indices: Sequence[int]) -> U64Array:
    """uint64 [streams]: step(step(seed) ^ sample_index), the key of each (seed, sample) stream."""
    for seed, index in zip(seeds, sample_indices, strict=True):
        _check_stream(seed, index)
    return stream_keys(np.array(seeds, dtype=np.uint64), np.array(sample_indices, dtype=np.uint64))


def _positions(positions: torch.Tensor) -> npt.NDArray[np.int64]:
    pos_tensor = torch.as_tensor(positions).reshape(-1).cpu()
    if pos_tensor.is_floating_point() or pos_tensor.is_complex():
        raise ValueError(f"positions must be integers, got {pos_tensor.dtype}")
    pos = pos_tensor.numpy().astype(np.int64)
    if pos.size and int(pos.min()) < 0:
        raise ValueError("positions must be >= 0")
    return pos


def _row_keys(streams: U64Array, positions: npt.NDArray[np.int64]) -> U64Array:
    """uint64 [rows]: step(stream_key ^ position) per row (stream keys given per row)."""
    return row_keys(np.ascontiguousarray(streams), np.ascontiguousarray(positions, dtype=np.int64))


def _sample_keys(seed: int, sample_index: int, positions: torch.Tensor) -> U64Array:
    """uint64 [n]: the per-(seed, sample, position) row keys of one sample."""
    pos = _positions(positions)
    return _row_keys(np.repeat(_stream_keys([seed], [sample_index]), pos.size), pos)


def _noise_blocks(keys: U64Array, vocab_size: int) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
    """Yield (first row, float32 [rows, vocab] noise) for the row keys, in cache-sized blocks of rows.

    Each yielded array is a reused buffer, valid until the next iteration.
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    with np.errstate(over="ignore"):
        # step(key + token * GOLDEN) = fmix64(key + (token + 1) * GOLDEN): fold the increment in.
        offsets = (np.arange(vocab_size, dtype=np.uint64) + np.uint64(1)) * np.uint64(GOLDEN)
    block = max(1, min(keys.size, _BLOCK_ELEMENTS // vocab_size))
    z = np.empty((block, vocab_size), dtype=np.uint64)
    scratch = np.empty_like(z)
    u = np.empty((block, vocab_size), dtype=np.float64)
    noise = np.empty((block, vocab_size), dtype=np.float32)
    for start in range(0, keys.size, block):
        rows = min(block, keys.size - start)
        zb, sb, ub = z[:rows], scratch[:rows], u[:rows]
        np.add(keys[start : start + rows, None], offsets[None, :], out=zb)
        _fmix64_(zb, sb)
        np.right_shift(zb, np.uint64(12), out=sb)
        ub[...] = sb  # < 2**52: exact in float64
        ub += 0.5
        ub *= 2.0**-52
        np.log(ub, out=ub)
        np.negative(ub, out=ub)
        np.log(ub, out=ub)
        np.negative(ub, out=ub)
        np.copyto(noise[:rows], ub, casting="same_kind")  # round to float32
        yield start, noise[:rows]


def gumbel_noise(seed: int, sample_index: int, positions: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """float32 [len(positions), vocab_size]: deterministic standard Gumbel noise from a counter-based
    hash of (seed uint64, sample_index, position, token id); identical on every machine and in every
    batch composition.

    `position` is the 0-based index of the token within the completion; `sample_index` is the
    row index of the sample within its rollout file.
    """
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    keys = _sample_keys(seed, sample_index, positions)
    out = np.empty((keys.size, vocab_size), dtype=np.float32)
    noise_rows(keys, out)
    return torch.from_numpy(out)


class _Rows:
    """The rows of several float32 [n_i, vocab] arrays read as one sequence, block by block."""

    def __init__(self, parts: Sequence[npt.NDArray[np.float32]]) -> None:
        self._parts = [p for p in parts if p.shape[0]]
        self._starts = [0, *accumulate(p.shape[0] for p in self._parts)]

    def take(self, start: int, stop: int) -> npt.NDArray[np.float32]:
        """Rows start..stop-1: a view when they lie in one array, else a copy of the pieces."""
        first = bisect_right(self._starts, start) - 1
        offset = self._starts[first]
        if stop <= self._starts[first + 1]:
            return self._parts[first][start - offset : stop - offset]
        pieces = []
        for part, lo in zip(self._parts[first:], self._starts[first:-1], strict=True):
            if lo >= stop:
                break
            pieces.append(part[max(start - lo, 0) : stop - lo])
        return np.concatenate(pieces)


def _score_blocks(
    rows: _Rows,
    vocab_size: int,
    divisors: npt.NDArray[np.float32],
    greedy: npt.NDArray[np.bool_] | None,
    keys: U64Array,
) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
    """Yield (first row, float32 [rows, vocab] perturbed scores): per row `logits / divisor + noise`,
    each a correctly rounded float32 operation, or the logits themselves where `greedy` (temperature
    0; None: no such row). Yielded arrays may be reused buffers, valid until the next iteration.

    The fused kernel (`gumbel_kernel.score_rows`); `_score_blocks_numpy` is its numpy reference."""
    if greedy is not None and greedy.all():
        yield from _greedy_blocks(rows, vocab_size, keys.size)
        return
    step = max(1, _BLOCK_ELEMENTS // vocab_size)
    flags = np.zeros(keys.size, dtype=np.bool_) if greedy is None else greedy
    out = np.empty((min(step, keys.size), vocab_size), dtype=np.float32)
    for start in range(0, keys.size, step):
        stop = min(keys.size, start + step)
        block = out[: stop - start]
        base = np.ascontiguousarray(rows.take(start, stop))
        score_rows(base, keys[start:stop], divisors[start:stop], flags[start:stop], block)
        yield start, block


def _greedy_blocks(rows: _Rows, vocab_size: int, n_rows: int) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
    """The blocks of a batch whose every row is greedy (temperature 0): the logits, unperturbed."""
    step = max(1, _BLOCK_ELEMENTS // vocab_size)
    for start in range(0, n_rows, step):
        yield start, rows.take(start, min(n_rows, start + step))


def _score_blocks_numpy(
    rows: _Rows,
    vocab_size: int,
    divisors: npt.NDArray[np.float32],
    greedy: npt.NDArray[np.bool_] | None,
    keys: U64Array,
) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
    """`_score_blocks` in numpy, one operation per pass over a block (the reference definition)."""
    if greedy is not None and greedy.all():
        yield from _greedy_blocks(rows, vocab_size, keys.size)
        return
    out: npt.NDArray[np.float32] | None = None
    for start, noise in _noise_blocks(keys, vocab_size):
        if out is None:
            out = np.empty_like(noise)
        stop = start + noise.shape[0]
        base = rows.take(start, stop)
        block = out[: noise.shape[0]]
        np.divide(base, divisors[start:stop, None], out=block)
        block += noise
        if greedy is not None:
            exact = greedy[start:stop]
            block[exact] = base[exact]
        yield start, block


def score_blocks(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
    """Yield (first row, float32 [rows, vocab] perturbed scores) block by block, so a verifier can
    reduce a long completion without holding all its noise at once.

    Scores are `float32(logits) / float32(temperature) + noise`, each operation a correctly
    rounded float32 operation (no multiplication by a reciprocal). Each yielded array is a reused
    buffer, valid until the next iteration.
    """
    yield from _sample_score_blocks(_score_blocks, logits, temperature, seed, sample_index, positions)


def _sample_rows(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> tuple[npt.NDArray[np.float32], U64Array, npt.NDArray[np.float32]]:
    """Checked inputs of one sample: (float32 [n, vocab] logits, uint64 [n] row keys, float32 [n]
    divisors: the temperature rounded to float32, 1 where it is 0)."""
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [n, vocab], got shape {tuple(logits.shape)}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    n = torch.as_tensor(positions).numel()
    if n != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} rows of logits but {n} positions")
    keys = _sample_keys(seed, sample_index, positions)
    if logits.shape[1] < 1:
        raise ValueError(f"vocab_size must be >= 1, got {logits.shape[1]}")
    rows = logits.detach().to(device="cpu", dtype=torch.float32).numpy()
    return rows, keys, np.full(n, temperature if temperature != 0 else 1.0, dtype=np.float32)


def _sample_score_blocks(
    blocks: Callable[..., Iterator[tuple[int, npt.NDArray[np.float32]]]],
    logits: torch.Tensor,
    temperature: float,
    seed: int,
    sample_index: int,
    positions: torch.Tensor,
) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
    rows, keys, divisors = _sample_rows(logits, temperature, seed, sample_index, positions)
    greedy = np.ones(keys.size, bool) if temperature == 0 else None
    yield from blocks(_Rows([rows]), logits.shape[1], divisors, greedy, keys)


def batch_score_blocks(
    logits: Sequence[torch.Tensor],
    temperatures: Sequence[float],
    seeds: Sequence[int],
    sample_indices: Sequence[int],
) -> Iterator[tuple[int, npt.NDArray[np.float32]]]:
    """`score_blocks` for many samples at once, sample i at positions 0..n_i-1 of its own stream:
    yield (first row, float32 [rows, vocab] scores) over all rows in order (sample 0's rows, then
    sample 1's, ...). One noise computation covers every sample, and blocks may span samples.

    All samples share one vocabulary (one model); ValueError otherwise.
    """
    if not len(logits) == len(temperatures) == len(seeds) == len(sample_indices):
        raise ValueError("logits, temperatures, seeds and sample_indices must have one entry per sample")
    if any(t.dim() != 2 for t in logits):
        raise ValueError("logits must be 2-D [n, vocab] per sample")
    if any(t < 0 for t in temperatures):
        raise ValueError(f"temperatures must be >= 0, got {min(temperatures)}")
    vocabs = {t.shape[1] for t in logits}
    if len(vocabs) > 1:
        raise ValueError(f"samples have different vocabulary sizes: {sorted(vocabs)}")
    if not logits:
        return
    vocab_size = vocabs.pop()
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    counts = np.array([t.shape[0] for t in logits], dtype=np.int64)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    positions = np.arange(int(counts.sum()), dtype=np.int64) - starts
    keys = _row_keys(np.repeat(_stream_keys(seeds, sample_indices), counts), positions)
    rows = _Rows([t.detach().to(device="cpu", dtype=torch.float32).numpy() for t in logits])
    greedy = np.repeat([t == 0 for t in temperatures], counts)
    divisors = np.repeat(np.array([t if t != 0 else 1.0 for t in temperatures], dtype=np.float32), counts)
    yield from _score_blocks(rows, vocab_size, divisors, greedy if greedy.any() else None, keys)


def scores(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> torch.Tensor:
    """float32 [n, vocab]: the perturbed scores `logits.float() / temperature + gumbel_noise(...)`
    whose argmax is the sampled token (`logits.float()` itself when temperature == 0)."""
    out = np.empty(tuple(logits.shape), dtype=np.float32)
    for start, block in score_blocks(logits, temperature, seed, sample_index, positions):
        out[start : start + block.shape[0]] = block
    return torch.from_numpy(out)


def sample_tokens(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> torch.Tensor:
    """int64 [n]: argmax(logits.float() / temperature + gumbel_noise(...)) per row; temperature == 0
    means plain argmax (the first maximal index on exact ties, as torch and numpy both do; the
    first NaN if a row has one, as numpy does).

    One fused pass per row (`gumbel_kernel.argmax_rows`), the same index as
    `reference_sample_tokens`; call `gumbel_kernel.warm_up()` at start to keep its one-off
    compile (or cache load) out of the first call."""
    rows, keys, divisors = _sample_rows(logits, temperature, seed, sample_index, positions)
    greedy = np.full(keys.size, temperature == 0)
    return torch.from_numpy(argmax_rows(np.ascontiguousarray(rows), keys, divisors, greedy, _bounds()))


def reference_scores(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> torch.Tensor:
    """`scores` computed by the numpy reference (`_score_blocks_numpy`), which the kernels match bit
    for bit; for tests and benchmarks."""
    out = np.empty(tuple(logits.shape), dtype=np.float32)
    for start, block in _sample_score_blocks(_score_blocks_numpy, logits, temperature, seed, sample_index, positions):
        out[start : start + block.shape[0]] = block
    return torch.from_numpy(out)


def reference_sample_tokens(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> torch.Tensor:
    """`sample_tokens` computed by the numpy reference: numpy's argmax of `reference_scores`."""
    reference = reference_scores(logits, temperature, seed, sample_index, positions).numpy()
    return torch.from_numpy(reference.argmax(axis=1))
