"""Group advantages: reward minus the group's mean, float32, no std normalisation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proofpool.core.rl import group_advantages


def test_reward_minus_group_mean() -> None:
    rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
    groups = [7, 7, 7, 7, 2, 2]
    assert group_advantages(rewards, groups) == [0.75, -0.25, -0.25, -0.25, 0.0, 0.0]


def test_groups_need_not_be_contiguous_or_sorted() -> None:
    assert group_advantages([1.0, 3.0, 0.0, 5.0], [9, 1, 9, 1]) == [0.5, -1.0, -0.5, 1.0]


def test_no_std_normalisation_for_near_uniform_groups() -> None:
    """7 of 8 right: the one wrong sample gets -0.875, not the ~-2.6 a std-normalised GRPO gives."""
    adv = group_advantages([1.0] * 7 + [0.0], [0] * 8)
    assert adv == [0.125] * 7 + [-0.875]


def test_uniform_group_is_all_zero_and_singletons_are_zero() -> None:
    assert group_advantages([0.3, 0.3, 0.3], [1, 1, 1]) == [0.0, 0.0, 0.0]
    assert group_advantages([5.0, -2.0], [1, 2]) == [0.0, 0.0]


def test_float32_semantics() -> None:
    adv = group_advantages([0.1, 0.2, 0.4], [0, 0, 0])
    r = np.array([0.1, 0.2, 0.4], dtype=np.float32)
    mean = np.float32(r.astype(np.float64).sum() / 3)
    assert adv == [float(x) for x in (r - mean)]
    assert all(float(np.float32(a)) == a for a in adv)


def test_empty_and_bad_input() -> None:
    assert group_advantages([], []) == []
    with pytest.raises(ValueError):
        group_advantages([1.0], [1, 2])
    with pytest.raises(ValueError):
        group_advantages([float("nan")], [1])
    with pytest.raises(ValueError):
        group_advantages([float("inf"), 0.0], [1, 1])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(-100, 100, width=32), st.integers(0, 5)), max_size=40))
def test_each_group_sums_to_about_zero_and_is_deterministic(rows) -> None:
    rewards = [r for r, _ in rows]
    groups = [g for _, g in rows]
    adv = group_advantages(rewards, groups)
    for g in set(groups):
        assert abs(sum(a for a, gg in zip(adv, groups, strict=True) if gg == g)) < 1e-3
    assert adv == group_advantages(rewards, groups)  # deterministic: exact comparison is safe
