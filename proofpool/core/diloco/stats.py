"""Norms and angles of pseudo-gradients: the round record's numbers and the validator's flags.

Sums run in float64 (a float32 sum over millions of squares loses digits the tolerance and the
clipping factor depend on) and in an order fixed by the tensor's size alone: torch's own full
reductions split the work by thread count, so two machines would disagree in the last bits of
a norm recorded in a checkpoint and recomputed by `proofpool ledger verify-round`.

The flags are hints for people and dashboards (a pseudo-gradient much longer or shorter than
the round's average, or pointing against it); they never slash alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

_CHUNK = 1024
"""Elements summed by one inner reduction: below torch's parallel grain, so one thread sums each."""


def sum_float64(t: torch.Tensor) -> float:
    """The sum of `t`'s elements in float64, the same bits whatever the thread count: chunks of
    `_CHUNK` are summed, then the chunk sums, and so on (zero padding adds exactly nothing)."""
    v = t.detach().to(torch.float64).reshape(-1)
    while v.numel() > _CHUNK:
        v = torch.cat([v, v.new_zeros(-v.numel() % _CHUNK)]).view(-1, _CHUNK).sum(dim=1)
    return float(v.sum())


def dot(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """The float64 inner product over every parameter (names sorted; the same names in both)."""
    if set(a) != set(b):
        raise ValueError(f"different parameters: {sorted(set(a) ^ set(b))[:3]}")
    return math.fsum(sum_float64(a[k].double() * b[k].double()) for k in sorted(a))


def global_norm(t: Mapping[str, torch.Tensor]) -> float:
    """The L2 norm over every parameter, as one vector."""
    return math.sqrt(dot(t, t))


def cosine(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    """The cosine between two pseudo-gradients (0.0 when either is zero)."""
    norms = global_norm(a) * global_norm(b)
    return dot(a, b) / norms if norms > 0 else 0.0


def round_flags(norm: float, reference_norm: float | None, cos: float | None) -> list[str]:
    """ "norm_high" (over 3x the reference), "norm_low" (under a third), "opposed" (cosine < 0)."""
    flags = []
    if reference_norm is not None and reference_norm > 0:
        if norm > 3 * reference_norm:
            flags.append("norm_high")
        elif norm < reference_norm / 3:
            flags.append("norm_low")
    if cos is not None and cos < 0:
        flags.append("opposed")
    return flags
