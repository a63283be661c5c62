"""The aggregator's arithmetic (`proofpool.core.diloco.outer`): averaging, clipping and the outer
Nesterov step, which must equal `torch.optim.SGD`; the round's statistics and flags (`...stats`);
and the shard draw every member and validator recomputes (`...shard`)."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch

from proofpool.core.diloco.outer import average, clip_global_norm, outer_step
from proofpool.core.diloco.shard import node_rows, round_seed, shard_indices
from proofpool.core.diloco.spec import (
    CodecSpec,
    DilocoData,
    DilocoModel,
    DilocoSpec,
    InnerSpec,
    OuterSpec,
    ReplaySpec,
    RoundSpec,
)
from proofpool.core.diloco.stats import cosine, dot, global_norm, round_flags, sum_float64
from proofpool.core.spec import canonical_json

pytestmark = pytest.mark.timeout(60)

SHAPES = {"embed": (16, 8), "norm": (8,), "head": (4, 8)}


def _tensors(seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {name: torch.randn(*shape, generator=g) * scale for name, shape in SHAPES.items()}


# The outer step.


@pytest.mark.parametrize("nesterov", [True, False])
def test_outer_step_equals_torch_sgd_over_three_rounds(nesterov: bool) -> None:
    weights, deltas = _tensors(0), [_tensors(i, 0.01) for i in (1, 2, 3)]
    params = {name: torch.nn.Parameter(value.clone()) for name, value in weights.items()}
    sgd = torch.optim.SGD(list(params.values()), lr=0.7, momentum=0.9, nesterov=nesterov)
    outer = OuterSpec(lr=0.7, momentum=0.9, nesterov=nesterov)
    theta, momentum = dict(weights), None
    for delta in deltas:
        for name, param in params.items():
            param.grad = delta[name].clone()
        sgd.step()
        theta, momentum = outer_step(theta, momentum, delta, outer)
        for name, param in params.items():
            assert torch.allclose(theta[name], param.detach(), rtol=0, atol=1e-6)
            assert torch.allclose(momentum[name], sgd.state[param]["momentum_buffer"], rtol=0, atol=1e-6)
    assert not torch.equal(theta["embed"], weights["embed"])


def test_the_first_round_sets_momentum_to_the_delta_and_inputs_are_not_changed() -> None:
    weights, delta = _tensors(0), _tensors(1, 0.01)
    before = {k: v.clone() for k, v in weights.items()}
    theta, momentum = outer_step(weights, None, delta, OuterSpec(lr=0.5, momentum=0.9, nesterov=True))
    for name in SHAPES:
        assert torch.equal(momentum[name], delta[name])
        expected = weights[name] - 0.5 * (delta[name] + 0.9 * delta[name])
        assert torch.allclose(theta[name], expected, atol=1e-6)
        assert torch.equal(weights[name], before[name]) and theta[name].dtype == torch.float32
    plain, _ = outer_step(weights, None, delta, OuterSpec(lr=1.0, momentum=0.0, nesterov=False))
    assert all(torch.allclose(plain[k], weights[k] - delta[k], atol=0) for k in SHAPES)


def test_outer_step_refuses_mismatched_parameters() -> None:
    weights, delta = _tensors(0), _tensors(1)
    del delta["norm"]
    with pytest.raises(ValueError, match="norm"):
        outer_step(weights, None, delta, OuterSpec())
    with pytest.raises(ValueError, match="momentum"):
        outer_step(weights, {"embed": torch.zeros(16, 8)}, _tensors(1), OuterSpec())


# Averaging and clipping.


def test_average_is_the_float64_mean_in_order() -> None:
    deltas = [_tensors(i) for i in range(5)]
    mean = average(deltas)
    for name in SHAPES:
        expected = torch.stack([d[name].double() for d in deltas]).sum(0) / 5
        assert mean[name].dtype == torch.float32 and torch.equal(mean[name], expected.float())
    assert all(torch.equal(average(deltas[:1])[k], deltas[0][k]) for k in SHAPES)


def test_average_refuses_nothing_or_mismatched_names() -> None:
    with pytest.raises(ValueError):
        average([])
    odd = _tensors(2)
    odd["extra"] = torch.zeros(1)
    with pytest.raises(ValueError, match="extra"):
        average([_tensors(1), odd])


def test_clip_global_norm() -> None:
    delta = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([[4.0]])}
    clipped, norm = clip_global_norm(delta, 1.0)
    assert norm == 5.0 and math.isclose(global_norm(clipped), 1.0, rel_tol=1e-6)
    assert torch.allclose(clipped["a"], torch.tensor([0.6, 0.0])) and torch.allclose(
        clipped["b"], torch.tensor([[0.8]])
    )
    for max_norm in (0.0, 5.0, 100.0):
        same, norm = clip_global_norm(delta, max_norm)
        assert norm == 5.0 and all(torch.equal(same[k], delta[k]) for k in delta)


# Statistics and flags.


def test_norms_dots_and_cosines() -> None:
    a = {"x": torch.tensor([1.0, 2.0]), "y": torch.tensor([2.0])}
    b = {"x": torch.tensor([-1.0, -2.0]), "y": torch.tensor([-2.0])}
    assert global_norm(a) == 3.0 and dot(a, b) == -9.0
    assert cosine(a, b) == pytest.approx(-1.0) and cosine(a, a) == pytest.approx(1.0)
    assert cosine(a, {"x": torch.zeros(2), "y": torch.zeros(1)}) == 0.0
    with pytest.raises(ValueError):
        dot(a, {"x": torch.ones(2)})


def test_sums_do_not_depend_on_the_thread_count() -> None:
    """A norm recorded in a checkpoint is recomputed elsewhere: it must be the same bits."""
    x = torch.randn(300_001, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    threads = torch.get_num_threads()
    try:
        sums = set()
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            sums.add(sum_float64(x.square()))
    finally:
        torch.set_num_threads(threads)
    assert len(sums) == 1
    assert math.isclose(sums.pop(), math.fsum(x.square().tolist()), rel_tol=1e-12)
    assert sum_float64(torch.tensor([1.5])) == 1.5 and sum_float64(torch.zeros(0)) == 0.0


@pytest.mark.parametrize(
    ("norm", "reference", "cos", "flags"),
    [
        (1.0, 1.0, 0.5, []),
        (3.1, 1.0, 0.5, ["norm_high"]),
        (0.3, 1.0, 0.5, ["norm_low"]),
        (1.0, 1.0, -0.1, ["opposed"]),
        (10.0, 1.0, -1.0, ["norm_high", "opposed"]),
        (10.0, None, None, []),
        (10.0, 0.0, None, []),
    ],
)
def test_round_flags(norm: float, reference: float | None, cos: float | None, flags: list[str]) -> None:
    assert round_flags(norm, reference, cos) == flags


# The shard draw.

SPEC = DilocoSpec(
    model=DilocoModel(architecture="LlamaForCausalLM", vocab_size=512),
    dataset=DilocoData(sha256="ab" * 32, sequences=1000, seq_len=32, eval_sequences=100),
    inner=InnerSpec(steps=8, batch_size=4, lr=1e-3),
    outer=OuterSpec(),
    codec=CodecSpec(),
    round=RoundSpec(deadline_seconds=600, min_contributors=2),
    validation=ReplaySpec(),
)
NODE = "0xAbCdEf0123456789aBcDeF0123456789AbCdEf01"


def test_round_seed_is_the_documented_domain_separated_hash() -> None:
    expected = hashlib.sha256(b"proofpool/diloco-shard/v1" + canonical_json([7, 3, NODE.lower()])).digest()
    assert round_seed(7, 3, NODE) == round_seed(7, 3, NODE.lower()) == expected
    assert len({round_seed(7, 3, NODE), round_seed(8, 3, NODE), round_seed(7, 4, NODE)}) == 3


def test_shard_indices_are_the_documented_draws() -> None:
    seed = b"\x01" * 32
    rows = shard_indices(seed, 50, 37)
    assert rows[5] == int.from_bytes(hashlib.sha256(seed + (5).to_bytes(8, "big")).digest()[:8], "big") % 37
    assert all(0 <= r < 37 for r in rows) and len(set(rows)) > 20
    assert shard_indices(seed, 10, 37) == rows[:10]
    assert shard_indices(seed, 0, 37) == []
    with pytest.raises(ValueError):
        shard_indices(seed, 1, 0)


def test_node_rows_cover_every_step_and_never_the_held_out_tail() -> None:
    rows = node_rows(SPEC, 1, 0, NODE)
    assert len(rows) == SPEC.inner.steps * SPEC.inner.batch_size
    assert max(rows) < SPEC.training_rows and len(set(rows)) > 25
    assert rows == node_rows(SPEC, 1, 0, NODE.lower())
    assert rows != node_rows(SPEC, 1, 1, NODE) != node_rows(SPEC, 2, 0, NODE)
    assert rows != node_rows(SPEC, 1, 0, "0x" + "13" * 20)
