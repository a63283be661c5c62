"""One GRPO optimizer step on a list of rollout rows.

The step: drop uninformative groups (`online_filter`), split the rest into micro-batches, take
the old log-probabilities from the model *before* the update, then forward/backward every
micro-batch (gradients accumulate), clip the global gradient norm, one AdamW step.

Old log-probabilities. Workers generate with checkpoints up to k versions behind the trainer
(async level k), and rollout files carry no log-probabilities, so the ratio is taken against the
policy at the start of this step, computed here under `no_grad`. Within one step every
micro-batch sees the same, not yet updated weights, so the ratio is exactly 1 and the step is the
plain policy gradient sum(A * grad logp) / normalizer; clipping and the delta cap bound the
update when a caller trains on the same rows with more than one step (the old log-probabilities
then come from the start of each step, not from the generating policy).

Because the loss is normalized by a constant, the sum of the micro-batches' losses is the loss
of the whole step: no reweighting by micro-batch size is needed.

Two guards. Under FSDP every forward and backward is a collective, so ranks with fewer
micro-batches than the busiest run one-token padding passes (zero-weight in the backward) until
all ranks have run the same number, in the no-grad pass too. And the optimizer step is taken
only if the loss and every gradient are finite (`guarded_update`), decided the same on all ranks.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from proofpool.trainer.batch import (
    BehaviorKey,
    TokenBatch,
    make_batch,
    online_filter,
    place_logprobs,
    token_logprobs,
    token_logprobs_and_entropy,
)
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.loss import LossInputs, grpo_loss
from proofpool.trainer.world import SINGLE, World, shard
from torch import Tensor

from proofpool.core.rollout import RolloutSample

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepMetrics:
    """What one step did; token-weighted means over the kept rows' completion tokens."""

    loss: float
    """The step's loss (sum over micro-batches; each already divided by the normalizer)."""
    mean_reward: float
    """Mean reward of all rows given, before filtering: the rollouts' quality."""
    groups_kept: int
    groups_dropped: int
    """Groups the online filter dropped (all advantages zero)."""
    samples: int
    """Rows trained on (after filtering)."""
    tokens: int
    """Completion tokens trained on."""
    clip_low_frac: float
    clip_high_frac: float
    delta_frac: float
    ratio_mean: float
    grad_norm: float
    """Global gradient norm before clipping (0 when nothing was trained)."""
    seconds: float
    stepped: bool
    """False when no optimizer step was taken: every group was dropped, or the step was skipped."""
    skipped_nonfinite: bool
    """The loss or a gradient was not finite, so the step was skipped and the weights left as they
    were (`guarded_update`); 1 in the metrics CSV, whose column sum counts such steps."""


def make_optimizer(model: torch.nn.Module, cfg: GrpoConfig) -> torch.optim.AdamW:
    """AdamW over the model's trainable parameters with the config's rate and weight decay."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _micro_batches(rows: Sequence[RolloutSample], size: int) -> list[tuple[Sequence[RolloutSample], TokenBatch]]:
    """Rows in chunks of `size`, each padded to its own longest row."""
    return [(rows[i : i + size], make_batch(rows[i : i + size])) for i in range(0, len(rows), size)]


def _padding_pass(model: torch.nn.Module) -> Tensor:
    """Logits of a one-token forward pass: a rank with fewer micro-batches than the busiest runs
    these (times zero when a backward is needed) so every rank joins every FSDP collective."""
    device = next(model.parameters()).device
    return model(input_ids=torch.tensor([[0]], device=device)).logits  # any token: the result is zeroed


def _old_logprobs(
    model: torch.nn.Module,
    batches: Sequence[tuple[Sequence[RolloutSample], TokenBatch]],
    behavior: Mapping[BehaviorKey, Sequence[float]] | None,
    passes: int,
) -> list[Tensor]:
    """The ratio's denominators: the behaviour policy's log-probabilities when given (no model
    run), else the pre-update model's, padded to `passes` forward passes (call under no_grad)."""
    if behavior is not None:
        return [place_logprobs(chunk, batch, behavior) for chunk, batch in batches]
    old = [token_logprobs(model, batch) for _, batch in batches]  # type: ignore[arg-type]
    for _ in range(passes - len(batches)):
        _padding_pass(model)
    return old


def _ref_logprobs(
    ref_model: torch.nn.Module | None, batches: Sequence[tuple[Sequence[RolloutSample], TokenBatch]], passes: int
) -> list[Tensor | None]:
    """The KL term's reference log-probabilities (None each without a reference model), padded to
    `passes` forward passes in case the reference model is sharded too (call under no_grad)."""
    if ref_model is None:
        return [None] * len(batches)
    refs: list[Tensor | None] = [token_logprobs(ref_model, batch) for _, batch in batches]  # type: ignore[arg-type]
    for _ in range(passes - len(batches)):
        _padding_pass(ref_model)
    return refs


def guarded_update(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: float, max_grad_norm: float, world: World = SINGLE
) -> tuple[float, bool]:
    """Clip the accumulated gradients and step, unless the loss or a gradient is not finite.

    One NaN or inf that reaches AdamW makes every weight it touches NaN, and the next published
    checkpoint with them: such a step is skipped (gradients cleared, no optimizer step, a warning).
    Under FSDP every rank must take the same decision or the ranks' shards diverge, so the flag is
    all-reduced. Returns (global gradient norm before clipping, whether the step was taken).
    """
    # a NaN or inf anywhere makes the global norm non-finite; clipping by it then poisons the
    # gradients too, which is harmless: they are cleared below instead of applied
    grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm))
    if world.any(not (math.isfinite(loss) and math.isfinite(grad_norm))):
        optimizer.zero_grad(set_to_none=True)
        log.warning("non-finite loss or gradient, step skipped", extra={"loss": loss, "grad_norm": grad_norm})
        return grad_norm, False
    optimizer.step()  # gradients are left in place (clipped) for inspection; the next step clears them
    return grad_norm, True


def grpo_step(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    rows: Sequence[RolloutSample],
    cfg: GrpoConfig,
    *,
    ref_model: PreTrainedModel | None = None,
    world: World = SINGLE,
    behavior: Mapping[BehaviorKey, Sequence[float]] | None = None,
) -> StepMetrics:
    """One optimizer step of `model` on `rows` (see the module docstring); returns its metrics.

    `ref_model` gives the reference log-probabilities of the KL term and is required when
    `cfg.kl_coef > 0`. `behavior` holds each row's completion log-probabilities under the policy
    that generated it (`proofpool.trainer.behavior`): the ratio's denominator, so clipping and the delta cap
    act on how far the policy moved since the rollout. Without it the denominator is the step's
    starting policy (ratio 1), right only for on-policy rows: on rows one or two versions old that
    pushed the devnet's policy backwards (held-out accuracy 0.264 -> 0.235 in 10 steps at lag 2,
    against 0.264 -> 0.310 on-policy). The model is left in train mode.
    """
    started = time.monotonic()
    if cfg.kl_coef > 0 and ref_model is None:
        raise ValueError("kl_coef > 0 needs a ref_model")
    mean_reward = sum(r.reward for r in rows) / len(rows) if rows else float("nan")
    filtered = online_filter(rows)
    if not filtered.rows:
        return StepMetrics(
            loss=0.0,
            mean_reward=mean_reward,
            groups_kept=0,
            groups_dropped=filtered.groups_dropped,
            samples=0,
            tokens=0,
            clip_low_frac=0.0,
            clip_high_frac=0.0,
            delta_frac=0.0,
            ratio_mean=1.0,
            grad_norm=0.0,
            seconds=time.monotonic() - started,
            stepped=False,
            skipped_nonfinite=False,
        )
    mine = shard(world, filtered.rows)  # whole groups per rank; every rank filtered the same rows
    batches = _micro_batches(mine, cfg.micro_batch)
    passes = world.max(len(batches))  # FSDP: every rank runs as many passes as the busiest one
    model.train()
    with torch.no_grad():
        old = _old_logprobs(model, batches, behavior, passes)  # [mb, seq - 1] each
        refs = _ref_logprobs(ref_model, batches, passes)

    optimizer.zero_grad(set_to_none=True)
    loss_total = 0.0
    sums = {"clip_low_frac": 0.0, "clip_high_frac": 0.0, "delta_frac": 0.0, "ratio_mean": 0.0}
    tokens = 0
    for (_, batch), old_logprobs, ref_logprobs in zip(batches, old, refs, strict=True):
        if cfg.entropy_coef > 0:
            logprobs, entropy = token_logprobs_and_entropy(model, batch)
        else:
            logprobs, entropy = token_logprobs(model, batch), None
        inputs = LossInputs(logprobs, old_logprobs, batch.advantages, batch.mask, ref_logprobs, entropy)
        loss, metrics = grpo_loss(inputs, cfg)
        (loss * world.size).backward()  # FSDP averages gradients over ranks; the loss is a sum
        n = int(metrics["tokens"])
        loss_total += float(loss.detach())
        tokens += n
        for name in sums:
            sums[name] += float(metrics[name]) * n
    for _ in range(passes - len(batches)):  # FSDP needs every rank in each gradient reduction
        (_padding_pass(model).sum() * 0.0).backward()
    loss_total, tokens, *totals = world.sum([loss_total, tokens, *sums.values()])
    sums = dict(zip(sums, totals, strict=True))
    tokens = int(tokens)
    grad_norm, stepped = guarded_update(model, optimizer, loss_total, cfg.max_grad_norm, world)
    means = {name: total / max(tokens, 1) for name, total in sums.items()}
    return StepMetrics(
        loss=loss_total,
        mean_reward=mean_reward,
        groups_kept=filtered.groups_kept,
        groups_dropped=filtered.groups_dropped,
        samples=len(filtered.rows),
        tokens=tokens,
        grad_norm=grad_norm,
        seconds=time.monotonic() - started,
        stepped=stepped,
        skipped_nonfinite=not stepped,
        **means,
    )
