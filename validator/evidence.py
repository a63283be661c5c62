"""Verdict evidence: the document every verdict commits to on-chain.

A verdict's evidence is a canonical JSON document (sorted keys, no spaces): the submission (pool,
work key, which is the file's sha256), the validator, the verdict and reason code, and what the
checks found (the rows recomputed, the failing row and its figures, the file-level statistics).
For a bundle the work key (field `file_sha256`) is the bundle key, and the files' keys are in the
evidence: a summary per file (`files`) when accepted, the invalid file's `file_key` and
`file_index` otherwise (`proofpool.validator.checks.bundle`).
The validator stores it in the object store at `proofpool.infra.storage.evidence_key` before recording
the verdict, and the transaction carries its sha256: `invalidateWork` and `contestRejection` the
hash of one document, `attestWork` the sha256 of the batch's document hashes concatenated in the
order of the batch's keys (`batch_evidence_sha256`). Anyone holding the documents can check a
verdict's commitment, and a contesting validator recomputes the file and commits to its own
document (`verdict` "contest" or "upheld") with `contestRejection`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from eth_utils import to_checksum_address
from proofpool.validator.checks import Verdict

from proofpool.infra.storage import evidence_key
from proofpool.infra.storage.s3 import ObjectStore

EVIDENCE_FORMAT = 1
"""Version of the evidence document layout."""

EVIDENCE_CONTENT_TYPE = "application/json"


def evidence_document(
    pool_id: int,
    work_key: bytes,
    validator: str,
    verdict: str,
    reason: str | None,
    evidence: Mapping[str, Any],
) -> bytes:
    """The canonical bytes of one verdict's evidence (the same inputs always give the same bytes)."""
    document = {
        "format": EVIDENCE_FORMAT,
        "pool_id": pool_id,
        "file_sha256": work_key.hex(),
        "validator": to_checksum_address(validator),
        "verdict": verdict,
        "reason": reason,
        "evidence": dict(evidence),
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def publish_evidence(
    store: ObjectStore,
    pool_id: int,
    work_key: bytes,
    validator: str,
    document: bytes,
    *,
    review_of_block: int | None = None,
) -> bytes:
    """Store `document` where the verdict's readers find it (a review's apart from the validator's own
    verdict on the file); returns its sha256 (the commitment)."""
    digest = hashlib.sha256(document).digest()
    key = evidence_key(pool_id, work_key.hex(), validator, review_of_block=review_of_block)
    store.put_object(key, document, sha256_hex=digest.hex(), content_type=EVIDENCE_CONTENT_TYPE)
    return digest


def publish_verdict(
    store: ObjectStore,
    pool_id: int,
    work_key: bytes,
    validator: str,
    kind: str,
    verdict: Verdict,
    *,
    recomputed: bool,
    review_of_block: int | None = None,
) -> tuple[dict[str, Any], bytes]:
    """Store the evidence of `verdict` (recorded as `kind`) and return it with its sha256: what a
    validation or a review records, and the hash its transaction commits to."""
    evidence = {
        **verdict.evidence,
        "recomputed": recomputed,
        "rows": verdict.rows,
        "checked_rows": verdict.checked_rows,
    }
    document = evidence_document(pool_id, work_key, validator, kind, verdict.reason, evidence)
    return evidence, publish_evidence(store, pool_id, work_key, validator, document, review_of_block=review_of_block)
