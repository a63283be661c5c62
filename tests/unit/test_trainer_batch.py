"""Rows to tensors (padding, mask alignment), per-token log-probabilities, the filters, and one
GRPO step on a tiny random model (micro-batching, nothing-to-learn steps)."""

from __future__ import annotations

import copy

import pytest
import torch
from proofpool.trainer.batch import make_batch, offline_filter, pass_rates, token_logprobs, token_logprobs_and_entropy
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.step import grpo_step, make_optimizer
from proofpool_arithmetic.build import ModelSpec, create_model
from proofpool_arithmetic.tokenizer import EOS_ID, PAD_ID

from proofpool.core.rollout import RolloutSample

P = PAD_ID


def _row(prompt: tuple[int, ...], completion: tuple[int, ...], advantage: float = 0.0, **kw: object) -> RolloutSample:
    fields: dict[str, object] = {
        "problem_id": "add-1-2",
        "group_id": 0,
        "reward": 0.0,
        "sampling_seed": 1,
        "temperature": 1.0,
        "model_version": 0,
        "proofs": b"",
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "advantage": advantage,
    }
    return RolloutSample(**(fields | kw))


ROWS = [
    _row((1, 5, 14, 6, 15), (7, EOS_ID), advantage=0.5),  # <bos>1+2= 3<eos>
    _row((1, 13, 14, 13, 15), (5, 12, 12, EOS_ID), advantage=-0.25),  # <bos>9+9= 188<eos>
    _row((1, 4, 15), (4,), advantage=1.0),  # shortest: no EOS (max tokens hit)
]


@pytest.fixture(scope="module")
def tiny_model():
    torch.manual_seed(0)
    return create_model(ModelSpec(seed=3, hidden=32, layers=2, heads=1)).eval()


def test_rows_are_right_padded_with_pad() -> None:
    batch = make_batch(ROWS)
    assert batch.input_ids.tolist() == [
        [1, 5, 14, 6, 15, 7, EOS_ID, P, P],
        [1, 13, 14, 13, 15, 5, 12, 12, EOS_ID],
        [1, 4, 15, 4, P, P, P, P, P],
    ]
    assert batch.attention_mask.tolist() == [
        [1, 1, 1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 1, 1, 1, 1],
        [1, 1, 1, 1, 0, 0, 0, 0, 0],
    ]
    assert batch.input_ids.dtype == torch.long


def test_mask_marks_exactly_the_positions_predicting_completion_tokens() -> None:
    batch = make_batch(ROWS)
    # position t predicts input_ids[t + 1]; row 0's prompt has 5 tokens, so positions 4 and 5
    assert batch.mask.int().tolist() == [
        [0, 0, 0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 1, 1, 1],
        [0, 0, 1, 0, 0, 0, 0, 0],
    ]
    for i, row in enumerate(ROWS):
        assert batch.targets[i][batch.mask[i]].tolist() == list(row.completion_tokens)
    assert batch.tokens == 7
    assert batch.advantages[batch.mask].tolist() == [0.5, 0.5, -0.25, -0.25, -0.25, -0.25, 1.0]
    assert batch.advantages[~batch.mask].abs().sum() == 0


def test_empty_batches_and_prompts_are_refused() -> None:
    with pytest.raises(ValueError):
        make_batch([])
    with pytest.raises(ValueError, match="empty prompt"):
        make_batch([_row((), (4,))])


def _manual_logprobs(model, row: RolloutSample) -> tuple[list[float], list[float]]:
    """One unpadded forward per row: log_softmax of the logits before each completion token,
    gathered at that token; and the entropy of those distributions."""
    ids = torch.tensor([[*row.prompt_tokens, *row.completion_tokens]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # [len, vocab]
    p = len(row.prompt_tokens)
    logp = torch.log_softmax(logits, dim=-1)[p - 1 : -1]  # [completion, vocab]
    picked = logp[torch.arange(len(row.completion_tokens)), torch.tensor(row.completion_tokens)]
    entropy = -(logp.exp() * logp).sum(-1)
    return picked.tolist(), entropy.tolist()


def test_token_logprobs_equal_a_manual_log_softmax_gather(tiny_model) -> None:
    batch = make_batch(ROWS)
    with torch.no_grad():
        logprobs = token_logprobs(tiny_model, batch)
        same, entropy = token_logprobs_and_entropy(tiny_model, batch)
    assert logprobs.shape == batch.mask.shape
    assert logprobs.dtype == torch.float32
    assert torch.equal(logprobs, same)
    assert logprobs[~batch.mask].abs().sum() == 0
    assert entropy[~batch.mask].abs().sum() == 0
    for i, row in enumerate(ROWS):
        expected, expected_entropy = _manual_logprobs(tiny_model, row)
        assert logprobs[i][batch.mask[i]].tolist() == pytest.approx(expected, abs=1e-5)
        assert entropy[i][batch.mask[i]].tolist() == pytest.approx(expected_entropy, abs=1e-5)
        assert all(v < 0 for v in expected)


def test_padding_content_does_not_change_logprobs(tiny_model) -> None:
    batch = make_batch(ROWS)
    other = copy.deepcopy(batch)
    other.input_ids[~other.attention_mask.bool()] = 9  # a real digit where PAD was
    with torch.no_grad():
        assert torch.allclose(token_logprobs(tiny_model, batch), token_logprobs(tiny_model, other), atol=1e-6)


def test_offline_filter_keeps_problems_with_mixed_outcomes() -> None:
    rates = {"add-1-1": 1.0, "add-2-2": 0.0, "add-3-3": 0.5, "add-4-4": 0.125, "add-5-5": 0.875}
    assert offline_filter(rates) == ["add-3-3", "add-4-4", "add-5-5"]
    assert offline_filter(rates, low=0.2, high=0.9) == ["add-3-3", "add-5-5"]
    assert offline_filter({}) == []
    with pytest.raises(ValueError):
        offline_filter(rates, low=0.5, high=0.5)
    with pytest.raises(ValueError):
        offline_filter({"add-1-1": 1.5})
    with pytest.raises(ValueError):
        offline_filter({"add-1-1": float("nan")})


def test_pass_rates_per_problem() -> None:
    rows = [
        _row((1,), (4,), problem_id="add-0-0", reward=1.0),
        _row((1,), (5,), problem_id="add-0-0", reward=0.0),
        _row((1,), (5,), problem_id="add-0-0", reward=0.0),
        _row((1,), (5,), problem_id="add-0-0", reward=1.0),
        _row((1,), (6,), problem_id="add-1-1", reward=0.0),
    ]
    assert pass_rates(rows) == {"add-0-0": 0.5, "add-1-1": 0.0}
    assert offline_filter(pass_rates(rows)) == ["add-0-0"]


# --- one GRPO step -------------------------------------------------------------------------------

STEP_ROWS = [
    _row((1, 5, 14, 6, 15), (7, EOS_ID), advantage=0.5, reward=1.0),
    _row((1, 5, 14, 6, 15), (8, EOS_ID), advantage=-0.5, reward=0.0),
    _row((1, 13, 14, 13, 15), (5, 12, 12, EOS_ID), advantage=0.75, reward=1.0, group_id=1, problem_id="add-9-9"),
    _row((1, 13, 14, 13, 15), (5, 12, EOS_ID), advantage=-0.25, reward=0.0, group_id=1, problem_id="add-9-9"),
    _row((1, 13, 14, 13, 15), (4, EOS_ID), advantage=-0.25, reward=0.0, group_id=1, problem_id="add-9-9"),
    _row((1, 13, 14, 13, 15), (4, 4, EOS_ID), advantage=-0.25, reward=0.0, group_id=1, problem_id="add-9-9"),
    _row((1, 4, 14, 4, 15), (4, EOS_ID), advantage=0.0, reward=1.0, group_id=2, problem_id="add-0-0"),
    _row((1, 4, 14, 4, 15), (4, EOS_ID), advantage=0.0, reward=1.0, group_id=2, problem_id="add-0-0"),
]


def _grads_after_step(model, micro_batch: int) -> list[torch.Tensor]:
    """Gradients one step accumulates; lr 0 and no effective clipping, so they are the raw gradient."""
    model = copy.deepcopy(model)
    cfg = GrpoConfig(normalizer=32.0, micro_batch=micro_batch, max_grad_norm=1e9)
    grpo_step(model, torch.optim.SGD(model.parameters(), lr=0.0), STEP_ROWS, cfg)
    return [p.grad.clone() for p in model.parameters()]


def test_micro_batching_accumulates_the_same_gradient(tiny_model) -> None:
    whole, single = _grads_after_step(tiny_model, 64), _grads_after_step(tiny_model, 1)
    assert sum(float(g.abs().sum()) for g in whole) > 0
    for a, b in zip(whole, single, strict=True):
        assert torch.allclose(a, b, atol=1e-7, rtol=1e-4)


def test_step_updates_the_model_and_reports(tiny_model) -> None:
    model = copy.deepcopy(tiny_model)
    cfg = GrpoConfig(normalizer=32.0, micro_batch=3)
    before = [p.detach().clone() for p in model.parameters()]
    metrics = grpo_step(model, make_optimizer(model, cfg), STEP_ROWS, cfg)
    assert metrics.stepped
    assert (metrics.groups_kept, metrics.groups_dropped, metrics.samples) == (2, 1, 6)
    assert metrics.tokens == 2 + 2 + 4 + 3 + 2 + 3
    assert metrics.mean_reward == pytest.approx(4 / 8)
    assert metrics.ratio_mean == pytest.approx(1.0, abs=1e-6)  # old logprobs: the same weights, before the update
    assert metrics.clip_low_frac == metrics.clip_high_frac == metrics.delta_frac == 0.0
    assert metrics.grad_norm > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_step_with_nothing_to_learn_leaves_the_model_alone(tiny_model) -> None:
    model = copy.deepcopy(tiny_model)
    cfg = GrpoConfig(normalizer=32.0)
    before = [p.detach().clone() for p in model.parameters()]
    metrics = grpo_step(model, make_optimizer(model, cfg), STEP_ROWS[-2:], cfg)
    assert not metrics.stepped
    assert (metrics.groups_kept, metrics.groups_dropped, metrics.samples, metrics.tokens) == (0, 1, 0, 0)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_kl_needs_a_reference_model(tiny_model) -> None:
    model = copy.deepcopy(tiny_model)
    cfg = GrpoConfig(normalizer=32.0, kl_coef=0.1, entropy_coef=0.01)
    with pytest.raises(ValueError, match="ref_model"):
        grpo_step(model, make_optimizer(model, cfg), STEP_ROWS, cfg)
    metrics = grpo_step(model, make_optimizer(model, cfg), STEP_ROWS, cfg, ref_model=tiny_model)
    assert metrics.stepped
