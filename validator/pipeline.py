"""Validating one submission, start to recorded decision, without Celery.

1. Re-read the indexed submission; only `pending` work of a served pool is judged (the
   allowlist of `proofpool.validator.resources.Resources.served`), and never work of this validator's own
   node or provider (`ComputePool` refuses such a verdict).
2. Claim it in PostgreSQL (`proofpool.validator.store.claim`): the first validator owns it, a redelivered
   task of the owner sees the recorded decision and stops; another validator stops if the owner
   decided, and otherwise retries (`HeldByAnother`) until the owner decides or its lease expires.
3. Decide whether it is recomputed in full: with `sample_rate` p < 1 a submission is selected when
   sha256(domain, block hash of its submission block, work key) falls below p. The block hash did
   not exist when the worker wrote the file (the file's sha256 is in the transaction of that
   block), so a worker cannot aim its cheating at unselected submissions. Unselected submissions
   get every check except the recomputation.
4. Fetch the file. Missing: retried (transient) until half the dispute window or the grace has
   passed since submission, then judged `missing`, so the verdict lands before the window closes.
5. Run the checks (`proofpool.validator.checks.run_checks`) and record the decision. An accepted file
   claims its assigned batch in the same transaction; a second file of one batch is
   `duplicate_batch` (`first_of_its_batch`). Sending it on-chain is the verdict sender's job
   (`proofpool.validator.verdicts`).

For a pool whose task set does not score reproducibly (`reproducible_scores` False: the `code`
environment), the checks do not compare rewards; an accepted file's rows are judged by this
validator (`judge_rows`), and the judgements are stored beside the file
(`proofpool.infra.storage.judged_key`) before the decision is recorded, so no accepted verdict
goes out without them: the trainer trains on those rewards, not the file's. The evidence counts
the rows whose rewards disagreed and the inconclusive ones.

A bundle (`submitWorkBundle`: one submission, many files) is judged file by file with the same
checks (`proofpool.validator.checks.bundle`): each file is fetched from its own `rollout_key`, a
missing one is waited for as above, every file is screened before any is recomputed, and the first
invalid file is the bundle's verdict (its key and index in the evidence). The selection is the
bundle key's, for all its files. An accepted bundle claims each file's batch under the bundle key
(a file resubmitted later, alone or in another bundle, is `duplicate_batch`), and a code pool's
judgements are stored per file. A training pool takes no bundles (`bundle_not_allowed`): its
aggregator and its round checks read one file per submission, at the submission's key.

A training pool (model URI `diloco://`, `proofpool.validator.training`) is judged by its own checks
(`proofpool.validator.checks.update`): its file is the node's pseudo-gradient at `update_key`, the
selection draws at the share its spec replays (`validation.sample_rate`), and the replay recomputes
the node's inner steps. Every training file claims batch 0 of its round, so a node's second file for
one round is `duplicate_batch`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from proofpool.validator import store
from proofpool.validator.checks import PoolRules, SubmissionFacts, Verdict, run_checks
from proofpool.validator.checks.bundle import bundle_facts, claim_batches, judge_bundle
from proofpool.validator.checks.scoring import JudgingTaskset, judge_rows, reproducible_scores
from proofpool.validator.checks.verdict import reject
from proofpool.validator.evidence import publish_verdict
from proofpool.validator.resources import Resources
from proofpool.validator.submissions import (
    AssignmentOverrides,
    IndexedSubmission,
    assignment_overrides,
    get_submission,
    last_issued_batch,
    pool_assignment,
    pool_manager,
)
from proofpool.validator.training import judge_training_file, training_pool
from psycopg import Connection

from proofpool.core.environment import Taskset
from proofpool.core.errors import ProofpoolError
from proofpool.core.rollout import read_rollouts
from proofpool.infra.storage import (
    JUDGED_CONTENT_TYPE,
    JudgedRow,
    judged_document,
    judged_key,
    rollout_key,
    update_key,
)
from proofpool.infra.storage.s3 import ObjectNotFound, ObjectStore, ObjectTooLarge

log = logging.getLogger(__name__)

SELECTION_DOMAIN: Final = b"proofpool/validate-selection/v1"


class FileNotYetAvailable(ProofpoolError):
    """The rollout file is not in the store (yet); retry until the missing-file deadline."""


class HeldByAnother(ProofpoolError):
    """Another validator claimed the submission and has not decided: retry later. If it died
    mid-task its lease runs out and the retry takes the submission over, so no submission is left
    without a verdict because the task that would have judged it was dropped."""


class Outcome(StrEnum):
    DECIDED = "decided"
    ALREADY_JUDGED = "already_judged"
    """The chain (as indexed) has a verdict already."""
    ALREADY_DECIDED = "already_decided"
    """We recorded a decision before (a redelivered task)."""
    OTHERS = "others"
    """Another validator owns the submission."""
    NOT_SERVED = "not_served"
    """The pool is not on this validator's allowlist (`Settings.served_pools` / `served_managers`)."""
    OWN_WORK = "own_work"
    """The submission is of this validator's own node or provider: the contract refuses the verdict,
    and a validator judging itself is no check at all. Left to the other validators."""


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    verdict: Verdict | None = None
    seconds: float = 0.0
    selected: bool = False


def validate(res: Resources, pool_id: int, work_key: bytes) -> Result:
    """Validate one submission and record the decision (see the module docstring)."""
    started = time.monotonic()
    context = {"pool": pool_id, "work_key": "0x" + work_key.hex(), "validator": res.address}
    with res.connection() as conn:
        sub = get_submission(conn, pool_id, work_key)
        if sub.status != "pending":
            return Result(Outcome.ALREADY_JUDGED)
        if not res.served.allows(pool_id, lambda pool: pool_manager(conn, pool)):
            log.info("pool not served here", extra=context)
            return Result(Outcome.NOT_SERVED)
        if res.address in (sub.node, sub.provider):
            log.warning("not judging our own node's work", extra={**context, "node": sub.node})
            return Result(Outcome.OWN_WORK)
        overrides = assignment_overrides(conn, pool_id)
        issued = last_issued_batch(conn, pool_id, sub.node, sub.model_version)
        claim = store.claim(conn, pool_id, work_key, res.address, lease_seconds=res.settings.validator_lease)
        held_for = store.claimed_elsewhere(conn, pool_id, work_key) if claim is None else None
    if held_for is not None:
        raise HeldByAnother(f"claimed by another validator, lease ends in {max(0.0, held_for):.0f} s")
    if claim is None:
        return Result(Outcome.OTHERS)
    if claim.decided:
        return Result(Outcome.ALREADY_DECIDED)

    selected = is_selected(res, sub)
    verdict = judge(res, sub, selected, overrides, issued)
    with res.connection() as conn:
        verdict = first_of_its_batch(conn, sub, verdict)
        kind = "accepted" if verdict.accepted else "invalid"
        # Stored before the verdict is recorded: no verdict is ever sent without its evidence.
        evidence, digest = publish_verdict(
            res.store, pool_id, work_key, res.address, kind, verdict, recomputed=selected
        )
        store.record_decision(conn, pool_id, work_key, res.address, kind, verdict.reason, evidence, digest)
    seconds = time.monotonic() - started
    log.info(
        "decided %s%s",
        "accepted" if verdict.accepted else "invalid",
        "" if verdict.accepted else f" ({verdict.reason})",
        extra={**context, "node": sub.node, "seconds": round(seconds, 3), "recomputed": selected},
    )
    return Result(Outcome.DECIDED, verdict, seconds, selected)


def first_of_its_batch(conn: Connection, sub: IndexedSubmission, verdict: Verdict) -> Verdict:
    """An accepted file claims its assigned batch (`store.claim_batch`); a second file of the same
    batch, the same rows in other bytes, is invalidated as `duplicate_batch` instead. An accepted
    bundle claims each of its files' batches under the bundle key (`claim_batches`), in a savepoint
    that is rolled back if one is taken: an invalid bundle holds no batch."""
    if sub.files is not None:
        return _bundle_claims(conn, sub, verdict)
    batch = verdict.evidence.get("batch") if verdict.accepted else None
    if batch is None:
        return verdict
    owner = store.claim_batch(conn, sub.pool_id, sub.node, sub.model_version, int(batch), sub.work_key)
    if owner == sub.work_key:
        return verdict
    return reject(
        "duplicate_batch", verdict.rows, batch=batch, model_version=sub.model_version, first_work_key=owner.hex()
    )


def judge(
    res: Resources, sub: IndexedSubmission, selected: bool, overrides: AssignmentOverrides, last_issued: int
) -> Verdict:
    """The verdict on `sub`, whose pool's operator set `overrides` of its assignment settings and
    handed the node batches up to `last_issued` of its version; raises `FileNotYetAvailable` while
    a missing file may still appear."""
    training = training_pool(res, sub.pool_id)
    if training is not None and sub.files is not None:
        return reject("bundle_not_allowed", bundle_files=len(sub.files))
    if training is not None:
        key = update_key(sub.pool_id, sub.node, sub.work_key.hex())
        data = fetch_file(res, sub, key, res.settings.upload_max_bytes)
        return data if isinstance(data, Verdict) else judge_training_file(res, sub, training, data, selected)
    facts = SubmissionFacts(sub.pool_id, sub.work_key, sub.node, sub.work_units, sub.model_version)
    environment = res.models.environment(sub.pool_id)
    assignment = pool_assignment(environment, overrides)
    # The window as of the block that recorded the submission: a file that was fresh when
    # submitted is not made stale by the time it waited for a validator.
    latest = res.client.pool.latest_checkpoint(sub.pool_id, block=sub.block_number)
    rules = PoolRules.of(
        environment,
        latest_version=latest.version,
        async_window=res.settings.async_window,
        stale_grace=res.settings.validator_stale_grace,
        latest_published_before=sub.submitted_at.timestamp() - latest.published_at if latest.published_at else None,
        max_file_bytes=res.settings.upload_max_bytes,  # nothing larger can have been uploaded honestly
        max_completion_tokens=assignment.max_tokens,
        temperature=assignment.temperature,
        batch_size=assignment.batch_size,
        group_size=assignment.group_size,
        last_issued_batch=last_issued,
    )
    if sub.files is not None:
        return judge_files(res, sub, rules, selected)
    data = fetch_file(res, sub, rollout_key(sub.pool_id, sub.node, sub.work_key.hex()), rules.max_file_bytes)
    if isinstance(data, Verdict):
        return data
    verdict = run_checks(
        data,
        facts,
        rules,
        lambda version: res.models.get(sub.pool_id, version),
        sample_rate=1.0 if selected else 0.0,
    )
    if verdict.accepted and not reproducible_scores(rules.taskset):
        verdict = record_judgements(res.store, facts, rules.taskset, data, verdict, res.address)
    return verdict


def judge_files(res: Resources, sub: IndexedSubmission, rules: PoolRules, selected: bool) -> Verdict:
    """The verdict on the bundle `sub` of an RL pool (`judge_bundle`): each file fetched from its own
    `rollout_key` with the single file's missing-file rule, recomputed in full when the bundle is
    selected, and for a pool without reproducible scores each file's judgements stored once the
    whole bundle passed."""
    assert sub.files is not None
    files = bundle_facts(sub.pool_id, sub.node, sub.model_version, sub.files)

    def fetch(facts: SubmissionFacts) -> bytes | Verdict:
        return fetch_file(res, sub, rollout_key(sub.pool_id, sub.node, facts.work_key.hex()), rules.max_file_bytes)

    def accepted(index: int, facts: SubmissionFacts, verdict: Verdict) -> Verdict:
        data = fetch(facts)  # fetched again: a bundle's files are not all held in memory
        if isinstance(data, Verdict):
            return data
        return record_judgements(res.store, facts, rules.taskset, data, verdict, res.address)

    return judge_bundle(
        files,
        fetch,
        rules,
        lambda version: res.models.get(sub.pool_id, version),
        sample_rate=1.0 if selected else 0.0,
        not_yet=(FileNotYetAvailable,),
        accepted=None if reproducible_scores(rules.taskset) else accepted,
    )


def _bundle_claims(conn: Connection, sub: IndexedSubmission, verdict: Verdict) -> Verdict:
    """`first_of_its_batch` for a bundle (see there)."""
    if not verdict.accepted:
        return verdict

    def claim(batch: int) -> bytes:
        return store.claim_batch(conn, sub.pool_id, sub.node, sub.model_version, batch, sub.work_key)

    try:
        with conn.transaction():  # a savepoint inside the caller's transaction
            claimed = claim_batches(sub.work_key, sub.model_version, verdict, claim)
            if not claimed.accepted:
                raise _ClaimsRolledBack(claimed)
    except _ClaimsRolledBack as rolled_back:
        return rolled_back.verdict
    return claimed


class _ClaimsRolledBack(Exception):
    """Leaves the claims' savepoint with the `duplicate_batch` verdict, rolling the claims back."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


def fetch_file(res: Resources, sub: IndexedSubmission, key: str, max_bytes: int) -> bytes | Verdict:
    """The submitted file at `key`, or the verdict `file_too_large` or `missing`; raises
    `FileNotYetAvailable` while a missing file may still appear (`missing_deadline`)."""
    try:
        return res.store.get_object(key, max_bytes=max_bytes)
    except ObjectTooLarge:
        return reject("file_too_large", max_bytes=max_bytes)
    except ObjectNotFound:
        waited = time.time() - sub.submitted_at.timestamp()
        deadline = missing_deadline(res, sub.pool_id)
        if waited < deadline:
            raise FileNotYetAvailable(
                f"file {key} not in the store after {waited:.0f} s (judged missing after {deadline:.0f} s)"
            ) from None
        return reject("missing", waited_seconds=round(waited, 1))


def record_judgements(
    store: ObjectStore, sub: SubmissionFacts, taskset: Taskset, data: bytes, verdict: Verdict, validator: str
) -> Verdict:
    """Judge every row of the accepted file `data` (a pool without reproducible scores), store the
    judgements at `judged_key` and return `verdict` with their counts in its evidence.

    The file passed every check, so it parses; a task set that cannot judge is a bug (TypeError).
    """
    if not isinstance(taskset, JudgingTaskset):
        raise TypeError(f"task set {type(taskset).__name__} has no `judge`, but its scores are not reproducible")
    _, samples = read_rollouts(data)
    judged = judge_rows(samples, taskset)
    rows = [
        JudgedRow(s.problem_id, s.group_id, j.reward, j.status) for s, j in zip(samples, judged.judgements, strict=True)
    ]
    document = judged_document(sub.work_key.hex(), validator, rows)
    store.put_object(judged_key(sub.pool_id, sub.node, sub.work_key.hex()), document, content_type=JUDGED_CONTENT_TYPE)
    return dataclasses.replace(verdict, evidence={**verdict.evidence, **judged.evidence()})


def missing_deadline(res: Resources, pool_id: int) -> float:
    """Seconds after submission a file may still arrive: the grace, at most half the dispute window."""
    window = res.client.pool.get_pool(pool_id).dispute_window
    return min(res.settings.validator_missing_grace, window / 2)


def is_selected(res: Resources, sub: IndexedSubmission) -> bool:
    """Whether `sub` is recomputed in full (always at sample rate 1): at the validator's sample rate,
    or for a training pool its spec's (`validation.sample_rate`, the share of files replayed)."""
    training = training_pool(res, sub.pool_id)
    rate = res.settings.validator_sample_rate if training is None else training.spec.validation.sample_rate
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    return drawn(rate, bytes(res.client.w3.eth.get_block(sub.block_number)["hash"]), sub.work_key)


def drawn(rate: float, unknown: bytes, work_key: bytes) -> bool:
    """The selection at sample rate `rate`: sha256(domain, `unknown`, work key) below `rate`, where
    `unknown` is bytes the worker could not know when it wrote the file (its submission block's hash)."""
    draw = hashlib.sha256(SELECTION_DOMAIN + unknown + work_key).digest()
    return int.from_bytes(draw[:8], "big") / 2**64 < rate
