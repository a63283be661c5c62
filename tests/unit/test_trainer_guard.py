"""The step guard: a loss or gradient that is not finite never reaches AdamW, so one bad batch
cannot turn the weights (and the next published checkpoint) into NaN."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.step import grpo_step, guarded_update, make_optimizer
from proofpool_arithmetic.build import ModelSpec, create_model

from proofpool.core.rollout import RolloutSample

TINY = ModelSpec(seed=5, hidden=32, layers=2, heads=1)


def _rows(advantage: float) -> list[RolloutSample]:
    """One group of two rows, the first with `advantage` (a NaN or inf slipped past the screen)."""
    return [
        RolloutSample("add-1-2", 0, (1, 5, 6), (7, 2), r, a, 7, 1.0, 0, b"") for r, a in ((1.0, advantage), (0.0, -0.5))
    ]


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


@pytest.mark.parametrize("advantage", [math.nan, math.inf, -math.inf])
def test_a_non_finite_batch_leaves_the_weights_unchanged(advantage: float) -> None:
    model = create_model(TINY)
    optimizer = make_optimizer(model, GrpoConfig())
    before = _weights(model)
    metrics = grpo_step(model, optimizer, _rows(advantage), GrpoConfig())
    assert metrics.skipped_nonfinite and not metrics.stepped
    for name, tensor in _weights(model).items():
        assert torch.equal(tensor, before[name]), name
    assert not optimizer.state  # AdamW never saw the step: its moments are not poisoned either
    assert all(p.grad is None for p in model.parameters())


def test_a_finite_batch_after_a_skipped_one_steps_normally() -> None:
    model = create_model(TINY)
    optimizer = make_optimizer(model, GrpoConfig())
    grpo_step(model, optimizer, _rows(math.nan), GrpoConfig())
    before = _weights(model)
    metrics = grpo_step(model, optimizer, _rows(0.5), GrpoConfig())
    assert metrics.stepped and not metrics.skipped_nonfinite
    assert any(not torch.equal(t, before[n]) for n, t in _weights(model).items())
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())


def test_guarded_update_skips_on_a_single_non_finite_gradient() -> None:
    model = create_model(TINY)
    optimizer = make_optimizer(model, GrpoConfig())
    before = _weights(model)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    next(model.parameters()).grad.view(-1)[0] = math.nan  # type: ignore[union-attr]
    grad_norm, stepped = guarded_update(model, optimizer, loss=0.0, max_grad_norm=0.1)
    assert not stepped and math.isnan(grad_norm)
    assert all(torch.equal(t, before[n]) for n, t in _weights(model).items())


def test_a_non_finite_loss_alone_is_enough_to_skip() -> None:
    model = create_model(TINY)
    optimizer = make_optimizer(model, GrpoConfig())
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    _, stepped = guarded_update(model, optimizer, loss=math.inf, max_grad_norm=0.1)
    assert not stepped and not optimizer.state


def test_skipped_steps_show_in_the_metrics_row() -> None:
    model = create_model(TINY)
    metrics = grpo_step(model, make_optimizer(model, GrpoConfig()), _rows(math.nan), GrpoConfig())
    assert dataclasses.asdict(metrics)["skipped_nonfinite"] is True
