"""The compiled kernel behind `field.interpolate`: Lagrange interpolation over GF(65497), many
polynomials at once.

Why compiled: a worker proves every sample of a batch, and the devnet's 3-token answers make
that one 128-point interpolation per sample. In numpy each step of the algorithm is a pass over
a whole block of temporaries, and those passes cost about 15 us per polynomial, 5 % of the
generation time on their own. Here one loop nest does each step while its operands sit in cache,
vectorized across polynomials (the arrays are [point, polynomial], so the innermost loop runs
over contiguous polynomials with the same point index): 2.5x faster.

The method (the same as numpy's was, so the same coefficients: the polynomial is unique):
with M(X) = prod_i (X - x_i) and z_i = y_i / M'(x_i), the coefficients are
c_t = sum_e M_{t+1+e} P_e where P_e = sum_i z_i x_i^e. M is built by multiplying in the points
two at a time; M'(x_i) and the power sums P_e are accumulated two powers per reduction.

Field elements are integers held in float64, as in `field`: every value stays an exact integer
below 2**50 before it is reduced, and `_reduce` maps it to [0, p] (p standing for 0) by
floor(v / p) estimated with a multiplication, which is exact there (see `field._reduce_`).
Compiled once per machine on first use and cached next to this file (`cache=True`); `nogil` lets a
worker's other threads run meanwhile.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
from numba import njit

from proofpool.core.toploc.field import PRIME

_P: Final = float(PRIME)
_INV_P: Final = 1.0 / PRIME
_FASTMATH: Final = {"contract", "nnan", "ninf", "nsz"}
"""Fused multiply-adds only: on exact integers they change no result, and no reassociation."""


@njit(inline="always", fastmath=_FASTMATH)
def _reduce(v: float) -> float:
    return v - math.floor(v * _INV_P) * _P


@njit(cache=True, nogil=True, boundscheck=False, fastmath=_FASTMATH)
def interpolate_columns(x: np.ndarray, y: np.ndarray, inverses: np.ndarray) -> tuple[np.ndarray, int]:
    """Coefficients of the polynomials through (x[:, b], y[:, b]), one per column b.

    Args:
        x: float64 [n, batch], points in [0, p).
        y: float64 [n, batch], values in [0, p).
        inverses: float64 [p], a^-1 mod p (entry 0 unused).

    Returns:
        (float64 [n, batch] coefficients in [0, p], ascending powers; the number of (point,
        column) pairs where M'(x_i) = 0, i.e. a point repeats and the result is meaningless).
    """
    n, batch = x.shape
    # M(X), ascending coefficients m[0..n] (monic), times (X - a)(X - b) = X^2 + s X + t per step.
    m = np.zeros((n + 1, batch))
    m[0, :] = 1.0
    s = np.empty(batch)
    t = np.empty(batch)
    degree = 0
    for i in range(0, n - 1, 2):
        xa, xb = x[i], x[i + 1]
        for col in range(batch):
            s[col] = _reduce(2.0 * _P - xa[col] - xb[col])
            t[col] = _reduce(xa[col] * xb[col])
        for j in range(degree + 2, 1, -1):  # in place, highest first: m[j-1], m[j-2] are still old
            mj, m1, m2 = m[j], m[j - 1], m[j - 2]
            for col in range(batch):
                mj[col] = _reduce(m2[col] + s[col] * m1[col] + t[col] * mj[col])
        m1, m0 = m[1], m[0]
        for col in range(batch):
            m1[col] = _reduce(s[col] * m0[col] + t[col] * m1[col])
            m0[col] = _reduce(t[col] * m0[col])
        degree += 2
    if degree < n:  # odd n: the last point alone, times (X - a)
        xa = x[n - 1]
        for j in range(degree + 1, 0, -1):
            mj, m1 = m[j], m[j - 1]
            for col in range(batch):
                mj[col] = _reduce(m1[col] + (_P - xa[col]) * mj[col])
        m0 = m[0]
        for col in range(batch):
            m0[col] = _reduce((_P - xa[col]) * m0[col])

    # M'(x_i) by Horner on M'(X) = sum_e (e + 1) M_{e+1} X^e, two steps per reduction.
    slopes = np.zeros((n, batch))
    e = n - 1
    while e >= 1:
        d1, f1, d0, f0 = m[e + 1], e + 1.0, m[e], float(e)
        for i in range(n):
            acc, xi = slopes[i], x[i]
            for col in range(batch):
                acc[col] = _reduce((acc[col] * xi[col] + f1 * d1[col]) * xi[col] + f0 * d0[col])
        e -= 2
    if e == 0:
        d1 = m[1]
        for i in range(n):
            acc, xi = slopes[i], x[i]
            for col in range(batch):
                acc[col] = _reduce(acc[col] * xi[col] + d1[col])

    # z_i = y_i / M'(x_i)
    repeats = 0
    z = np.empty((n, batch))
    for i in range(n):
        for col in range(batch):
            k = int(slopes[i, col])
            if k == 0 or k == PRIME:
                repeats += 1
                k = 0
            z[i, col] = _reduce(y[i, col] * inverses[k])

    # P_e = sum_i z_i x_i^e, two powers per reduction (z is overwritten with z_i x_i^e).
    sums = np.zeros((n, batch))
    for e in range(0, n, 2):
        p0 = sums[e]
        if e + 1 < n:
            p1 = sums[e + 1]
            for i in range(n):
                zi, xi = z[i], x[i]
                for col in range(batch):
                    u = zi[col] * xi[col]
                    p0[col] += zi[col]
                    p1[col] += u
                    zi[col] = _reduce(u * xi[col])
        else:
            for i in range(n):
                zi = z[i]
                for col in range(batch):
                    p0[col] += zi[col]
    for e in range(n):
        pe = sums[e]
        for col in range(batch):
            pe[col] = _reduce(pe[col])

    # c_t = sum_e M_{t+1+e} P_e
    coeffs = np.zeros((n, batch))
    for t_ in range(n):
        ct = coeffs[t_]
        for e in range(n - t_):
            me, pe = m[t_ + 1 + e], sums[e]
            for col in range(batch):
                ct[col] += me[col] * pe[col]
        for col in range(batch):
            ct[col] = _reduce(ct[col])
    return coeffs, repeats
