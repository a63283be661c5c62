"""The submission a validation task is about, as the indexer recorded it from `WorkSubmitted`
(one file) or `WorkBundleSubmitted` (a bundle: its files' keys and units, revision 0010).

Tasks carry only (pool id, work key); the facts are re-read here so a redelivered or late task
sees the current status, and a task for a key the indexer does not (or no longer, after a
reorg) know fails as transient and is retried rather than judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import Connection
from psycopg.rows import dict_row

from proofpool.core.assignment import AssignmentConfig
from proofpool.core.environment import Environment
from proofpool.core.errors import ProofpoolError
from proofpool.envs import pool_assignment as settle_assignment

SELECT_SUBMISSION = """
    SELECT pool_id, work_key, node, provider, work_units, model_version, status, submitted_at, block_number,
           file_keys, file_units
    FROM submissions WHERE pool_id = %(pool_id)s AND work_key = %(work_key)s"""


SELECT_ASSIGNMENT_CONFIG = """
    SELECT batch_size, group_size, max_tokens, temperature FROM pool_assignment_config
    WHERE pool_id = %(pool_id)s"""


AssignmentOverrides = tuple[int | None, int | None, int | None, float | None]
"""The operator's `pool_assignment_config` row (batch size, group size, max tokens, temperature)."""


def assignment_overrides(conn: Connection, pool_id: int) -> AssignmentOverrides:
    """The operator's overrides of this pool's assignment settings (all None without a row)."""
    row = conn.execute(SELECT_ASSIGNMENT_CONFIG, {"pool_id": pool_id}).fetchone()
    return (None, None, None, None) if row is None else (row[0], row[1], row[2], row[3])


def pool_assignment(environment: Environment, overrides: AssignmentOverrides) -> AssignmentConfig:
    """The assignment settings the orchestrator hands this pool's workers, by the same rule
    (`proofpool.envs.pool_assignment`: a spec pool's own, else the defaults with the operator's
    non-NULL overrides): the batch and group sizes a file must fill, the completion budget (an
    honest completion shorter than it ends with a stop id) and the temperature of every row."""
    return settle_assignment(environment, *overrides)


def pool_manager(conn: Connection, pool_id: int) -> str | None:
    """The pool's manager as indexed (None when the pool is not indexed)."""
    row = conn.execute("SELECT manager FROM pools WHERE pool_id = %(pool_id)s", {"pool_id": pool_id}).fetchone()
    return None if row is None else str(row[0])


SELECT_LAST_ISSUED_BATCH = """
    SELECT last_batch FROM issued_batches
    WHERE pool_id = %(pool_id)s AND node = %(node)s AND model_version = %(version)s"""


def last_issued_batch(conn: Connection, pool_id: int, node: str, version: int) -> int:
    """The highest batch the orchestrator handed `node` for checkpoint `version` (0, the first
    batch of a version, when it handed out no other)."""
    params = {"pool_id": pool_id, "node": node, "version": version}
    row = conn.execute(SELECT_LAST_ISSUED_BATCH, params).fetchone()
    return 0 if row is None else int(row[0])


class SubmissionNotIndexed(ProofpoolError):
    """The indexer has no such submission (yet, or any more after a reorg): retry later."""


@dataclass(frozen=True)
class IndexedSubmission:
    pool_id: int
    work_key: bytes
    node: str
    provider: str
    work_units: int
    model_version: int
    status: str
    """pending, accepted, rejected, invalid, finalized, forfeited or expired (as indexed)."""
    submitted_at: datetime
    block_number: int
    files: tuple[tuple[bytes, int], ...] | None = None
    """A bundle's files, (file key, work units) in bundle order; None for a single file, whose
    key is `work_key`."""


def get_submission(conn: Connection, pool_id: int, work_key: bytes) -> IndexedSubmission:
    """The indexed submission; `SubmissionNotIndexed` if there is none."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SELECT_SUBMISSION, {"pool_id": pool_id, "work_key": work_key}).fetchone()
    if row is None:
        raise SubmissionNotIndexed(f"submission 0x{work_key.hex()} of pool {pool_id} is not indexed (yet)")
    keys, units = row.pop("file_keys"), row.pop("file_units")
    files = None if keys is None else tuple((bytes(k), int(u)) for k, u in zip(keys, units, strict=True))
    return IndexedSubmission(**{**row, "work_key": bytes(row["work_key"]), "files": files})
