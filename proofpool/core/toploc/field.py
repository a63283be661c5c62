"""Arithmetic over the prime field GF(65497) that TOPLOC proofs live in.

A proof is the polynomial through (index mod m, bf16 bits) of a chunk's top-k activations. Every
function works on a batch of independent polynomials (one per chunk) at once, so a worker proves
all chunks of all its samples in one pass and a verifier checks them in one pass.

Values are integers held in float64: a product of two field elements is below 2**32 and a sum of
up to 2**20 such products stays below 2**53, so float64 matrix products (BLAS) compute them
exactly and `_reduce_` brings them back into the field. Intermediate values are "lazy", in
[0, p] rather than [0, p) (p stands for 0); results are canonical.

- `evaluate` uses baby-step giant-step: with S * A >= n, sum_e c_e x^e = sum_a (x^S)^a sum_s
  c_{S a + s} x^s, so the O(n * points) work is one small matrix product per chunk.
- `interpolate` uses the Lagrange form: with M(X) = prod_i (X - x_i) and z_i = y_i / M'(x_i), the
  coefficients are c_t = sum_e M_{t+1+e} P_e where P_e = sum_i z_i x_i^e. It runs as one compiled
  loop nest (`proofpool.core.toploc.lagrange`, numba); numpy's passes over temporaries, even with a
  product tree and FFTs, cost 2.5x as much for the 128-point polynomials proofs use. The
  interpolating polynomial of degree < n is unique, so any method gives the same coefficients
  (the tests compare with textbook Lagrange and Newton).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Final

import numpy as np
import numpy.typing as npt

from proofpool.core.errors import ProofpoolError

PRIME: Final = 65497
"""The field order, fixed by the reference proof format (also the largest allowed modulus)."""

_MODULUS_BATCH: Final = 64
"""Candidate moduli tested per vectorized step of the injective-modulus search."""
_P: Final = float(PRIME)
_INV_P: Final = 1.0 / PRIME
_BLOCK_POINTS: Final = 8192
"""Points per block of chunks in `evaluate`. Temporaries of a block (a few hundred KB each) are
reused from the heap; larger blocks made each temporary a fresh mmap whose page faults cost more
than the arithmetic."""
_INTERPOLATE_COLUMNS: Final = 256
"""Polynomials per call of the interpolation kernel: its temporaries ([points, columns] float64,
five of them) stay within the L2 cache at 128 points."""

Int64Array = npt.NDArray[np.int64]
Float64Array = npt.NDArray[np.float64]


class ToplocError(ProofpoolError):
    """Proofs cannot be built from these activations (wrong shape, non-finite values, ...).

    Lives here, in the package's lowest module, so every TOPLOC module can raise it. Verifying a
    hostile proof never raises it: a bad proof is a failed `ChunkCheck`, not an error.
    """


@cache
def _inverses_f64() -> Float64Array:
    """`inverse_table` as float64, the kernel's element type."""
    return inverse_table().astype(np.float64)


@cache
def inverse_table() -> Int64Array:
    """int64 [PRIME]: multiplicative inverses by Fermat (a^(p-2)); entry 0 is 0 (never used).

    Built once per process on first use (about a millisecond).
    """
    base = np.arange(PRIME, dtype=np.int64)
    result = np.ones(PRIME, dtype=np.int64)
    exponent = PRIME - 2
    while exponent:
        if exponent & 1:
            result = result * base % PRIME
        base = base * base % PRIME
        exponent >>= 1
    result[0] = 0
    result.setflags(write=False)
    return result


def find_injective_moduli(indices: npt.ArrayLike) -> Int64Array:
    """Per row of int [batch, k]: the largest m <= PRIME such that `row mod m` are pairwise distinct.

    Rows whose indices are all below PRIME (most chunks) take m = PRIME at once; the others test
    m = PRIME in one vectorized step and only the rows that collide scan further down, testing
    `_MODULUS_BATCH` candidates per step.

    Raises:
        ToplocError: a row has negative or repeated indices, or no modulus >= its number of points
            separates them.
    """
    x = np.asarray(indices, dtype=np.int64)
    if x.ndim != 2:
        raise ToplocError(f"indices must be 2-D [batch, k], got shape {x.shape}")
    moduli = np.full(x.shape[0], PRIME, dtype=np.int64)
    if x.size == 0:
        return moduli
    if int(x.min()) < 0:
        raise ToplocError("indices must be non-negative")
    ordered = np.sort(x, axis=1)
    if (ordered[:, 1:] == ordered[:, :-1]).any():
        raise ToplocError("indices repeat: no modulus can separate them")
    large = np.flatnonzero(ordered[:, -1] >= PRIME)
    if large.size:
        residues = np.sort(x[large] % PRIME, axis=1)
        collide = large[(residues[:, 1:] == residues[:, :-1]).any(axis=1)]
        for row in collide:
            moduli[row] = _scan_moduli(x[row], PRIME - 1)
    return moduli


def _scan_moduli(x: Int64Array, top: int) -> int:
    """The largest m <= top separating the distinct indices x (the reference scans one at a time)."""
    n = x.size
    lowest = max(n, 1)  # fewer residues than points cannot be distinct
    for start in range(top, lowest - 1, -_MODULUS_BATCH):
        moduli = np.arange(start, max(start - _MODULUS_BATCH, lowest - 1), -1, dtype=np.int64)
        residues = np.sort(x[None, :] % moduli[:, None], axis=1)
        injective = ~(residues[:, 1:] == residues[:, :-1]).any(axis=1)
        if injective.any():
            return int(moduli[int(np.argmax(injective))])
    raise ToplocError(f"no injective modulus >= {lowest} for {n} indices")


def find_injective_modulus(indices: npt.ArrayLike) -> int:
    """`find_injective_moduli` for one set of indices."""
    return int(find_injective_moduli(np.asarray(indices, dtype=np.int64).reshape(1, -1))[0])


def interpolate(xs: npt.ArrayLike, ys: npt.ArrayLike) -> Int64Array:
    """Coefficients (ascending powers) of the polynomials through the points (xs[b], ys[b]).

    Args:
        xs: int [batch, n] (or [n]), distinct modulo PRIME within each row.
        ys: int [batch, n] (or [n]); reduced modulo PRIME first.

    Returns:
        int64 [batch, n] (or [n]): c with p_b(x) = sum_j c[b, j] x^j (mod PRIME), degree < n.
    """
    x = np.asarray(xs, dtype=np.int64)
    y = np.asarray(ys, dtype=np.int64)
    if x.shape != y.shape or x.ndim not in (1, 2):
        raise ToplocError(f"xs {x.shape} and ys {y.shape} must be equal 1-D or 2-D shapes")
    from proofpool.core.toploc.lagrange import interpolate_columns  # numba: imported by builders only

    squeeze = x.ndim == 1
    x, y = np.atleast_2d(x) % PRIME, np.atleast_2d(y) % PRIME
    blocks = []
    for start in range(0, max(x.shape[0], 1), _INTERPOLATE_COLUMNS):
        rows = slice(start, start + _INTERPOLATE_COLUMNS)
        columns, repeats = interpolate_columns(
            np.ascontiguousarray(x[rows].T, dtype=np.float64),
            np.ascontiguousarray(y[rows].T, dtype=np.float64),
            _inverses_f64(),
        )
        if repeats:  # M'(x_i) = prod_{j != i} (x_i - x_j) is 0 exactly when x_i repeats
            raise ToplocError("interpolation points repeat modulo the field prime")
        blocks.append(_canonical(columns.T))
    out = np.concatenate(blocks)
    return out[0] if squeeze else out


def evaluate(coeffs: npt.ArrayLike, points: npt.ArrayLike) -> Int64Array:
    """Evaluation mod PRIME of polynomials at points.

    Args:
        coeffs: int [batch, n] (or [n]), ascending powers (reduced modulo PRIME first).
        points: int [batch, k] (or [k]), non-negative.

    Returns:
        int64 [batch, k] (or [k]) in [0, PRIME).
    """
    c = np.asarray(coeffs, dtype=np.int64)
    p = np.asarray(points, dtype=np.int64)
    squeeze = c.ndim == 1 and p.ndim == 1
    c, p = np.atleast_2d(c), np.atleast_2d(p)
    if c.shape[0] != p.shape[0]:
        raise ToplocError(f"{c.shape[0]} polynomials but {p.shape[0]} rows of points")
    if c.shape[1] == 0:
        return np.zeros(p.shape[1:] if squeeze else p.shape, dtype=np.int64)
    c, p = (c % PRIME).astype(np.float64), p % PRIME
    blocks = []
    for rows in _blocks(p.shape[0], max(p.shape[1], c.shape[1])):
        baby, giant = _powers_for(p[rows], c.shape[1])
        blocks.append(_canonical(_evaluate_powers(c[rows], baby, giant)))
    out = np.concatenate(blocks)
    return out[0] if squeeze else out


def _blocks(batch: int, width: int) -> list[slice]:
    """Row ranges of about `_BLOCK_POINTS` points each (at least one row per block, one block if empty)."""
    rows = max(1, _BLOCK_POINTS // max(width, 1))
    return [slice(start, start + rows) for start in range(0, max(batch, 1), rows)]


def _reduce_(t: Float64Array, scratch: Float64Array | None = None) -> Float64Array:
    """In place: integer values in [0, 2**48) to representatives in [0, p].

    floor(t / p) computed as floor(t * (1/p)) errs by less than 2**-20 below 2**48, while t / p
    is at least 1/p (about 2**-16) from the next integer unless t is a multiple of p: then it may
    come out one low and leave p instead of 0, the lazy representative, harmless until the end.
    The largest values reduced here are sums of n products of two field elements (n < 2**16).
    `scratch`, if given, is a buffer of t's shape (saves an allocation in loops).
    """
    q = np.multiply(t, _INV_P, out=scratch)
    np.floor(q, out=q)
    q *= _P
    t -= q
    return t


def _canonical(t: Float64Array) -> Int64Array:
    """Lazy representatives in [0, p] as int64 in [0, p)."""
    out = t.astype(np.int64)
    out[out == PRIME] = 0
    return out


def _split(n: int) -> tuple[int, int]:
    """(S, A) with S * A >= n and S about sqrt(n): baby steps and giant steps."""
    baby = math.isqrt(max(n - 1, 0)) + 1
    return baby, -(-n // baby)


def _powers(q: Float64Array, count: int) -> Float64Array:
    """[count, batch, k]: q^0 .. q^(count - 1) of q [batch, k], lazily reduced, one plane per power."""
    out = np.empty((count, *q.shape))
    out[0] = 1.0
    if count > 1:
        out[1] = q
    scratch = np.empty(q.shape)
    for j in range(2, count):
        np.multiply(out[j - 1], q, out=out[j])
        _reduce_(out[j], scratch)
    return out


def _powers_for(q: Int64Array, n: int) -> tuple[Float64Array, Float64Array]:
    """Baby steps q^s [S, batch, k] and giant steps (q^S)^a [A, batch, k] for degree < n (q in [0, p))."""
    steps, jumps = _split(n)
    qf = q.astype(np.float64)
    baby = _powers(qf, steps)
    return baby, _powers(_reduce_(baby[-1] * qf), jumps)


def _evaluate_powers(coeffs: Float64Array, baby: Float64Array, giant: Float64Array) -> Float64Array:
    """sum_e coeffs[b, e] q^e for every point, from `_powers_for` (lazy result in [0, p])."""
    steps, batch, _ = baby.shape
    jumps = giant.shape[0]
    padded = np.zeros((batch, jumps * steps))
    padded[:, : coeffs.shape[1]] = coeffs
    partial = _reduce_(padded.reshape(batch, jumps, steps) @ baby.transpose(1, 0, 2))  # [batch, A, k]
    partial *= giant.transpose(1, 0, 2)
    return _reduce_(partial.sum(axis=1))
