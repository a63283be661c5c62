"""The difficulty filter's arithmetic (`proofpool.envs.difficulty`): pass rates, the band, the summary."""

from __future__ import annotations

import json
import math

import pytest

from proofpool.core.environment import Score
from proofpool.envs.difficulty import PassRate, band_summary, check_band, is_pass, select_band, tally


def test_rate_is_passed_over_conclusive_samples() -> None:
    assert PassRate(0, samples=8, passed=2, inconclusive=0).rate == 0.25
    assert PassRate(0, samples=8, passed=3, inconclusive=2).rate == 0.5
    assert PassRate(0, samples=4, passed=0, inconclusive=0).rate == 0.0


def test_rate_is_none_without_a_conclusive_sample() -> None:
    assert PassRate(3, samples=4, passed=0, inconclusive=4).rate is None
    assert PassRate(3, samples=0, passed=0, inconclusive=0).rate is None


@pytest.mark.parametrize(
    ("samples", "passed", "inconclusive"), [(2, 3, 0), (2, 1, 2), (-1, 0, 0), (2, -1, 0), (2, 0, -1)]
)
def test_impossible_counts_are_refused(samples: int, passed: int, inconclusive: int) -> None:
    with pytest.raises(ValueError):
        PassRate(0, samples, passed, inconclusive)


def test_a_pass_is_correct_with_the_full_reward() -> None:
    assert is_pass(Score(1.0, "correct"))
    assert not is_pass(Score(0.5, "correct"))  # partial credit is not solving it
    assert not is_pass(Score(0.0, "incorrect"))
    assert not is_pass(Score(1.0, "inconclusive"))


def test_tally_leaves_inconclusive_samples_out() -> None:
    scores = [Score(1.0, "correct"), Score(0.0, "unparsed"), Score(0.0, "inconclusive"), Score(0.0, "timeout")]
    row = tally(7, scores)
    assert row == PassRate(7, samples=4, passed=1, inconclusive=1)
    assert row.rate == pytest.approx(1 / 3)


def test_band_bounds_are_inclusive() -> None:
    rates = [
        PassRate(0, 10, 0, 0),  # 0.0
        PassRate(1, 10, 1, 0),  # 0.1: the low edge
        PassRate(2, 10, 5, 0),  # 0.5
        PassRate(3, 10, 8, 0),  # 0.8: the high edge
        PassRate(4, 10, 9, 0),  # 0.9
        PassRate(5, 10, 10, 0),  # 1.0
    ]
    assert select_band(rates, 0.1, 0.8) == [1, 2, 3]
    assert select_band(rates, 0.0, 1.0) == [0, 1, 2, 3, 4, 5]
    assert select_band(rates, 0.5, 0.5) == [2]
    assert select_band(rates, 0.0, 0.0) == [0]


def test_edges_hold_for_rates_computed_after_inconclusive_samples() -> None:
    """3 of 10 conclusive samples is exactly 0.3 however many samples were inconclusive."""
    rates = [PassRate(0, 12, 3, 2), PassRate(1, 13, 7, 3)]
    assert select_band(rates, 0.3, 0.7) == [0, 1]


def test_band_result_is_in_ascending_index_order() -> None:
    rates = [PassRate(9, 4, 2, 0), PassRate(2, 4, 1, 0), PassRate(5, 4, 3, 0)]
    assert select_band(rates, 0.0, 1.0) == [2, 5, 9]


def test_inconclusive_samples_do_not_count_against_a_problem() -> None:
    """1 pass of 4 samples, 2 of them inconclusive: rate 0.5, inside [0.4, 1] (0.25 would not be)."""
    assert select_band([PassRate(0, 4, 1, 2)], 0.4, 1.0) == [0]


def test_a_problem_with_only_inconclusive_samples_is_excluded() -> None:
    rates = [PassRate(0, 4, 0, 4), PassRate(1, 4, 0, 0), PassRate(2, 0, 0, 0)]
    assert select_band(rates, 0.0, 1.0) == [1]


@pytest.mark.parametrize(("low", "high"), [(-0.1, 0.5), (0.2, 1.1), (0.8, 0.1), (math.nan, 0.5), (0.1, math.nan)])
def test_bad_bands_are_refused(low: float, high: float) -> None:
    with pytest.raises(ValueError, match="band"):
        select_band([PassRate(0, 4, 2, 0)], low, high)
    with pytest.raises(ValueError, match="band"):
        check_band(low, high)


def test_a_repeated_index_is_refused() -> None:
    with pytest.raises(ValueError, match="more than one"):
        select_band([PassRate(1, 4, 2, 0), PassRate(1, 4, 3, 0)], 0.0, 1.0)


def test_summary_histogram_counts_every_measured_problem_once() -> None:
    rates = [PassRate(i, 10, i, 0) for i in range(11)] + [PassRate(11, 3, 0, 3)]  # rates 0.0 .. 1.0, one unknown
    kept = select_band(rates, 0.1, 0.8)
    summary = band_summary(rates, kept)
    counts = [b["count"] for b in summary["histogram"]]
    assert len(counts) == 10 and sum(counts) == summary["measured"] == 11
    assert counts == [1, 1, 1, 1, 1, 1, 1, 1, 1, 2]  # exactly 0.3 is in bin 3; 1.0 joins the last bin
    assert [b["from"] for b in summary["histogram"]][:3] == [0.0, 0.1, 0.2] and summary["histogram"][-1]["to"] == 1.0
    assert summary["problems"] == 12 and summary["unmeasured"] == 1 and summary["kept"] == len(kept) == 8
    assert summary["samples"] == 113 and summary["inconclusive_samples"] == 3
    assert summary["mean_rate"] == pytest.approx(0.5)
    assert json.loads(json.dumps(summary)) == summary


def test_summary_of_nothing_measured_has_no_mean() -> None:
    summary = band_summary([PassRate(0, 2, 0, 2)], [])
    assert summary["mean_rate"] is None and summary["measured"] == 0 and summary["kept"] == 0
    assert sum(b["count"] for b in summary["histogram"]) == 0
    assert band_summary([], [])["problems"] == 0
