"""Behaviour log-probabilities: each row scored by the weights of the version that generated it,
laid out where the loss reads them, and a version not held loaded once."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from proofpool.trainer.batch import behavior_key, completion_logprobs, make_batch, place_logprobs
from proofpool.trainer.behavior import BehaviorPolicies, published_weights
from proofpool_arithmetic.build import ModelSpec, create_model
from proofpool_arithmetic.task import Problem

from tests.fixtures.local_rollouts import generate_rollouts


@pytest.fixture(scope="module")
def models():
    spec = {"hidden": 32, "layers": 2, "heads": 1}
    return create_model(ModelSpec(seed=5, **spec)).eval(), create_model(ModelSpec(seed=6, **spec)).eval()


def test_rows_are_scored_by_their_own_versions_weights(models) -> None:
    v0, v1 = models
    rows = [
        *generate_rollouts(v0, [Problem(3, 4)], group_size=3, sampling_seed=1, model_version=0),
        *generate_rollouts(v1, [Problem(9, 9)], group_size=3, sampling_seed=2, model_version=1),
    ]
    loaded: list[int] = []

    def load(version: int):
        loaded.append(version)
        return v1.state_dict()

    behavior = BehaviorPolicies(v0, load)
    behavior.remember(0, v0.state_dict())
    scored = behavior.logprobs(rows)
    assert loaded == [1]  # version 1 was not held: loaded once, then kept
    bf16 = {0: published_weights(v0.state_dict()), 1: published_weights(v1.state_dict())}
    for version in (0, 1):
        reference = create_model(ModelSpec(seed=5, hidden=32, layers=2, heads=1)).eval()
        reference.load_state_dict({k: t.float() for k, t in bf16[version].items()})
        expected = completion_logprobs(reference, [r for r in rows if r.model_version == version])
        for key, values in expected.items():
            assert scored[key] == pytest.approx(values, abs=1e-6)
    assert behavior.versions == [0, 1]
    behavior.forget_below(1)
    assert behavior.versions == [1]


def test_place_logprobs_puts_each_value_on_its_completion_position(models) -> None:
    rows = generate_rollouts(models[0], [Problem(12, 34)], group_size=2, sampling_seed=3)
    batch = make_batch(rows)
    values = {behavior_key(r): [-(i + 1.0) for i in range(len(r.completion_tokens))] for r in rows}
    placed = place_logprobs(rows, batch, values)
    for i, row in enumerate(rows):
        assert placed[i][batch.mask[i]].tolist() == values[behavior_key(row)]
    assert placed[~batch.mask].eq(0).all()
    wrong = {key: value[:-1] for key, value in values.items()}
    with pytest.raises(ValueError, match="behaviour log-probabilities"):
        place_logprobs(rows, batch, wrong)


def test_on_policy_rows_give_ratio_one(models) -> None:
    """Behaviour log-probabilities of the current weights are the step's own starting policy."""
    from proofpool.trainer.config import GrpoConfig
    from proofpool.trainer.step import grpo_step, make_optimizer

    model = create_model(ModelSpec(seed=5, hidden=32, layers=2, heads=1))
    rows = generate_rollouts(model.eval(), [Problem(1, 2), Problem(40, 2)], group_size=4, sampling_seed=7)
    # an untrained model solves nothing: give the groups a signal so the step is taken
    rows = [dataclasses.replace(r, advantage=0.5 if i % 2 else -0.5) for i, r in enumerate(rows)]
    cfg = GrpoConfig()
    metrics = grpo_step(model, make_optimizer(model, cfg), rows, cfg, behavior=completion_logprobs(model, rows))
    assert metrics.stepped
    assert metrics.ratio_mean == pytest.approx(1.0, abs=1e-5)
    assert torch.isfinite(torch.tensor(metrics.loss))
