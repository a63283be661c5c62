"""Check 3: the file was generated with a checkpoint the pool still trains on.

The trainer at step n learns from rollouts of checkpoints n - k .. n (async level k), so a file
from an older checkpoint is useless to it however honest, and a version newer than the newest one
published on-chain names weights nobody can have (nor recompute).

One grace: a file one version below the window is not stale when the checkpoint that pushed its
version out (the latest, version + async_window + 1) was published less than `stale_grace` seconds
before the submission's block. An honest node assigned a batch just before two checkpoints
published seconds apart cannot have known; slashing it would punish the trainer's pace, not the
node. Both times are chain timestamps, so anyone re-deriving the verdict gets the same answer.
"""

from __future__ import annotations

from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.verdict import Verdict, reject


def check_version(sub: SubmissionFacts, rules: PoolRules, rows: int = 0) -> Verdict | None:
    """`stale_model_version` below latest - async_window (bar the grace above),
    `unknown_model_version` above latest."""
    oldest = max(0, rules.latest_version - rules.async_window)
    facts = {
        "model_version": sub.model_version,
        "latest_version": rules.latest_version,
        "async_window": rules.async_window,
        "oldest_accepted": oldest,
    }
    if sub.model_version > rules.latest_version:
        return reject("unknown_model_version", rows, **facts)
    if sub.model_version < oldest and not within_stale_grace(sub, rules):
        return reject(
            "stale_model_version",
            rows,
            **facts,
            latest_published_before=rules.latest_published_before,
            stale_grace=rules.stale_grace,
        )
    return None


def within_stale_grace(sub: SubmissionFacts, rules: PoolRules) -> bool:
    """True for a version exactly one below the window whose push-out (the latest checkpoint) was
    published less than `rules.stale_grace` seconds before the submission; False when the
    publication time is unknown (`latest_published_before` None)."""
    pushed_out_by_latest = sub.model_version + rules.async_window + 1 == rules.latest_version
    age = rules.latest_published_before
    return pushed_out_by_latest and age is not None and 0 <= age < rules.stale_grace
