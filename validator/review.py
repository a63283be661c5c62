"""Reviewing another validator's rejection: recompute the file (or bundle) in full and contest if it is valid.

A rejection in a pool with a challenge window waits before it slashes. Each validator's verdict
sender queues a review of every rejection it sees indexed (`proofpool.validator.review_store.to_review`);
this is what a validation slot does with one:

1. Skip what this validator must not or need not contest: its own rejection, its own node's or
   provider's work, a pool it does not serve, a rejection already executed or overturned, one
   whose window has closed, one it contested already.
2. Judge the file as a fresh submission, recomputing every row (`proofpool.validator.pipeline.judge`). An
   accepted file also claims its assigned batch (`proofpool.validator.pipeline.first_of_its_batch`): a
   second file of a batch another file holds stays rejected (`duplicate_batch`). A rejected bundle
   goes through the same two calls, so it is recomputed as its first judge did: every file, in
   bundle order, each file's batch claimed under the bundle key.
3. Publish the evidence document and record 'contest' (the file is valid) or 'upheld'. The
   verdict sender sends the contest (`proofpool.validator.verdicts`).
"""

from __future__ import annotations

import logging
from enum import StrEnum

from proofpool.validator import review_store
from proofpool.validator.evidence import publish_verdict
from proofpool.validator.pipeline import first_of_its_batch, judge
from proofpool.validator.resources import Resources
from proofpool.validator.review_store import Review
from proofpool.validator.submissions import assignment_overrides, get_submission, last_issued_batch, pool_manager

from proofpool.infra.chain.bindings import WorkStatus

log = logging.getLogger(__name__)


class ReviewOutcome(StrEnum):
    CONTEST = "contest"
    """The file is valid: a contest is recorded for the verdict sender."""
    UPHELD = "upheld"
    """The recomputation agrees with the rejection."""
    SKIPPED = "skipped"
    """Nothing to contest (see the module docstring, step 1)."""
    ALREADY_DECIDED = "already_decided"
    """A redelivered task: the review was decided before."""


def review(res: Resources, target: Review) -> ReviewOutcome:
    """Review one rejection (see the module docstring) and record the outcome."""
    me = res.address
    context = {"pool": target.pool_id, "work_key": "0x" + target.work_key.hex(), "validator": me}
    with res.connection() as conn:
        row = review_store.get(conn, target, me)
        if row is None or row.state != "queued":
            return ReviewOutcome.ALREADY_DECIDED
        sub = get_submission(conn, target.pool_id, target.work_key)
        served = res.served.allows(target.pool_id, lambda pool: pool_manager(conn, pool))
        overrides = assignment_overrides(conn, target.pool_id)
        issued = last_issued_batch(conn, target.pool_id, sub.node, sub.model_version)
    why_not = None if served else "pool not served by this validator"
    if why_not is None and me in (sub.node, sub.provider):
        why_not = "work of this validator's own node or provider"
    why_not = why_not or _settled_or_ours(res, target)
    if why_not is not None:
        with res.connection() as conn:
            review_store.mark_skipped(conn, target, me, why_not)
        log.info("rejection not reviewed: %s", why_not, extra=context)
        return ReviewOutcome.SKIPPED

    verdict = judge(res, sub, True, overrides, issued)
    with res.connection() as conn:
        verdict = first_of_its_batch(conn, sub, verdict)
        outcome = ReviewOutcome.CONTEST if verdict.accepted else ReviewOutcome.UPHELD
        _, digest = publish_verdict(
            res.store,
            target.pool_id,
            target.work_key,
            me,
            outcome.value,
            verdict,
            recomputed=True,
            review_of_block=target.rejected_block,
        )
        review_store.decide(conn, target, me, outcome.value, verdict.reason, digest)  # type: ignore[arg-type]
    log.info("rejection reviewed: %s", outcome.value, extra={**context, "reason": verdict.reason})
    return outcome


def _settled_or_ours(res: Resources, target: Review) -> str | None:
    """Why the chain leaves nothing for this validator to contest, or None."""
    pool = res.client.pool
    work = pool.get_work(target.pool_id, target.work_key)
    if work.status is not WorkStatus.REJECTED:
        return f"no longer rejected (on-chain {work.status.name})"
    rejection = pool.get_rejection(target.pool_id, target.work_key)
    if rejection is None:
        return "no longer rejected"
    if rejection.validator == res.address:
        return "this validator's own rejection"
    if res.address in rejection.contesters:
        return "contested by this validator already"
    now = int(res.client.w3.eth.get_block("latest")["timestamp"])
    if now >= rejection.executable_at:
        return "challenge window closed"
    return None
