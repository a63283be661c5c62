"""The file-level verdict: TOPLOC agreement averaged over every chunk, then the tie-steering test.

Per-row TOPLOC thresholds leave room for one chunk's bad luck; a model that is slightly off (an
older checkpoint, quantized weights) stays inside them on most rows but drifts on all of them, and
the mean over a file's chunks shows it. Synthetic verdicts stand in for recomputations here; the
real model's numbers are in tests/integration/test_detection_matrix.py and bench/detection.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from proofpool.core.sampling import SamplingCheck
from proofpool.core.toploc import ChunkCheck
from proofpool.core.toploc.verify import MAX_EXP_MISMATCHES, MAX_MANT_ERR_MEAN, NO_MATCH, toploc_verdict
from proofpool.inference.check import (
    MAX_FILE_EXP_MISMATCH_RATE,
    MAX_FILE_MANT_ERR_MEAN,
    FileStatistic,
    SampleVerdict,
    file_statistic,
    file_verdict,
)

TOPK = 128


def _sampling(flip_probs: tuple[float, ...] = (), flipped: tuple[bool, ...] = ()) -> SamplingCheck:
    return SamplingCheck(
        n_tokens=4,
        reproduced=4,
        tolerated_ties=sum(flipped),
        first_mismatch=None,
        eos_ok=True,
        length_ok=True,
        max_gap=0.0,
        flip_probs=flip_probs,
        flipped=flipped,
    )


def _row(row: int, chunks: list[ChunkCheck], sampling: SamplingCheck | None = None) -> SampleVerdict:
    ok, reason = toploc_verdict(chunks)
    return SampleVerdict(ok, reason, tuple(chunks), sampling or _sampling(), row)


def _file(rng: np.random.Generator, rows: int, mant_center: float, exp_rate: float) -> list[SampleVerdict]:
    """Rows of one chunk each whose statistics scatter around the given centers."""
    out = []
    for i in range(rows):
        mant = float(np.clip(rng.normal(mant_center, 0.4 * mant_center + 0.05), 0, None))
        exp = int(rng.binomial(TOPK, exp_rate))
        out.append(_row(i, [ChunkCheck(exp, mant, round(mant))]))
    return out


def test_statistic_averages_usable_chunks_only() -> None:
    verdicts = [
        _row(0, [ChunkCheck(2, 1.0, 1.0), ChunkCheck(4, 3.0, 2.0)]),
        _row(1, [ChunkCheck(0, 2.0, 2.0)]),
        _row(2, [ChunkCheck(128, NO_MATCH, NO_MATCH)]),  # no exponent matched: its row fails on its own
        _row(3, [ChunkCheck(128, NO_MATCH, NO_MATCH, error="malformed")]),
    ]
    assert file_statistic(verdicts) == FileStatistic(chunks=3, mant_err_mean=2.0, exp_mismatch_rate=6 / (3 * TOPK))


def test_no_chunks_is_a_pass() -> None:
    assert file_statistic([]) == FileStatistic(0, 0.0, 0.0)
    whole = file_verdict([])
    assert (whole.accepted, whole.reason, whole.ties.near_ties) == (True, None, 0)


def test_drift_inside_every_row_threshold_rejects_the_file() -> None:
    """Every chunk passes toploc_verdict, yet the file's mean sits far above honest files."""
    rng = np.random.default_rng(0)
    mant = (MAX_FILE_MANT_ERR_MEAN + MAX_MANT_ERR_MEAN) / 2
    drifted = [_row(i, [ChunkCheck(MAX_EXP_MISMATCHES // 2, mant, mant)]) for i in range(64)]
    assert all(v.accepted for v in drifted)
    whole = file_verdict(drifted)
    assert (whole.accepted, whole.reason) == (False, "file_statistic")
    assert whole.statistic.mant_err_mean == pytest.approx(mant)
    rng.shuffle(drifted)  # order does not matter
    assert file_verdict(drifted).reason == "file_statistic"


def test_exponent_drift_alone_rejects_the_file() -> None:
    exp = int(np.ceil(MAX_FILE_EXP_MISMATCH_RATE * TOPK)) + 1
    assert exp <= MAX_EXP_MISMATCHES  # passes per row
    drifted = [_row(i, [ChunkCheck(exp, 0.5, 0.0)]) for i in range(64)]
    assert all(v.accepted for v in drifted)
    assert file_verdict(drifted).reason == "file_statistic"


@pytest.mark.parametrize("seed", range(200))
def test_honest_spread_passes(seed: int) -> None:
    """Files of 8-64 rows scattered around the honest centers the bench measured (docs) pass."""
    rng = np.random.default_rng(seed)
    verdicts = _file(rng, int(rng.integers(8, 65)), mant_center=MAX_FILE_MANT_ERR_MEAN / 3, exp_rate=0.005)
    whole = file_verdict(verdicts)
    assert whole.accepted, whole.statistic


def test_rejected_rows_do_not_count() -> None:
    """A row that failed on its own already rejects the file; the statistic covers the others."""
    rng = np.random.default_rng(1)
    verdicts = _file(rng, 16, mant_center=0.5, exp_rate=0.0)
    verdicts.append(_row(16, [ChunkCheck(100, 40.0, 40.0)]))
    assert not verdicts[-1].accepted
    assert file_statistic([v for v in verdicts if v.accepted]) == file_verdict(verdicts).statistic
    assert file_verdict(verdicts).accepted


def test_tie_steering_is_reported_after_the_statistic() -> None:
    steered = _sampling(flip_probs=(0.01,) * 12, flipped=(True,) * 12)
    rows = [_row(0, [ChunkCheck(0, 0.5, 0.0)], steered)]
    whole = file_verdict(rows)
    assert (whole.accepted, whole.reason, whole.ties.flips) == (False, "tie_steering", 12)
    drifted = [dataclasses.replace(rows[0], toploc=(ChunkCheck(0, MAX_FILE_MANT_ERR_MEAN + 1, 0.0),))]
    assert file_verdict(drifted).reason == "file_statistic"
