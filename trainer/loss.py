"""The GRPO loss: two-sided clipping, a delta cap for negative advantages, a constant normalizer.

Per completion token t with advantage A_t (the sample's group advantage) and ratio
r_t = exp(logp_t - logp_old_t):

    clipped_t = clamp(r_t, 1 - eps_low, 1 + eps_high)
    capped_t  = min(r_t, delta) if A_t < 0 else r_t
    loss_t    = -min(capped_t * A_t, clipped_t * A_t)
    loss      = sum_t mask_t * loss_t / normalizer
              - entropy_coef * sum_t mask_t * H_t / normalizer            (only if entropy_coef > 0)
              + kl_coef * sum_t mask_t * k3_t / normalizer                (only if kl_coef > 0)
    k3_t      = exp(ref_t - logp_t) - (ref_t - logp_t) - 1

The min is pessimistic: once the ratio has moved past the clip bound in the direction the
advantage pushes it, the clipped (constant) term wins and the token's gradient is zero. For a
negative advantage the unclipped side is unbounded as r grows, so it is capped at delta (INTELLECT-2).
The normalizer is a constant (`GrpoConfig.normalizer`), not the number of tokens: see
`proofpool.trainer.config.default_normalizer`. The function is pure: no model, no state, no side effects.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from proofpool.trainer.config import GrpoConfig
from torch import Tensor


@dataclass(frozen=True)
class LossInputs:
    """Per-token inputs of the loss; all tensors have one shape, [tokens] or [batch, seq].

    Values at positions where `mask` is False are ignored entirely (they may be anything, even
    inf or NaN): they neither change the loss nor receive a gradient.
    """

    logprobs: Tensor
    """float32 [...]: log-probability of each token under the policy being trained (with grad)."""
    old_logprobs: Tensor
    """float32 [...]: log-probability under the policy the ratio is taken against (detached here)."""
    advantages: Tensor
    """float32 [...]: the advantage of the token's sample (detached here)."""
    mask: Tensor
    """bool [...]: True where the position is a completion token that carries loss."""
    ref_logprobs: Tensor | None = None
    """float32 [...]: log-probability under the reference policy; needed when kl_coef > 0."""
    entropy: Tensor | None = None
    """float32 [...]: entropy of the policy's next-token distribution; needed when entropy_coef > 0."""

    def __post_init__(self) -> None:
        shape = self.logprobs.shape
        named = {"old_logprobs": self.old_logprobs, "advantages": self.advantages, "mask": self.mask}
        named |= {"ref_logprobs": self.ref_logprobs, "entropy": self.entropy}
        for name, tensor in named.items():
            if tensor is not None and tensor.shape != shape:
                raise ValueError(f"{name} has shape {tuple(tensor.shape)}, logprobs {tuple(shape)}")
        if self.mask.dtype != torch.bool:
            raise ValueError(f"mask must be bool, got {self.mask.dtype}")


@dataclass(frozen=True)
class LossOutputs:
    """Per-token terms of the loss before reduction, for tests and diagnostics."""

    policy: Tensor
    """float32 [...]: the clipped policy-gradient loss per token (0 where masked out)."""
    ratio: Tensor
    """float32 [...]: exp(logp - logp_old) (1 where masked out)."""


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of `values` over `mask` (0 for an empty mask), detached: for metrics only."""
    count = mask.sum()
    total = torch.where(mask, values.detach().float(), torch.zeros((), dtype=torch.float32)).sum()
    return total / count.clamp(min=1)


def _masked(values: Tensor, mask: Tensor, fill: float = 0.0) -> Tensor:
    """`values` with masked-out entries replaced by `fill`, so inf/NaN padding cannot leak (inf * 0 is NaN)."""
    return torch.where(mask, values, torch.full((), fill, dtype=values.dtype))


def policy_terms(x: LossInputs, cfg: GrpoConfig) -> LossOutputs:
    """The per-token clipped policy loss and ratio (see the module docstring)."""
    mask = x.mask
    logprobs = _masked(x.logprobs, mask)  # [...]
    old = _masked(x.old_logprobs.detach(), mask)
    adv = _masked(x.advantages.detach(), mask)
    ratio = torch.exp(logprobs - old)  # [...], exactly 1 at masked-out positions
    clipped = ratio.clamp(1 - cfg.eps_low, 1 + cfg.eps_high)
    capped = torch.where(adv < 0, ratio.clamp(max=cfg.delta), ratio)
    per_token = -torch.minimum(capped * adv, clipped * adv)
    return LossOutputs(policy=_masked(per_token, mask), ratio=ratio)


def grpo_loss(x: LossInputs, cfg: GrpoConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """The GRPO loss (scalar) of `x` and detached scalar metrics.

    Metrics (means over masked tokens): `clip_low_frac` (negative advantage, ratio below
    1 - eps_low: the low clip zeroes the gradient), `clip_high_frac` (positive advantage, ratio
    above 1 + eps_high), `delta_frac` (negative advantage, ratio above delta), `ratio_mean`,
    `tokens` (count); plus `entropy` and `kl` when their terms are on.
    """
    mask = x.mask
    terms = policy_terms(x, cfg)
    loss = terms.policy.sum() / cfg.normalizer
    ratio, adv = terms.ratio.detach(), _masked(x.advantages.detach(), mask)
    metrics: dict[str, Tensor] = {
        "clip_low_frac": _masked_mean(((adv < 0) & (ratio < 1 - cfg.eps_low)).float(), mask),
        "clip_high_frac": _masked_mean(((adv > 0) & (ratio > 1 + cfg.eps_high)).float(), mask),
        "delta_frac": _masked_mean(((adv < 0) & (ratio > cfg.delta)).float(), mask),
        "ratio_mean": _masked_mean(ratio, mask),
        "tokens": mask.sum().float(),
    }
    if cfg.entropy_coef > 0:
        if x.entropy is None:
            raise ValueError("entropy_coef > 0 needs LossInputs.entropy")
        entropy = _masked(x.entropy, mask)
        loss = loss - cfg.entropy_coef * entropy.sum() / cfg.normalizer
        metrics["entropy"] = _masked_mean(entropy, mask)
    if cfg.kl_coef > 0:
        if x.ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs LossInputs.ref_logprobs")
        log_ratio = _masked(x.ref_logprobs.detach(), mask) - _masked(x.logprobs, mask)  # log(pi_ref / pi)
        k3 = _masked(torch.exp(log_ratio) - log_ratio - 1, mask)  # >= 0, unbiased estimate of KL(pi || pi_ref)
        loss = loss + cfg.kl_coef * k3.sum() / cfg.normalizer
        metrics["kl"] = _masked_mean(k3, mask)
    return loss, metrics
