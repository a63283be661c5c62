"""Assignments are a pure, secret-free function of (pool, node, checkpoint version, batch)."""

from __future__ import annotations

import numpy as np
import pytest
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.task import problem_from_id

from proofpool.core.assignment import (
    DEFAULT_ASSIGNMENT,
    AssignmentConfig,
    Checkpoint,
    assign,
    derive_seed,
    sampling_seed,
    task_ids,
)

TASKS = ENVIRONMENT.taskset

NODE = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
OTHER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC"


def test_same_inputs_give_the_same_assignment() -> None:
    checkpoint = Checkpoint(3, b"\x01" * 32, "s3://c/3")
    assert assign(TASKS, 1, NODE, checkpoint, 5) == assign(TASKS, 1, NODE, checkpoint, 5)


def test_address_case_does_not_matter() -> None:
    assert sampling_seed(1, NODE, 0, 0) == sampling_seed(1, NODE.lower(), 0, 0)


@pytest.mark.parametrize(
    "changed",
    [(2, NODE, 0, 0), (1, OTHER, 0, 0), (1, NODE, 1, 0), (1, NODE, 0, 1)],
    ids=["pool", "node", "version", "batch"],
)
def test_every_input_changes_seed_and_tasks(changed: tuple[int, str, int, int]) -> None:
    base = (1, NODE, 0, 0)
    assert sampling_seed(*changed) != sampling_seed(*base)
    assert task_ids(TASKS, *changed, count=8) != task_ids(TASKS, *base, count=8)


def test_seed_is_uint64_and_pinned() -> None:
    seed = sampling_seed(1, NODE, 0, 0)
    assert 0 <= seed < 2**64
    # pinned: a changed derivation would silently desynchronise workers and validators
    assert seed == 5162022723594674864
    assert task_ids(TASKS, 1, NODE, 0, 0, count=3) == ("add-75-49", "add-1-15", "add-59-84")
    assert derive_seed(b"sampling", 1, NODE, 0, 0) != derive_seed(b"problems", 1, NODE, 0, 0)


def test_task_ids_are_real_problem_ids() -> None:
    ids = task_ids(TASKS, 7, NODE, 2, 9, count=32)
    assert len(ids) == 32
    for problem_id in ids:
        assert problem_from_id(problem_id).problem_id == problem_id


def test_config_overrides_and_defaults() -> None:
    config = DEFAULT_ASSIGNMENT.with_overrides(batch_size=3, group_size=None, max_tokens=16)
    assert config == AssignmentConfig(batch_size=3, group_size=DEFAULT_ASSIGNMENT.group_size, max_tokens=16)
    assert DEFAULT_ASSIGNMENT.with_overrides() is DEFAULT_ASSIGNMENT
    assignment = assign(TASKS, 1, NODE, Checkpoint(), 0, config)
    assert (len(assignment.task_ids), assignment.group_size, assignment.max_tokens) == (3, 8, 16)
    assert assignment.checkpoint == Checkpoint(0, None, None)


def test_the_temperature_is_the_pools_and_rounded_as_rows_store_it() -> None:
    config = DEFAULT_ASSIGNMENT.with_overrides(temperature=0.7)
    assignment = assign(TASKS, 1, NODE, Checkpoint(), 0, config)
    assert assignment.temperature == float(np.float32(0.7)) != 0.7
    assert assign(TASKS, 1, NODE, Checkpoint(), 0).temperature == 1.0


@pytest.mark.parametrize("value", [0.0, 0.04, 10.5, float("nan"), float("inf")])
def test_temperature_bounds(value: float) -> None:
    with pytest.raises(ValueError, match="temperature"):
        AssignmentConfig(temperature=value)


@pytest.mark.parametrize(("field", "high"), [("batch_size", 4096), ("group_size", 4096), ("max_tokens", 131_072)])
def test_config_bounds(field: str, high: int) -> None:
    """Batch and group sizes up to 4,096; completion budgets up to 131,072 (long reasoning traces)."""
    for value in (0, -1, high + 1):
        with pytest.raises(ValueError, match=field):
            AssignmentConfig(**{field: value})
    assert getattr(AssignmentConfig(**{field: high}), field) == high


def test_negative_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        sampling_seed(-1, NODE, 0, 0)
