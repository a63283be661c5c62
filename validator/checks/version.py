"""Check 3: the file was generated with a checkpoint the pool still trains on.

The trainer at step n learns from rollouts of checkpoints n - k .. n (async level k), so a file
from an older checkpoint is useless to it however honest, and a version newer than the newest one
published on-chain names weights nobody can have (nor recompute).
"""

from __future__ import annotations

from validator.checks.facts import PoolRules, SubmissionFacts
from validator.checks.verdict import Verdict, reject


def check_version(sub: SubmissionFacts, rules: PoolRules, rows: int = 0) -> Verdict | None:
    """`stale_model_version` below latest - async_window, `unknown_model_version` above latest."""
    oldest = max(0, rules.latest_version - rules.async_window)
    facts = {
        "model_version": sub.model_version,
        "latest_version": rules.latest_version,
        "async_window": rules.async_window,
        "oldest_accepted": oldest,
    }
    if sub.model_version > rules.latest_version:
        return reject("unknown_model_version", rows, **facts)
    if sub.model_version < oldest:
        return reject("stale_model_version", rows, **facts)
    return None
