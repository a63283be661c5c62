"""Arithmetic over the prime field GF(65497) that TOPLOC proofs live in.

A proof is the polynomial through (index mod m, bf16 bits) of a chunk's top-k activations. The
field is small enough that every product of two elements fits in int64, so interpolation and
evaluation are plain batched numpy integer operations: no big integers, no per-point Python loop.
Every function works on a batch of independent polynomials (one per chunk) at once.
"""

from __future__ import annotations

from functools import cache
from typing import Final

import numpy as np
import numpy.typing as npt

from proofpool.errors import ProofpoolError

PRIME: Final = 65497
"""The field order, fixed by the reference proof format (also the largest allowed modulus)."""

_MODULUS_BATCH: Final = 64
"""Candidate moduli tested per vectorized step of the injective-modulus search."""

Int64Array = npt.NDArray[np.int64]


class ToplocError(ProofpoolError):
    """Proofs cannot be built from these activations (wrong shape, non-finite values, ...).

    Lives here, in the package's lowest module, so every TOPLOC module can raise it. Verifying a
    hostile proof never raises it: a bad proof is a failed `ChunkCheck`, not an error.
    """


@cache
def inverse_table() -> Int64Array:
    """int64 [PRIME]: multiplicative inverses by Fermat (a^(p-2)); entry 0 is 0 (never used).

    Built once per process on first use (about a millisecond), so divided differences are one
    table lookup per division.
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


def find_injective_modulus(indices: npt.ArrayLike) -> int:
    """The largest m <= PRIME such that `indices mod m` are pairwise distinct.

    The reference scans m downwards one at a time in Python; this tests `_MODULUS_BATCH`
    candidates per step (sort each candidate's residues, look for equal neighbours). Most
    chunks stop at m = PRIME because their flat indices are already below it.

    Raises:
        ToplocError: the indices repeat, or no modulus >= the number of points separates them.
    """
    x = np.asarray(indices, dtype=np.int64).reshape(-1)
    n = x.size
    if n == 0:
        return PRIME
    if x.min() < 0:
        raise ToplocError("indices must be non-negative")
    if np.unique(x).size != n:
        raise ToplocError("indices repeat: no modulus can separate them")
    if x.max() < PRIME:
        return PRIME
    lowest = max(n, 1)  # fewer residues than points cannot be distinct
    for top in range(PRIME, lowest - 1, -_MODULUS_BATCH):
        moduli = np.arange(top, max(top - _MODULUS_BATCH, lowest - 1), -1, dtype=np.int64)
        residues = np.sort(x[None, :] % moduli[:, None], axis=1)
        injective = ~(residues[:, 1:] == residues[:, :-1]).any(axis=1)
        if injective.any():
            return int(moduli[int(np.argmax(injective))])
    raise ToplocError(f"no injective modulus >= {lowest} for {n} indices")


def interpolate(xs: npt.ArrayLike, ys: npt.ArrayLike) -> Int64Array:
    """Coefficients (ascending powers) of the polynomials through the points (xs[b], ys[b]).

    Args:
        xs: int [batch, n] (or [n]), distinct modulo PRIME within each row.
        ys: int [batch, n] (or [n]); reduced modulo PRIME first.

    Returns:
        int64 [batch, n] (or [n]): c with p_b(x) = sum_j c[b, j] x^j (mod PRIME), degree < n.

    Newton divided differences (n - 1 vectorized steps), then the Newton form expanded to the
    monomial basis (n - 1 more steps), each step over the whole batch. The interpolating
    polynomial of degree < n is unique, so the order of the points does not matter.
    """
    x = np.asarray(xs, dtype=np.int64)
    y = np.asarray(ys, dtype=np.int64)
    if x.shape != y.shape or x.ndim not in (1, 2):
        raise ToplocError(f"xs {x.shape} and ys {y.shape} must be equal 1-D or 2-D shapes")
    squeeze = x.ndim == 1
    x = np.atleast_2d(x) % PRIME
    c = np.atleast_2d(y) % PRIME
    n = x.shape[1]
    inverse = inverse_table()
    for j in range(1, n):
        denominators = (x[:, j:] - x[:, :-j]) % PRIME
        if not denominators.all():
            raise ToplocError("interpolation points repeat modulo the field prime")
        c[:, j:] = (c[:, j:] - c[:, j - 1 : -1]) % PRIME * inverse[denominators] % PRIME
    # Horner on the Newton form: p = c0 + (X - x0)(c1 + (X - x1)(c2 + ...)).
    coeffs = np.zeros_like(c)
    if n:
        coeffs[:, 0] = c[:, n - 1]
    for k in range(n - 2, -1, -1):
        shifted = np.zeros_like(coeffs)
        shifted[:, 1:] = coeffs[:, :-1]  # multiply by X
        coeffs = (shifted - coeffs * x[:, k : k + 1]) % PRIME  # ... minus x_k times p
        coeffs[:, 0] = (coeffs[:, 0] + c[:, k]) % PRIME
    return coeffs[0] if squeeze else coeffs


def evaluate(coeffs: npt.ArrayLike, points: npt.ArrayLike) -> Int64Array:
    """Horner evaluation mod PRIME of polynomials at points.

    Args:
        coeffs: int [batch, n] (or [n]), ascending powers, each in [0, PRIME).
        points: int [batch, k] (or [k]), non-negative.

    Returns:
        int64 [batch, k] (or [k]) in [0, PRIME).
    """
    c = np.asarray(coeffs, dtype=np.int64)
    p = np.asarray(points, dtype=np.int64)
    squeeze = c.ndim == 1 and p.ndim == 1
    c = np.atleast_2d(c)
    p = np.atleast_2d(p) % PRIME
    if c.shape[0] != p.shape[0]:
        raise ToplocError(f"{c.shape[0]} polynomials but {p.shape[0]} rows of points")
    result = np.zeros(p.shape, dtype=np.int64)
    for j in range(c.shape[1] - 1, -1, -1):
        result = (result * p + c[:, j : j + 1]) % PRIME
    return result[0] if squeeze else result
