"""Staleness with a grace (`proofpool.validator.checks.version`): a file one version below the async window
is not stale when the checkpoint that pushed it out was published less than `stale_grace`
seconds before the submission, so two checkpoints published seconds apart never slash an honest
node that was assigned just before them. Anything older, or a slower publication, stays stale."""

from __future__ import annotations

import pytest
from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.version import check_version
from proofpool_arithmetic import ENVIRONMENT

WINDOW = 2
LATEST = 7
GRACE = 60.0
ONE_BELOW = LATEST - WINDOW - 1
"""4: within the window (4..6) until checkpoint 7 (= version + window + 1) was published."""


def submission(version: int) -> SubmissionFacts:
    return SubmissionFacts(pool_id=1, work_key=bytes(32), node="0x" + "11" * 20, work_units=8, model_version=version)


def rules(published_before: float | None, grace: float = GRACE) -> PoolRules:
    return PoolRules.of(
        ENVIRONMENT,
        latest_version=LATEST,
        async_window=WINDOW,
        stale_grace=grace,
        latest_published_before=published_before,
    )


@pytest.mark.parametrize(
    ("case", "version", "published_before"),
    [
        ("one below, the latest published seconds before the submission", ONE_BELOW, 3.0),
        ("one below, in the same block as the publication", ONE_BELOW, 0.0),
        ("one below, just inside the grace", ONE_BELOW, GRACE - 0.5),
        ("inside the window, however old the latest", LATEST - WINDOW, 10_000.0),
        ("inside the window, publication time unknown", LATEST, None),
    ],
)
def test_accepted(case: str, version: int, published_before: float | None) -> None:
    assert check_version(submission(version), rules(published_before)) is None, case


@pytest.mark.parametrize(
    ("case", "version", "published_before", "grace"),
    [
        ("one below, the grace over", ONE_BELOW, GRACE, GRACE),
        ("one below, long after the publication", ONE_BELOW, 3_600.0, GRACE),
        ("two below, however quick the publications", ONE_BELOW - 1, 1.0, GRACE),
        ("one below, publication time unknown", ONE_BELOW, None, GRACE),
        ("one below, grace switched off", ONE_BELOW, 1.0, 0.0),
        ("one below, a publication after the submission (cannot happen)", ONE_BELOW, -5.0, GRACE),
    ],
)
def test_stale(case: str, version: int, published_before: float | None, grace: float) -> None:
    verdict = check_version(submission(version), rules(published_before, grace))
    assert verdict is not None and not verdict.accepted, case
    assert verdict.reason == "stale_model_version"
    assert verdict.evidence == {
        "model_version": version,
        "latest_version": LATEST,
        "async_window": WINDOW,
        "oldest_accepted": LATEST - WINDOW,
        "latest_published_before": published_before,
        "stale_grace": grace,
    }


def test_the_grace_never_admits_a_version_above_the_latest() -> None:
    verdict = check_version(submission(LATEST + 1), rules(1.0))
    assert verdict is not None and verdict.reason == "unknown_model_version"


def test_without_the_facts_the_rules_keep_the_strict_window() -> None:
    """Callers that build PoolRules without the publication time (auditors offline) get no grace."""
    strict = PoolRules.of(ENVIRONMENT, latest_version=LATEST, async_window=WINDOW)
    verdict = check_version(submission(ONE_BELOW), strict)
    assert verdict is not None and verdict.reason == "stale_model_version"
