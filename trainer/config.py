"""Settings of the GRPO core: the loss's clipping, its normalizer, the optimizer and micro-batching.

One frozen pydantic model, so a run's settings can be logged, compared and read from a file or
flags at the CLI boundary without a second definition.
"""

from __future__ import annotations

from typing import Final, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEVNET_SAMPLES_PER_STEP: Final = 32 * 8
"""Samples the devnet trains on per step: 32 problems x a group of 8."""
DEVNET_ANSWER_TOKENS: Final = 4
"""The longest useful completion of the devnet's arithmetic task (3 digits and the end token): the
budget of `GrpoConfig`'s default normalizer. `proofpool trainer run` replaces it with the pool's
own (`GrpoConfig.for_budget`)."""


def default_normalizer(max_tokens: int, samples_per_step: int) -> float:
    """The normalizer for a run: the most completion tokens one step can hold.

    Dividing by this constant (Dr. GRPO, Liu et al. 2025) instead of the step's token count keeps
    every token's weight the same whatever the length of its completion or the number of groups
    the online filter drops, and it makes gradient accumulation over micro-batches exact: each
    micro-batch's loss is already its share of the step's loss.
    """
    if max_tokens < 1 or samples_per_step < 1:
        raise ValueError(f"max_tokens ({max_tokens}) and samples_per_step ({samples_per_step}) must be >= 1")
    return float(max_tokens * samples_per_step)


class GrpoConfig(BaseModel):
    """GRPO loss and optimizer settings (defaults: DESIGN "Trainer")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eps_low: float = Field(0.2, ge=0, lt=1)
    """Lower clip: the ratio counts down to 1 - eps_low at most (a token made less likely)."""
    eps_high: float = Field(0.2, ge=0)
    """Upper clip: the ratio counts up to 1 + eps_high at most (a token made more likely)."""
    delta: float = Field(4.0, gt=1)
    """Cap on the ratio for negative advantages: the pessimistic min alone is unbounded there, so a
    token whose probability grew a lot since the rollout (stale, off-policy samples) would dominate
    the step; above delta its loss is constant and its gradient zero. Must exceed 1 + eps_high."""
    normalizer: float = Field(default_normalizer(DEVNET_ANSWER_TOKENS, DEVNET_SAMPLES_PER_STEP), gt=0)
    """Constant the summed token loss is divided by, never the token count. Default: max completion
    tokens x samples per step (4 x 256 = 1024 on the devnet); a trainer run takes its pool's
    (`for_budget`) unless it is set explicitly. See `default_normalizer`."""
    lr: float = Field(2e-4, gt=0)
    """AdamW learning rate (constant)."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW decoupled weight decay; off, so RL does not pull the warmed weights towards zero."""
    max_grad_norm: float = Field(0.1, gt=0)
    """Global gradient-norm clip applied before each optimizer step."""
    entropy_coef: float = Field(0.0, ge=0)
    """Weight of the entropy bonus (subtracted from the loss); 0 leaves the term out entirely."""
    kl_coef: float = Field(0.0, ge=0)
    """Weight of the k3 KL penalty against a reference policy; 0 leaves the term out entirely."""
    micro_batch: int = Field(64, ge=1)
    """Samples per forward/backward pass; gradients accumulate over a step's micro-batches."""
    seed: int = Field(0, ge=0)
    """Seed of what the trainer draws itself (local rollouts' problems and sampling seeds). A step
    on given rows is deterministic: the model has no dropout."""

    @model_validator(mode="after")
    def _delta_above_clip(self) -> Self:
        if self.delta <= 1 + self.eps_high:
            raise ValueError(f"delta ({self.delta}) must exceed 1 + eps_high ({1 + self.eps_high})")
        return self

    def for_budget(self, max_tokens: int, samples_per_step: int) -> GrpoConfig:
        """These settings for a run whose completions get at most `max_tokens` and whose steps take
        `samples_per_step` samples: the normalizer becomes `default_normalizer` of that budget,
        unless it was set explicitly. Without it, a pool with a 1,024-token budget would train at
        256 times the learning rate per token that the devnet's 4-token default implies."""
        if "normalizer" in self.model_fields_set:
            return self
        return self.model_copy(update={"normalizer": default_normalizer(max_tokens, samples_per_step)})
