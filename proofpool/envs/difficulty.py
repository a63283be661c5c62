"""The difficulty filter's arithmetic: pass rates of the base model and the band a pool keeps.

GRPO learns nothing from a problem whose samples all earn the same reward: the group's advantages
are all zero. A problem the base model always solves or never solves therefore only costs
generation. INTELLECT-2 sampled its base model several times per problem and kept the problems
whose pass rate lay between 0.1 and 0.8; `proofpool env filter` does the same, and this module
holds the part that needs no model: counting passes, choosing the band, summarising the result.

A sample *passes* when its score is `correct` with reward 1.0 (a partial reward, e.g. some unit
tests passing, is not a pass: the filter asks whether the model can solve the problem). A sample
scored `inconclusive` says nothing about the model (the checker ran out of room for reasons that
are not the completion's), so it counts towards neither side of the rate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proofpool.core.environment import Score

HISTOGRAM_BINS: Final = 10
"""Bins of the summary's pass-rate histogram: [0, 0.1), [0.1, 0.2), ..., [0.9, 1.0]."""


@dataclass(frozen=True)
class PassRate:
    """How often the base model solved one problem: `passed` of `samples`, of which
    `inconclusive` could not be judged and are left out of the rate."""

    index: int
    samples: int
    passed: int
    inconclusive: int

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValueError(f"problem index must be >= 0, got {self.index}")
        if self.samples < 0 or self.passed < 0 or self.inconclusive < 0:
            raise ValueError(f"negative count in {self}")
        if self.passed + self.inconclusive > self.samples:
            raise ValueError(f"passed + inconclusive exceeds samples in {self}")

    @property
    def conclusive(self) -> int:
        """Samples that were judged one way or the other."""
        return self.samples - self.inconclusive

    @property
    def rate(self) -> float | None:
        """passed / conclusive samples; None when no sample was conclusive (nothing is known)."""
        return None if self.conclusive == 0 else self.passed / self.conclusive


def is_pass(score: Score) -> bool:
    """Whether a sample solved its problem: judged `correct` with the full reward."""
    return score.status == "correct" and score.reward == 1.0


def tally(index: int, scores: Iterable[Score]) -> PassRate:
    """The pass rate of problem `index` from the scores of its samples."""
    samples = passed = inconclusive = 0
    for score in scores:
        samples += 1
        if score.status == "inconclusive":
            inconclusive += 1
        elif is_pass(score):
            passed += 1
    return PassRate(index, samples, passed, inconclusive)


def check_band(low: float, high: float) -> None:
    """Refuse a band that cannot select anything sensible (`ValueError`): 0 <= low <= high <= 1.

    Checked before any generation, so a typo does not cost an hour of sampling."""
    if not 0.0 <= low <= high <= 1.0:  # also false for NaN
        raise ValueError(f"the band [{low}, {high}] is not within 0 <= low <= high <= 1")


def select_band(rates: Sequence[PassRate], low: float, high: float) -> list[int]:
    """The indices whose pass rate lies in [low, high] (both ends included), ascending.

    Problems with no conclusive sample are left out: their difficulty is unknown, and a pool
    should not spend generation on a problem its checker could not judge. Two rows for one index
    are refused (`ValueError`): the list becomes a pool's index list, where a repeat would double
    that problem's draw probability."""
    check_band(low, high)
    seen: set[int] = set()
    for row in rates:
        if row.index in seen:
            raise ValueError(f"problem {row.index} has more than one pass-rate row")
        seen.add(row.index)
    return sorted(row.index for row in rates if row.rate is not None and low <= row.rate <= high)


def _bin(row: PassRate) -> int:
    """The histogram bin of a measured row, in exact integer arithmetic (0.3 lands in bin 3, not
    in bin 2 through rounding); a rate of 1.0 goes to the last bin."""
    return min(HISTOGRAM_BINS - 1, HISTOGRAM_BINS * row.passed // row.conclusive)


def band_summary(rates: Sequence[PassRate], kept: Sequence[int]) -> dict[str, Any]:
    """A JSON-safe account of a filter run, for the report and for people choosing a band:
    how many problems were measured, how many kept, the spread of pass rates and their mean."""
    measured = [row for row in rates if row.rate is not None]
    counts = [0] * HISTOGRAM_BINS
    for row in measured:
        counts[_bin(row)] += 1
    return {
        "problems": len(rates),
        "measured": len(measured),
        "unmeasured": len(rates) - len(measured),
        "kept": len(kept),
        "samples": sum(row.samples for row in rates),
        "inconclusive_samples": sum(row.inconclusive for row in rates),
        "mean_rate": None if not measured else sum(row.rate or 0.0 for row in measured) / len(measured),
        "histogram": [
            {"from": b / HISTOGRAM_BINS, "to": (b + 1) / HISTOGRAM_BINS, "count": counts[b]}
            for b in range(HISTOGRAM_BINS)
        ],
    }
