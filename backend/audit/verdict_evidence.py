"""Each verdict on a submission with its evidence document, checked against the commitment its
transaction carries.

A validator stores its evidence (canonical JSON, `proofpool.validator.evidence`) at
`proofpool.infra.storage.evidence_key` before it sends the verdict, and the transaction's calldata
commits to it: `invalidateWork(pool, key, reason, evidenceHash)` to the sha256 of one document,
`contestRejection(pool, key, evidenceHash)` to the contest's own document (kept beside the
rejection's, `review_of_block` naming the rejection's block), `attestWork(pool, keys, evidenceHash)`
to the sha256 of the batch's document hashes in key order (a key without a document counts as 32
zero bytes). An attestation sent after a quorum overturned a rejection commits to the attesting
validator's contest document directly.

Which verdicts, and which transaction carries each commitment, is `verdict_targets`; reading and
comparing documents is `evidence_documents`. A verdict's answer is its document (parsed; at most
`MAX_DOCUMENT_BYTES`), the commitment, and a `status`: `matches`, `mismatch`, `missing` (no
document in the store), `unreadable` (too large, or not a JSON object) or `no_commitment` (the
transaction carries none: not found, not a verdict call of the ComputePool, or the zero hash of a
verdict given without evidence). A missing or garbled document is an answer, never an error; an
unreachable chain or store is `ServiceUnavailable`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from proofpool.backend.audit.chain_view import Call, ChainView, ChainViews
from proofpool.backend.audit.evidence_documents import (
    MAX_DOCUMENT_BYTES,
    Document,
    disagreements,
    parse_document,
    read_document,
)
from proofpool.backend.audit.ledger_snapshot import read_snapshot
from proofpool.backend.audit.verdict_targets import Target, VerdictKind, hex_of, verdict_targets
from psycopg import AsyncConnection
from pydantic import ConfigDict, with_config

from proofpool.core.evidence import batch_evidence_sha256
from proofpool.infra.chain.bindings import NO_EVIDENCE
from proofpool.infra.storage import ObjectStore, evidence_key

log = logging.getLogger(__name__)

MAX_BATCH_KEYS = 256
"""Largest attestWork batch whose documents are read (the validator sends at most 256 keys)."""
FETCH_THREADS = 8
"""Documents of one batch read at once."""

EvidenceStatus = Literal["matches", "mismatch", "missing", "unreadable", "no_commitment"]

FUNCTION_OF: Mapping[str, str] = {
    "accepted": "attestWork",
    "invalid": "invalidateWork",
    "rejected": "invalidateWork",
    "contest": "contestRejection",
}
"""The ComputePool function whose calldata carries each kind of verdict's commitment."""


@with_config(ConfigDict(use_attribute_docstrings=True))
@dataclass(frozen=True)
class VerdictEvidence:
    """One verdict, its evidence document and whether the document is what the verdict committed to."""

    verdict: VerdictKind
    """accepted / invalid (the ledger's verdicts), rejected (a rejection that is not, or not yet, an invalid
    verdict: in its challenge window, or overturned), contest (a validator contesting a rejection)."""
    validator: str
    """The validator who gave it."""
    reason: str | None
    """Reason code of an invalid or rejected verdict."""
    block_number: int
    """Block of the verdict's log."""
    tx_hash: str
    """Transaction of the verdict's log (0x-hex)."""
    log_index: int
    """Index of the verdict's log in its block."""
    commitment_tx_hash: str | None
    """Transaction whose calldata carries the commitment: the verdict's own, or for an invalid verdict
    after a challenge window the rejection's."""
    function: str | None
    """The ComputePool function that transaction calls (attestWork, invalidateWork, contestRejection)."""
    commitment: str | None
    """The evidence hash the calldata commits to (0x-hex)."""
    batch_size: int | None
    """Keys of the attestWork batch (its commitment covers every key's document)."""
    document_key: str | None
    """Where the document is (or should be) in the object store."""
    document: dict[str, Any] | None
    """The evidence document, parsed; null when missing or unreadable."""
    document_bytes: int | None
    """Its size."""
    status: EvidenceStatus
    """matches, mismatch, missing (not in the store), unreadable (too large or not a JSON object),
    no_commitment (the transaction carries none)."""
    matches: bool | None
    """Whether the document (for an attestation: the batch's documents) hashes to the commitment; null
    when that cannot be computed."""
    agrees: bool | None
    """Whether the document names this pool, submission, validator, verdict and reason; null without one."""
    detail: str
    """What was checked and found, for people."""


@with_config(ConfigDict(use_attribute_docstrings=True))
@dataclass(frozen=True)
class SubmissionEvidence:
    """The evidence of every verdict on one submission."""

    pool_id: int
    """The pool."""
    work_key: str
    """The submission (0x-hex)."""
    to_block: int
    """Last block read: the last block the ledger has indexed."""
    verdicts: list[VerdictEvidence]
    """In chain order."""
    seconds: float
    """Time the check took."""


# --- one verdict ------------------------------------------------------------------------------


@dataclass
class _Finding:
    """What is known of one verdict's evidence so far (becomes a `VerdictEvidence`)."""

    target: Target
    function: str | None = None
    commitment: bytes | None = None
    batch_size: int | None = None
    document: Document | None = None
    document_verdict: str | None = None
    """The verdict the document says, when not the one of the target's kind (a contest's document)."""
    matches: bool | None = None
    notes: list[str] = field(default_factory=list)

    def result(self, pool_id: int, work_key_hex: str) -> VerdictEvidence:
        t, doc = self.target, self.document
        parsed, why_not = (None, None) if doc is None or doc.data is None else parse_document(doc.data)
        agree = None if parsed is None else disagreements(parsed, pool_id, work_key_hex, t, self.document_verdict)
        notes = list(self.notes)
        if self.commitment is None:
            status: EvidenceStatus = "no_commitment"
        elif doc is not None and doc.problem == "missing":
            status = "missing"
            notes.append(f"no document at {doc.key} in the object store")
        elif doc is not None and doc.problem == "too_large":
            status = "unreadable"
            notes.append(f"the document at {doc.key} is over the {MAX_DOCUMENT_BYTES}-byte cap")
        elif self.matches is False:
            status = "mismatch"
        elif self.matches is None or why_not is not None:  # the notes say why
            status = "unreadable"
        else:
            status = "matches"
        if why_not is not None:
            notes.append(why_not)
        if agree:
            notes.append("the document disagrees with the chain: " + "; ".join(agree))
        return VerdictEvidence(
            verdict=t.verdict,
            validator=t.validator,
            reason=t.reason,
            block_number=t.block_number,
            tx_hash=t.tx_hash,
            log_index=t.log_index,
            commitment_tx_hash=t.commitment_tx,
            function=self.function,
            commitment=None if self.commitment is None else hex_of(self.commitment),
            batch_size=self.batch_size,
            document_key=None if doc is None else doc.key,
            document=parsed,
            document_bytes=None if doc is None else doc.size,
            status=status,
            matches=self.matches,
            agrees=None if agree is None else not agree,
            detail="; ".join(notes),
        )


class EvidenceReader:
    """Checks verdicts of one submission against the chain (`view`) and the object store (`store`)."""

    def __init__(self, view: ChainView, store: ObjectStore, pool_id: int, work_key_hex: str) -> None:
        self.view, self.store = view, store
        self.pool_id, self.work_key_hex = pool_id, work_key_hex.lower()
        self.work_key = bytes.fromhex(self.work_key_hex.removeprefix("0x"))

    def check(self, target: Target) -> VerdictEvidence:
        finding = _Finding(target)
        call = self._commitment_call(finding)
        if call is not None:
            self._check_documents(finding, call)
        return finding.result(self.pool_id, self.work_key_hex)

    def _commitment_call(self, finding: _Finding) -> Call | None:
        """The decoded verdict call carrying the commitment, or None (with a note saying why)."""
        t = finding.target
        if t.commitment_tx is None:
            finding.notes.append(t.note or "no transaction carries a commitment")
            return None
        tx = self.view.transaction(t.commitment_tx)
        if tx is None:
            finding.notes.append(f"the chain has no transaction {t.commitment_tx}")
            return None
        call = self.view.decode_call(tx)
        wanted = FUNCTION_OF[t.verdict]
        if call is None or call.function != wanted:
            called = "another contract or function" if call is None else call.function
            finding.notes.append(
                f"transaction {t.commitment_tx} calls {called}, not the ComputePool's {wanted} (sent through a "
                "contract?): its commitment cannot be read from its calldata"
            )
            return None
        finding.function = call.function
        keys = call.args["workKeys"] if call.function == "attestWork" else [call.args["workKey"]]
        if call.args["poolId"] != self.pool_id or self.work_key not in keys:
            finding.notes.append(f"the {call.function} call of {t.commitment_tx} does not name this submission")
            return None
        commitment = bytes(call.args["evidenceHash"])
        if commitment == NO_EVIDENCE:
            finding.notes.append("the transaction commits to no evidence (the zero hash): a verdict given without any")
            return None
        finding.commitment = commitment
        return call

    def _key(self, work_key_hex: str, validator: str, review_of_block: int | None = None) -> str:
        return evidence_key(self.pool_id, work_key_hex, validator, review_of_block=review_of_block)

    def _check_documents(self, finding: _Finding, call: Call) -> None:
        t = finding.target
        if call.function != "attestWork":
            review = t.review_of_block if t.verdict == "contest" else None
            finding.document = read_document(self.store, self._key(self.work_key_hex, t.validator, review))
            self._compare(finding, finding.document.sha256, "the document")
            return
        keys: list[bytes] = call.args["workKeys"]
        finding.batch_size = len(keys)
        if len(keys) > MAX_BATCH_KEYS:
            finding.notes.append(f"a batch of {len(keys)} keys: over the {MAX_BATCH_KEYS} this check reads")
            finding.document = read_document(self.store, self._key(self.work_key_hex, t.validator))
            return
        with ThreadPoolExecutor(min(FETCH_THREADS, len(keys))) as pool:
            documents = list(pool.map(lambda k: read_document(self.store, self._key(k.hex(), t.validator)), keys))
        finding.document = documents[keys.index(self.work_key)]
        if any(d.problem == "too_large" for d in documents):
            finding.notes.append("a document of the batch is over the size cap: the batch hash cannot be recomputed")
        else:
            absent = sum(d.problem == "missing" for d in documents)
            what = f"the batch's {len(keys)} documents" + (f" ({absent} not in the store)" if absent else "")
            self._compare(finding, batch_evidence_sha256([d.sha256 for d in documents]), what)
        if finding.matches is not True and len(keys) == 1 and t.review_of_block is not None:
            self._try_contest_document(finding)

    def _try_contest_document(self, finding: _Finding) -> None:
        """An attestation after an overturned rejection commits to the attester's contest document."""
        t = finding.target
        contest = read_document(self.store, self._key(self.work_key_hex, t.validator, t.review_of_block))
        if contest.sha256 is not None and contest.sha256 == finding.commitment:
            finding.document, finding.document_verdict, finding.matches = contest, "contest", True
            finding.notes = [
                f"sha256 of this validator's contest document (of the rejection in block {t.review_of_block}) is the "
                "commitment: the attestation followed the overturned rejection"
            ]

    def _compare(self, finding: _Finding, digest: bytes | None, what: str) -> None:
        if digest is None:
            return
        finding.matches = digest == finding.commitment
        function = finding.function
        if finding.matches:
            finding.notes.append(f"sha256 of {what} is the commitment {function} carries")
        else:
            assert finding.commitment is not None
            finding.notes.append(
                f"sha256 of {what} is {hex_of(digest)}, but {function} commits to {hex_of(finding.commitment)}"
            )


def _check_all(
    view: ChainView, store: ObjectStore, pool_id: int, work_key: str, verdicts: list[dict[str, Any]], last: int
) -> list[VerdictEvidence]:
    """Read the submission's logs, then check each verdict's evidence (sync I/O: run in a worker thread)."""
    logs = view.work_logs(pool_id, bytes.fromhex(work_key.removeprefix("0x")), last)
    reader = EvidenceReader(view, store, pool_id, work_key)
    return [reader.check(target) for target in verdict_targets(verdicts, logs.events)]


async def verdict_evidence(
    conn: AsyncConnection, views: ChainViews, store: ObjectStore, pool_id: int, work_key: str
) -> SubmissionEvidence | None:
    """The evidence of every verdict on submission `work_key` (0x-hex) of `pool_id` (module
    docstring); None when the ledger has no such submission."""
    started = time.monotonic()
    snapshot = await read_snapshot(conn, pool_id, work_key)
    if snapshot is None:
        return None
    rows = snapshot.as_rows()["verdicts"]
    view = await asyncio.to_thread(views.of, snapshot.tip.chain_id)
    checked = await asyncio.to_thread(_check_all, view, store, pool_id, work_key, rows, snapshot.tip.last_block)
    result = SubmissionEvidence(
        pool_id, work_key.lower(), snapshot.tip.last_block, checked, round(time.monotonic() - started, 4)
    )
    log.info(
        "verdict evidence checked",
        extra={
            "pool_id": pool_id,
            "work_key": result.work_key,
            "statuses": [v.status for v in checked],
            "seconds": result.seconds,
        },
    )
    return result
