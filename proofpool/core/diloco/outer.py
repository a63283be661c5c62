"""The aggregator's outer step: average the accepted pseudo-gradients, clip, and take one SGD step
with Nesterov momentum (DiLoCo; INTELLECT-1 used lr 0.7, momentum 0.9).

A pseudo-gradient is theta_start - theta_end, so it points like a gradient and the outer
optimizer descends along it. The step follows `torch.optim.SGD` (dampening 0, no weight decay)
op for op in float32, so a checkpoint published by the aggregator is recomputed bit for bit by
`proofpool ledger verify-round` from the same files, in the same order, and the previous momentum.
The average sums in float64, in the order given (the round record's sorted work keys): float
addition is not associative, and float64 keeps the order's effect far below float32's last bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from proofpool.core.diloco.spec import OuterSpec
from proofpool.core.diloco.stats import global_norm


def average(deltas: Sequence[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean (float32) of pseudo-gradients with the same parameter names."""
    if not deltas:
        raise ValueError("no pseudo-gradient to average")
    names = set(deltas[0])
    for i, delta in enumerate(deltas[1:], 1):
        _same_names(names, delta, f"pseudo-gradient {i}")
    mean = {}
    for name in deltas[0]:
        total = deltas[0][name].double().clone()
        for delta in deltas[1:]:
            total += delta[name].double()
        mean[name] = (total / len(deltas)).float()
    return mean


def clip_global_norm(delta: Mapping[str, torch.Tensor], max_norm: float) -> tuple[dict[str, torch.Tensor], float]:
    """(delta scaled so its global L2 norm is at most `max_norm`, its norm before); `max_norm` 0:
    unchanged."""
    norm = global_norm(delta)
    if max_norm <= 0 or norm <= max_norm:
        return dict(delta), norm
    factor = max_norm / norm
    return {name: (value.double() * factor).float() for name, value in delta.items()}, norm


def outer_step(
    weights: Mapping[str, torch.Tensor],
    momentum: Mapping[str, torch.Tensor] | None,
    delta: Mapping[str, torch.Tensor],
    outer: OuterSpec,
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(new weights, new momentum), float32. With mu = outer.momentum: m' = mu * m + delta
    (m' = delta in the first round, as SGD's first step sets its buffer to the gradient);
    step = delta + mu * m' with Nesterov, else m'; theta' = theta - lr * step."""
    _same_names(set(weights), delta, "the pseudo-gradient")
    if momentum is not None:
        _same_names(set(weights), momentum, "the momentum")
    mu = outer.momentum
    new_weights, new_momentum = {}, {}
    for name, theta in weights.items():
        d = delta[name].float()
        m = d.clone() if momentum is None else torch.mul(momentum[name].float(), mu).add_(d)
        step = torch.add(d, m, alpha=mu) if outer.nesterov else m
        new_weights[name] = torch.add(theta.float(), step, alpha=-outer.lr)
        new_momentum[name] = m
    return new_weights, new_momentum


def _same_names(names: set[str], other: Mapping[str, torch.Tensor], what: str) -> None:
    if set(other) != names:
        raise ValueError(f"{what} has other parameters than the weights: {sorted(set(other) ^ names)[:3]}")
