"""The compiled kernels behind `gumbel`: the protocol's row keys, its noise, the float32 score and
the argmax, each row in one pass over its logits (`argmax_rows` for `sample_tokens`, `score_rows`
for the perturbed scores validators read, `noise_rows` for `gumbel_noise`).

Why compiled: the worker's logits processor samples one row per request per decode step, and in
numpy each step of the noise (hash, shift, convert, two logs, round, divide, add, argmax) is a
pass over a [vocab] temporary: 7.6 ms per token at vocab 151,936. Here one loop does every step
of a token while its operands sit in registers.

Bit-exact with the numpy reference (`gumbel._score_blocks_numpy`), operation for operation: the
splitmix64 steps in uint64 (wrapping), u = ((bits >> 12) + 0.5) * 2**-52 in float64,
g = -log(-log(u)) in float64 rounded to float32, then `float32(logit) / float32(T)` (one correctly
rounded float32 division) plus g (one float32 addition). No fastmath, so LLVM keeps every
rounding; numba's `math.log` is the C library's `log` (the same libm call numpy makes for float64
log on CPUs without AVX-512; this numba build has no SVML, so loops are not rewritten to a vector
log). `error_model="numpy"`: division by a zero divisor gives inf/nan as in numpy, never an exception.

The argmax skips the logs of tokens that cannot win. g grows with the 52-bit k = bits >> 12, so
`bounds()` holds, per 1/4096 of k's range, an upper bound of g (float64 g at the bucket's top, plus
a margin of 1e-6 + 1e-7 |g| that covers the float64 logs' error and float32 rounding). A token whose
`float32(logit / T) + bound` stays below the best score so far less one float32 spacing at it (in
float64, |best| <= 1e6 so the sum's own rounding is far below the margin) rounds, in float32, to
less than the best, so it can neither beat nor tie it (a tie would go to the lower index; the
exact comparison settles ties among the tokens evaluated). What is left is the hash and one
comparison for most tokens; the result is the same index as computing every score. Argmax
semantics are numpy's: the first NaN if any score is NaN (scores are NaN exactly where logit / T
is, g being finite), else the first maximal index; temperature 0 is the argmax of the logits.

Compiled on first use and cached in `__pycache__` next to this file (`cache=True`; numba
recompiles when this file changes). Measured on the shared 2-core x86_64 machine (2026-11-26):
5.7 s to compile all five kernels in a fresh cache and 0.47 s to load them from it in a new
process when idle; 37 s and 2.9 s under a load average of ~30. Either lands in the
first call unless `warm_up()` ran before: a worker should call it when it builds its sampler, not
leave it to its first decode step. `nogil` lets other threads run meanwhile.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Final

import numpy as np
import numpy.typing as npt
from numba import njit

GOLDEN: Final = 0x9E3779B97F4A7C15
"""splitmix64's increment (2**64 / golden ratio)."""
MIX1: Final = 0xBF58476D1CE4E5B9
MIX2: Final = 0x94D049BB133111EB
"""splitmix64's finalizer multipliers (protocol constants, do not change)."""

# numba turns uint64 mixed with int64 into float64: every integer constant here is a uint64.
_GOLDEN: Final = np.uint64(GOLDEN)
_MIX1: Final = np.uint64(MIX1)
_MIX2: Final = np.uint64(MIX2)
_S12: Final = np.uint64(12)
_S27: Final = np.uint64(27)
_S30: Final = np.uint64(30)
_S31: Final = np.uint64(31)
_BUCKET_SHIFT: Final = np.uint64(52)
"""bits >> 52: the top 12 bits of the 64, i.e. of k = bits >> 12, the bucket of `bounds()`."""
_BUCKETS: Final = 1 << 12
_TWO_M52: Final = 2.0**-52
_PRUNE_LIMIT: Final = 1e6
_ULP32: Final = 2.0**-23
"""|m| * 2**-23 is at least the float32 spacing just below m: a sum below m minus that rounds below
m in float32, so a pruned token can neither beat nor tie the best (a tie would go to a lower index)."""
"""Prune only while |best score| <= this: float64 sums near it round by < 1e-9, far below the margin."""


@njit(inline="always")
def _fmix64(z: np.uint64) -> np.uint64:
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


@njit(inline="always")
def _gumbel(bits: np.uint64) -> np.float32:
    """float32 standard Gumbel noise from one splitmix64 output (the module docstring's g)."""
    u = (np.float64(bits >> _S12) + 0.5) * _TWO_M52
    return np.float32(-math.log(-math.log(u)))


@njit(inline="always")
def _argmax_greedy(x: npt.NDArray[np.float32]) -> int:
    """numpy's argmax of one row: the first NaN, else the first maximal index."""
    best = 0
    top = x[0]
    if top != top:
        return 0
    for j in range(1, x.shape[0]):
        v = x[j]
        if v != v:
            return j
        if v > top:
            top = v
            best = j
    return best


@njit(inline="always")
def _argmax_noised(
    x: npt.NDArray[np.float32], key: np.uint64, divisor: np.float32, bound: npt.NDArray[np.float64]
) -> int:
    """argmax_j of float32(x[j] / divisor) + g_j with numpy's argmax semantics (module docstring)."""
    n = x.shape[0]
    # Pass 1: a NaN decides (its score is NaN); else the largest x / divisor is a good first best.
    top = 0
    a_top = x[0] / divisor
    if a_top != a_top:
        return 0
    for j in range(1, n):
        a = x[j] / divisor
        if a != a:
            return j
        if a > a_top:
            a_top = a
            top = j
    best = top
    # bits of token j = fmix64(key + (j + 1) * GOLDEN)
    m = a_top + _gumbel(_fmix64(key + (np.uint64(top) + np.uint64(1)) * _GOLDEN))
    prune = abs(np.float64(m)) <= _PRUNE_LIMIT
    floor = np.float64(m) - abs(np.float64(m)) * _ULP32
    z = key
    for j in range(n):
        z += _GOLDEN
        if j == top:
            continue
        bits = _fmix64(z)
        a = x[j] / divisor
        if prune and np.float64(a) + bound[bits >> _BUCKET_SHIFT] < floor:
            continue
        s = a + _gumbel(bits)
        if s > m or (s == m and j < best):
            m = s
            best = j
            prune = abs(np.float64(m)) <= _PRUNE_LIMIT
            floor = np.float64(m) - abs(np.float64(m)) * _ULP32
    return best


@njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def argmax_rows(
    logits: npt.NDArray[np.float32],
    keys: npt.NDArray[np.uint64],
    divisors: npt.NDArray[np.float32],
    greedy: npt.NDArray[np.bool_],
    bound: npt.NDArray[np.float64],
) -> npt.NDArray[np.int64]:
    """int64 [rows]: per row i, the argmax of `logits[i] / divisors[i] + noise(keys[i])`, or of
    `logits[i]` where `greedy[i]`.

    Args:
        logits: float32 [rows, vocab], vocab >= 1.
        keys: uint64 [rows], the row keys (`gumbel._row_keys`).
        divisors: float32 [rows], the temperatures (any value where greedy).
        greedy: bool [rows], temperature 0.
        bound: float64 [4096], `bounds()`.
    """
    out = np.empty(logits.shape[0], dtype=np.int64)
    for i in range(logits.shape[0]):
        if greedy[i]:
            out[i] = _argmax_greedy(logits[i])
        else:
            out[i] = _argmax_noised(logits[i], keys[i], divisors[i], bound)
    return out


@njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def score_rows(
    logits: npt.NDArray[np.float32],
    keys: npt.NDArray[np.uint64],
    divisors: npt.NDArray[np.float32],
    greedy: npt.NDArray[np.bool_],
    out: npt.NDArray[np.float32],
) -> None:
    """out[i] = float32 `logits[i] / divisors[i] + noise(keys[i])`, or `logits[i]` where
    `greedy[i]` (shapes as in `argmax_rows`; out float32 [rows, vocab])."""
    for i in range(logits.shape[0]):
        x = logits[i]
        o = out[i]
        if greedy[i]:
            o[:] = x
            continue
        d = divisors[i]
        z = keys[i]
        for j in range(x.shape[0]):
            z += _GOLDEN
            o[j] = x[j] / d + _gumbel(_fmix64(z))


@njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def stream_keys(seeds: npt.NDArray[np.uint64], sample_indices: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """uint64 [streams]: step(step(seed) ^ sample_index) per (seed, sample) stream."""
    out = np.empty(seeds.shape[0], dtype=np.uint64)
    for i in range(seeds.shape[0]):
        out[i] = _fmix64((_fmix64(seeds[i] + _GOLDEN) ^ sample_indices[i]) + _GOLDEN)
    return out


@njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def row_keys(streams: npt.NDArray[np.uint64], positions: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
    """uint64 [rows]: step(stream ^ position) per row (positions >= 0, streams given per row)."""
    out = np.empty(streams.shape[0], dtype=np.uint64)
    for i in range(streams.shape[0]):
        out[i] = _fmix64((streams[i] ^ np.uint64(positions[i])) + _GOLDEN)
    return out


@njit(cache=True, nogil=True, error_model="numpy", boundscheck=False)
def noise_rows(keys: npt.NDArray[np.uint64], out: npt.NDArray[np.float32]) -> None:
    """out[i, j] = the float32 noise of token j in the row of keys[i] (out float32 [rows, vocab])."""
    for i in range(keys.shape[0]):
        o = out[i]
        z = keys[i]
        for j in range(o.shape[0]):
            z += _GOLDEN
            o[j] = _gumbel(_fmix64(z))


@cache
def bounds() -> npt.NDArray[np.float64]:
    """float64 [4096]: per bucket b of k = bits >> 12 (k >> 40 == b), an upper bound of the float32
    noise of every k in it: g at the bucket's largest k, plus 1e-6 (float64 log error) and 1e-7 |g|
    (float32 rounding is at most 6e-8 |g|). g grows with k, so it bounds the whole bucket."""
    k_top = (np.arange(1, _BUCKETS + 1, dtype=np.float64) * 2.0**40) - 1.0  # exact below 2**53
    g = -np.log(-np.log((k_top + 0.5) * _TWO_M52))
    bound = g + 1e-6 + 1e-7 * np.abs(g)
    bound.setflags(write=False)
    return bound


def warm_up() -> None:
    """Compile (or load from the cache) every kernel now, so the first real call does not."""
    logits = np.zeros((1, 2), dtype=np.float32)
    keys = np.zeros(1, dtype=np.uint64)
    divisors = np.ones(1, dtype=np.float32)
    greedy = np.zeros(1, dtype=np.bool_)
    argmax_rows(logits, keys, divisors, greedy, bounds())
    score_rows(logits, keys, divisors, greedy, np.empty_like(logits))
    noise_rows(keys, np.empty_like(logits))
    row_keys(stream_keys(keys, keys), np.zeros(1, dtype=np.int64))
