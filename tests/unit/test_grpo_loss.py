"""The GRPO loss pinned by hand-computed numbers: clipping, delta cap, constant normalizer, extras.

Every case uses normalizer 10, eps 0.2 / 0.2 and delta 4 unless it says otherwise. A token's
ratio r is set by logprobs = old_logprobs + log(r); "grad" is d loss / d logprobs, which for an
unclipped term -r * A / N is -r * A / N and for a clipped (constant) term is 0.
"""

from __future__ import annotations

import math

import pytest
import torch
from proofpool.trainer.batch import online_filter
from proofpool.trainer.config import GrpoConfig, default_normalizer
from proofpool.trainer.loss import LossInputs, grpo_loss
from pydantic import ValidationError

from proofpool.core.rollout import RolloutSample

CFG = GrpoConfig(normalizer=10.0)
OLD = -1.0


def _inputs(ratios: list[float], advantages: list[float], mask: list[bool] | None = None, **extra) -> LossInputs:
    """[tokens] inputs whose ratios are exactly `ratios` (up to float32 rounding of the log)."""
    old = torch.full((len(ratios),), OLD)
    logprobs = (old + torch.log(torch.tensor(ratios))).requires_grad_(True)
    mask_t = torch.tensor(mask if mask is not None else [True] * len(ratios))
    return LossInputs(logprobs, old, torch.tensor(advantages), mask_t, **extra)


def _loss_and_grad(x: LossInputs, cfg: GrpoConfig = CFG) -> tuple[float, list[float], dict[str, torch.Tensor]]:
    loss, metrics = grpo_loss(x, cfg)
    loss.backward()
    return float(loss.detach()), x.logprobs.grad.tolist(), metrics


def test_ratio_inside_clip_range_is_plain_policy_gradient() -> None:
    # r = 1.1, A = 2: -min(1.1 * 2, 1.1 * 2) / 10 = -0.22; grad -r * A / N = -0.22
    loss, grad, metrics = _loss_and_grad(_inputs([1.1], [2.0]))
    assert loss == pytest.approx(-0.22, rel=1e-6)
    assert grad == pytest.approx([-0.22], rel=1e-6)
    assert float(metrics["clip_low_frac"]) == float(metrics["clip_high_frac"]) == float(metrics["delta_frac"]) == 0.0


def test_high_clip_for_positive_advantage() -> None:
    # r = 1.5, A = 1: min(1.5, 1.2) = 1.2 -> loss -1.2 / 10 = -0.12, constant in logprobs: grad 0
    loss, grad, metrics = _loss_and_grad(_inputs([1.5], [1.0]))
    assert loss == pytest.approx(-0.12, rel=1e-6)
    assert grad == [0.0]
    assert float(metrics["clip_high_frac"]) == 1.0
    assert float(metrics["clip_low_frac"]) == 0.0


def test_low_clip_for_negative_advantage() -> None:
    # r = 0.5, A = -1: -min(-0.5, -0.8) = 0.8 -> loss 0.08, grad 0
    loss, grad, metrics = _loss_and_grad(_inputs([0.5], [-1.0]))
    assert loss == pytest.approx(0.08, rel=1e-6)
    assert grad == [0.0]
    assert float(metrics["clip_low_frac"]) == 1.0
    assert float(metrics["clip_high_frac"]) == 0.0


def test_pessimistic_min_leaves_the_other_side_unclipped() -> None:
    # A = +1, r = 0.5: -min(0.5, 0.8) = -0.5 (gradient -0.05); A = -0.5, r = 3: -min(-1.5, -0.6) = 1.5 (grad 0.15)
    loss, grad, metrics = _loss_and_grad(_inputs([0.5, 3.0], [1.0, -0.5]))
    assert loss == pytest.approx((-0.5 + 1.5) / 10, rel=1e-6)
    assert grad == pytest.approx([-0.05, 0.15], rel=1e-6)
    assert float(metrics["clip_low_frac"]) == float(metrics["clip_high_frac"]) == float(metrics["delta_frac"]) == 0.0


def test_delta_caps_a_huge_ratio_for_negative_advantage() -> None:
    # r = 100, A = -0.5: capped r = 4 -> -min(-2.0, -0.6) = 2.0 -> loss 0.2 (uncapped: 5.0), grad 0
    loss, grad, metrics = _loss_and_grad(_inputs([100.0], [-0.5]))
    assert loss == pytest.approx(0.2, rel=1e-6)
    assert grad == [0.0]
    assert float(metrics["delta_frac"]) == 1.0
    # the cap is the config's delta: with delta 8 the same token costs 8 * 0.5 / 10
    loss8, _, _ = _loss_and_grad(_inputs([100.0], [-0.5]), GrpoConfig(normalizer=10.0, delta=8.0))
    assert loss8 == pytest.approx(0.4, rel=1e-6)


def test_metrics_over_mixed_tokens() -> None:
    # inside (1.1, +2) | high clip (1.5, +1) | low clip (0.5, -1) | delta (100, -0.5) | masked out
    x = _inputs([1.1, 1.5, 0.5, 100.0, 7.0], [2.0, 1.0, -1.0, -0.5, 9.0], [True, True, True, True, False])
    loss, grad, metrics = _loss_and_grad(x)
    assert loss == pytest.approx((-2.2 - 1.2 + 0.8 + 2.0) / 10, rel=1e-6)
    assert grad == pytest.approx([-0.22, 0.0, 0.0, 0.0, 0.0], rel=1e-6)
    assert float(metrics["tokens"]) == 4
    assert float(metrics["clip_low_frac"]) == pytest.approx(0.25)
    assert float(metrics["clip_high_frac"]) == pytest.approx(0.25)
    assert float(metrics["delta_frac"]) == pytest.approx(0.25)
    assert float(metrics["ratio_mean"]) == pytest.approx((1.1 + 1.5 + 0.5 + 100.0) / 4, rel=1e-6)


def _padded_batch(pad_logprob: float, pad_adv: float) -> LossInputs:
    """[2, 3]: row 0 has 3 completion tokens, row 1 has 1 then padding holding the given values."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, OLD, OLD]])
    ratios = torch.tensor([[1.1, 0.9, 1.0], [1.05, 1.0, 1.0]])
    logprobs = old + torch.log(ratios)
    logprobs[1, 1:] = pad_logprob
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, pad_adv, pad_adv]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    return LossInputs(logprobs.requires_grad_(True), old, adv, mask)


def test_padding_is_ignored_whatever_it_holds() -> None:
    # row 0: A = 1 -> -(1.1 + 0.9 + 1.0); row 1: A = -2, r = 1.05 -> +2.1; sum -0.9 / 10 = -0.09
    expected = -0.09
    for pad_logprob, pad_adv in [(0.0, 0.0), (50.0, -3.0), (float("inf"), float("nan")), (float("nan"), 1e30)]:
        x = _padded_batch(pad_logprob, pad_adv)
        loss, grad, _ = _loss_and_grad(x)
        assert loss == pytest.approx(expected, rel=1e-6)
        assert grad[1][1:] == [0.0, 0.0]
        assert all(math.isfinite(g) for row in grad for g in row)


def test_normalizer_is_a_constant_not_the_token_count() -> None:
    # 2 tokens, r = 1, A = +1 and +3: loss -(1 + 3) / 10 = -0.4
    base, _, _ = _loss_and_grad(_inputs([1.0, 1.0], [1.0, 3.0]))
    assert base == pytest.approx(-0.4, rel=1e-6)
    # twice as many masked-out tokens: unchanged
    padded, _, _ = _loss_and_grad(_inputs([1.0] * 4, [1.0, 3.0, 5.0, 5.0], [True, True, False, False]))
    assert padded == pytest.approx(-0.4, rel=1e-6)
    # two more masked-in tokens with zero advantage: still -0.4 (a per-token mean would give -1.0)
    more, _, metrics = _loss_and_grad(_inputs([1.0] * 4, [1.0, 3.0, 0.0, 0.0]))
    assert more == pytest.approx(-0.4, rel=1e-6)
    assert float(metrics["tokens"]) == 4
    # and it is the config's normalizer
    halved, _, _ = _loss_and_grad(_inputs([1.0, 1.0], [1.0, 3.0]), GrpoConfig(normalizer=20.0))
    assert halved == pytest.approx(-0.2, rel=1e-6)


def test_entropy_and_kl_are_left_out_when_their_coefficients_are_zero() -> None:
    # NaN extras would poison the loss if they were touched at all
    nan = torch.full((2,), float("nan"))
    loss, grad, metrics = _loss_and_grad(_inputs([1.0, 1.0], [1.0, 3.0], entropy=nan, ref_logprobs=nan))
    assert loss == pytest.approx(-0.4, rel=1e-6)
    assert grad == pytest.approx([-0.1, -0.3], rel=1e-6)
    assert "entropy" not in metrics
    assert "kl" not in metrics


def test_entropy_bonus_lowers_the_loss() -> None:
    # -0.4 - 0.1 * (0.5 + 1.5) / 10 = -0.42; the masked-out entropy 9 does not count
    entropy = torch.tensor([0.5, 1.5, 9.0], requires_grad=True)
    x = _inputs([1.0, 1.0, 1.0], [1.0, 3.0, 0.0], [True, True, False], entropy=entropy)
    loss, _, metrics = _loss_and_grad(x, GrpoConfig(normalizer=10.0, entropy_coef=0.1))
    assert loss == pytest.approx(-0.42, rel=1e-6)
    assert float(metrics["entropy"]) == pytest.approx(1.0)
    assert entropy.grad.tolist() == pytest.approx([-0.01, -0.01, 0.0])  # the bonus trains the entropy too


def test_kl_k3_penalty() -> None:
    # logp = -1, ref = -1 + ln 2: d = ln 2, k3 = e^d - d - 1 = 1 - ln 2; loss -0.1 + 0.5 * k3 / 10
    # grad of k3 in logp: 1 - e^d = -1 -> total grad -0.1 + 0.5 * (-1) / 10 = -0.15
    ref = torch.tensor([OLD + math.log(2.0)], requires_grad=True)
    x = _inputs([1.0], [1.0], ref_logprobs=ref)
    loss, grad, metrics = _loss_and_grad(x, GrpoConfig(normalizer=10.0, kl_coef=0.5))
    k3 = 1 - math.log(2.0)
    assert loss == pytest.approx(-0.1 + 0.5 * k3 / 10, rel=1e-6)
    assert grad == pytest.approx([-0.15], rel=1e-5)
    assert float(metrics["kl"]) == pytest.approx(k3, rel=1e-6)
    assert ref.grad is None


def test_extras_are_required_when_their_coefficient_is_on() -> None:
    with pytest.raises(ValueError, match="entropy"):
        grpo_loss(_inputs([1.0], [1.0]), GrpoConfig(normalizer=10.0, entropy_coef=0.1))
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(_inputs([1.0], [1.0]), GrpoConfig(normalizer=10.0, kl_coef=0.1))


def test_gradients_flow_only_through_logprobs() -> None:
    old = torch.tensor([-1.0, -2.0], requires_grad=True)
    adv = torch.tensor([1.0, -1.0], requires_grad=True)
    logprobs = torch.tensor([-1.0, -2.0], requires_grad=True)  # r = 1
    loss, _ = grpo_loss(LossInputs(logprobs, old, adv, torch.tensor([True, True])), CFG)
    loss.backward()
    assert old.grad is None
    assert adv.grad is None
    assert logprobs.grad.tolist() == pytest.approx([-0.1, 0.1])  # -A / N at r = 1


def test_shapes_and_mask_dtype_are_checked() -> None:
    with pytest.raises(ValueError, match="advantages"):
        LossInputs(torch.zeros(3), torch.zeros(3), torch.zeros(2), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        LossInputs(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.ones(3))


def test_config_defaults_and_bounds() -> None:
    cfg = GrpoConfig()
    assert (cfg.eps_low, cfg.eps_high, cfg.delta, cfg.lr, cfg.max_grad_norm) == (0.2, 0.2, 4.0, 2e-4, 0.1)
    assert (cfg.entropy_coef, cfg.kl_coef, cfg.weight_decay) == (0.0, 0.0, 0.0)
    assert cfg.normalizer == default_normalizer(4, 256) == 1024.0
    with pytest.raises(ValidationError):
        GrpoConfig(delta=1.1)  # not above 1 + eps_high
    with pytest.raises(ValidationError):
        GrpoConfig(normalizer=0.0)
    with pytest.raises(ValidationError):
        GrpoConfig(eps_low=1.0)
    with pytest.raises(ValidationError):
        cfg.lr = 1.0  # frozen


def _row(group_id: int, reward: float, advantage: float, seed: int = 7) -> RolloutSample:
    return RolloutSample(
        problem_id="add-1-2",
        group_id=group_id,
        prompt_tokens=(1, 5, 14, 6, 15),
        completion_tokens=(7, 2),
        reward=reward,
        advantage=advantage,
        sampling_seed=seed,
        temperature=1.0,
        model_version=0,
        proofs=b"",
    )


def test_online_filter_drops_all_zero_groups() -> None:
    rows = [
        _row(0, 1.0, 0.5),
        _row(0, 0.0, -0.5),
        _row(1, 1.0, 0.0),  # group 1: everyone right -> all-zero advantages
        _row(1, 1.0, 0.0),
        _row(2, 0.0, 0.0),  # group 2: everyone wrong
        _row(2, 0.0, -0.0),
        _row(0, 0.0, 0.0, seed=8),  # another file's group 0: its own group, all zero
    ]
    result = online_filter(rows)
    assert result.rows == rows[:2]
    assert (result.groups_kept, result.groups_dropped, result.samples_dropped) == (1, 3, 5)
    assert online_filter([]).rows == []


def test_a_run_takes_its_pools_budget_unless_the_normalizer_was_set() -> None:
    derived = GrpoConfig().for_budget(1024, 64)
    assert derived.normalizer == default_normalizer(1024, 64) == 65_536.0
    assert derived.lr == GrpoConfig().lr  # nothing else changes
    assert GrpoConfig(normalizer=10.0).for_budget(1024, 64).normalizer == 10.0
