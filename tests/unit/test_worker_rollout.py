"""Planning a batch: row i is sampled with sample index i, groups follow the task order."""

from __future__ import annotations

import pytest
from proofpool.worker.rollout import plan_batch, work_units
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.task import InvalidProblemId, problem_from_id

from proofpool.core.rollout import RolloutSample


def test_rows_follow_tasks_and_groups_with_sample_index_equal_to_row() -> None:
    plan = plan_batch(
        ENVIRONMENT.taskset,
        ["add-1-2", "add-30-4"],
        group_size=3,
        sampling_seed=99,
        temperature=0.5,
        max_tokens=5,
        stop_ids=frozenset({2}),
    )
    assert plan.problem_ids == ("add-1-2",) * 3 + ("add-30-4",) * 3
    assert plan.group_ids == (0, 0, 0, 1, 1, 1)
    assert [r.sampler.sample_index for r in plan.requests] == list(range(6))
    assert {(r.sampler.seed, r.sampler.temperature, r.max_tokens, r.stop_ids) for r in plan.requests} == {
        (99, 0.5, 5, frozenset({2}))
    }
    assert plan.requests[0].prompt_tokens == tuple(problem_from_id("add-1-2").prompt_tokens())
    assert plan.requests[3].prompt_tokens == tuple(problem_from_id("add-30-4").prompt_tokens())


def test_a_bad_task_id_is_refused_before_generation() -> None:
    with pytest.raises(InvalidProblemId):
        plan_batch(
            ENVIRONMENT.taskset,
            ["add-1-2", "rm -rf"],
            group_size=2,
            sampling_seed=1,
            temperature=1.0,
            max_tokens=4,
            stop_ids=frozenset({2}),
        )


def test_work_units_count_completion_tokens() -> None:
    def sample(completion: tuple[int, ...]) -> RolloutSample:
        return RolloutSample("add-1-2", 0, (1, 2), completion, 1.0, 0.0, 1, 1.0, 0, b"")

    assert work_units([sample((5, 6, 7)), sample((8,)), sample(())]) == 4
