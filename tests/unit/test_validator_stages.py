"""The stage arithmetic of `proofpool.validator.stages`: which stages a set of timestamps yields."""

from __future__ import annotations

import pytest
from proofpool.validator.stages import STAGES, TOTAL, StageTimes


def times(**overrides: float | None) -> StageTimes:
    base: dict[str, float | None] = {
        "submitted": 100.0,
        "indexed": 100.4,
        "dispatched": 100.45,
        "claimed": 101.0,
        "decided": 102.5,
        "send_started": 103.0,
        "sent": 103.2,
        "verdict_block": 103.0,
    }
    base.update(overrides)
    return StageTimes(pool_id=1, work_key=b"\x01" * 32, **base)  # type: ignore[arg-type]


def test_every_stage_is_the_difference_of_its_ends() -> None:
    durations = times().durations()
    assert list(durations) == [*STAGES, TOTAL]
    assert durations == pytest.approx(
        {
            "indexing": 0.4,
            "dispatch": 0.05,
            "queue": 0.55,
            "checks": 1.5,
            "verdict_wait": 0.5,
            "verdict_tx": 0.2,
            "total": 3.0,
        }
    )


def test_stages_with_an_end_missing_are_left_out() -> None:
    durations = times(send_started=None, sent=None, verdict_block=None).durations()
    assert set(durations) == {"indexing", "dispatch", "queue", "checks"}


def test_a_block_time_rounded_down_past_the_next_stamp_is_clamped_to_zero() -> None:
    # The submission's block is stamped in whole seconds by the chain; the indexer's row can carry
    # an earlier database time than a block stamped from a faster clock.
    assert times(submitted=100.6, indexed=100.4).durations()["indexing"] == 0.0
