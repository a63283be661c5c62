"""The worker's local journal: every finished batch, its file and how far it got.

A batch is identified by what the backend assigned, (pool, checkpoint version, batch counter)
(in a training pool a node's update file of round r is the batch (pool, r, 0)), and moves
through `written -> uploaded -> submitted` (or `abandoned`); separately, `reported` says the
backend was told the batch is done. The file is made durable
(written, fsynced, renamed) *before* its `written` row commits, and deleted only once it is
on-chain, so a worker killed at any point finds on restart either no row (the batch is
generated again: it was never uploaded or submitted) or a row whose file it still has.
A batch with a row is never generated again, so the same assignment never yields two
submissions; the submit step itself checks the chain before sending (see `proofpool.worker.submit`).

Before a file is sent, its row records the on-chain submission it is planned into (`submission`):
its own work key for a lone `submitWork`, or the key of a bundle (`submitWorkBundle`, many files
in one transaction). The plan never changes once recorded: a restarted worker sends the file only
under that key again (the same files, so the same bundle key), and the chain's duplicate-key check
then makes a second mined submission of the file impossible. Were a file planned into another
bundle after a crash, the first transaction could still be mined and the file would count twice
(validators judge that a duplicate batch and slash). The files of a bundle are its rows with that
`submission`, in key order (the contract's canonical order), and change state together.

Each entry remembers its file's suffix (`parquet` for a rollout file, `safetensors` for a
training pool's update file), so one state directory can hold a node's files of both kinds of pool.

SQLite in WAL mode, one connection per process shared by the worker loop (which writes batches)
and its submitter thread (which moves them on), serialized by a lock.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path


class BatchState(StrEnum):
    WRITTEN = "written"
    """File on local disk, journaled; not uploaded yet."""
    UPLOADED = "uploaded"
    """File in the object store under its work key."""
    SUBMITTED = "submitted"
    """`submitWork` mined (or found on-chain after a crash); the local file is deleted."""
    ABANDONED = "abandoned"
    """Given up on (e.g. a permanent revert); the file is kept for the operator."""


PENDING_STATES = (BatchState.WRITTEN, BatchState.UPLOADED)
"""States whose file still has to reach the chain."""

ROLLOUT_SUFFIX = "parquet"
"""A rollout file's suffix (RL pools)."""
UPDATE_SUFFIX = "safetensors"
"""An update file's suffix (training pools: one node's pseudo-gradient of one round)."""
FILE_SUFFIXES = frozenset({ROLLOUT_SUFFIX, UPDATE_SUFFIX})

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    pool_id INTEGER NOT NULL,
    version INTEGER NOT NULL,
    batch INTEGER NOT NULL,
    work_key TEXT NOT NULL UNIQUE,
    work_units INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    state TEXT NOT NULL,
    reported INTEGER NOT NULL DEFAULT 0,
    tx_hash TEXT,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    suffix TEXT NOT NULL DEFAULT 'parquet',
    submission TEXT,
    PRIMARY KEY (pool_id, version, batch)
)"""
SUFFIX_COLUMN = "ALTER TABLE batches ADD COLUMN suffix TEXT NOT NULL DEFAULT 'parquet'"
"""Journals written before training pools lack the column; every file they hold is a rollout file."""
SUBMISSION_COLUMN = "ALTER TABLE batches ADD COLUMN submission TEXT"
"""Journals written before bundles lack the column."""
SUBMISSION_BACKFILL = "UPDATE batches SET submission = work_key WHERE state = 'uploaded' AND submission IS NULL"
"""An uploaded file of a journal written before bundles may have been sent alone already: it stays
planned as a lone `submitWork` (never put into a bundle)."""


@dataclass(frozen=True)
class JournalEntry:
    pool_id: int
    version: int
    batch: int
    work_key: bytes
    work_units: int
    samples: int
    state: BatchState
    reported: bool
    """The backend was told this batch is done (it moves the node to the next batch)."""
    tx_hash: str | None
    error: str | None
    suffix: str = ROLLOUT_SUFFIX
    """The file's suffix: `parquet` (a rollout file) or `safetensors` (a training pool's update file)."""
    submission: bytes | None = None
    """The key of the on-chain submission the file is planned into: its own work key (a lone
    `submitWork`), a bundle key, or None while it was never sent (see the module docstring)."""

    @property
    def bundled(self) -> bool:
        """Planned into a bundle (`submitWorkBundle`) rather than sent alone."""
        return self.submission is not None and self.submission != self.work_key


class Journal:
    """`state_dir/journal.sqlite3` plus the files in `state_dir/files/<work key hex>.<suffix>`."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = Path(state_dir)
        self.files_dir = self.state_dir / "files"
        self.files_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.state_dir / "journal.sqlite3", isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(batches)")}
        if "suffix" not in columns:
            self._db.execute(SUFFIX_COLUMN)
        if "submission" not in columns:
            with self._transaction():
                self._db.execute(SUBMISSION_COLUMN)
                self._db.execute(SUBMISSION_BACKFILL)

    def close(self) -> None:
        self._db.close()

    def file_path(self, work_key: bytes, suffix: str = ROLLOUT_SUFFIX) -> Path:
        return self.files_dir / f"{work_key.hex()}.{suffix}"

    def record_written(
        self,
        pool_id: int,
        version: int,
        batch: int,
        work_key: bytes,
        data: bytes,
        work_units: int,
        samples: int,
        suffix: str = ROLLOUT_SUFFIX,
    ) -> JournalEntry:
        """Make the file durable, then journal the batch as `written` (in that order)."""
        if suffix not in FILE_SUFFIXES:
            raise ValueError(f"unknown file suffix {suffix!r}: one of {sorted(FILE_SUFFIXES)}")
        path = self.file_path(work_key, suffix)
        staging = path.with_suffix(".partial")
        with open(staging, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, path)
        _fsync_dir(self.files_dir)
        now = time.time()
        with self._lock:
            self._db.execute(
                "INSERT INTO batches (pool_id, version, batch, work_key, work_units, samples, state, created_at,"
                " updated_at, suffix) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    pool_id,
                    version,
                    batch,
                    work_key.hex(),
                    work_units,
                    samples,
                    BatchState.WRITTEN.value,
                    now,
                    now,
                    suffix,
                ),
            )
        entry = self.get(pool_id, version, batch)
        assert entry is not None
        return entry

    def set_state(
        self, entry: JournalEntry, state: BatchState, *, tx_hash: str | None = None, error: str | None = None
    ) -> JournalEntry:
        """Move `entry` to `state` (keeping an earlier tx hash unless a new one is given)."""
        with self._lock:
            self._db.execute(
                "UPDATE batches SET state = ?, tx_hash = COALESCE(?, tx_hash), error = ?, updated_at = ?"
                " WHERE pool_id = ? AND version = ? AND batch = ?",
                (state.value, tx_hash, error, time.time(), entry.pool_id, entry.version, entry.batch),
            )
        if state is BatchState.SUBMITTED:
            self.file_path(entry.work_key, entry.suffix).unlink(missing_ok=True)  # in the store and on-chain
        updated = self.get(entry.pool_id, entry.version, entry.batch)
        assert updated is not None
        return updated

    def set_states(
        self,
        entries: Sequence[JournalEntry],
        state: BatchState,
        *,
        tx_hash: str | None = None,
        error: str | None = None,
    ) -> list[JournalEntry]:
        """`set_state` for every file of one submission, in one transaction: a bundle's files move together."""
        now = time.time()
        with self._lock, self._transaction():
            for entry in entries:
                self._db.execute(
                    "UPDATE batches SET state = ?, tx_hash = COALESCE(?, tx_hash), error = ?, updated_at = ?"
                    " WHERE pool_id = ? AND version = ? AND batch = ?",
                    (state.value, tx_hash, error, now, entry.pool_id, entry.version, entry.batch),
                )
        if state is BatchState.SUBMITTED:
            for entry in entries:
                self.file_path(entry.work_key, entry.suffix).unlink(missing_ok=True)
        return [self._reread(entry) for entry in entries]

    def plan(self, entries: Sequence[JournalEntry], submission: bytes) -> list[JournalEntry]:
        """Record that `entries` are sent as the on-chain submission `submission` (before it is sent).

        Raises ValueError, recording nothing, if one of them is planned into another submission already
        (a plan never changes: see the module docstring)."""
        with self._lock, self._transaction():
            for entry in entries:
                row = self._db.execute(
                    "SELECT submission FROM batches WHERE pool_id = ? AND version = ? AND batch = ?",
                    (entry.pool_id, entry.version, entry.batch),
                ).fetchone()
                if row is None:
                    raise ValueError(f"batch {entry.batch} of v{entry.version} is not journaled")
                if row[0] is not None and row[0] != submission.hex():
                    raise ValueError(
                        f"batch {entry.batch} of v{entry.version} is planned into submission 0x{row[0]} already"
                    )
                self._db.execute(
                    "UPDATE batches SET submission = ?, updated_at = ? WHERE pool_id = ? AND version = ? AND batch = ?",
                    (submission.hex(), time.time(), entry.pool_id, entry.version, entry.batch),
                )
        return [self._reread(entry) for entry in entries]

    def planned(self, pool_id: int, submission: bytes) -> list[JournalEntry]:
        """The pool's files planned into `submission` that are not on-chain yet, in key order (a
        bundle's canonical order)."""
        marks = ",".join("?" * len(PENDING_STATES))
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE pool_id = ? AND submission = ? AND state IN ({marks})"
                " ORDER BY work_key",
                (pool_id, submission.hex(), *(s.value for s in PENDING_STATES)),
            ).fetchall()
        return [_entry(r) for r in rows]

    def mark_reported(self, entry: JournalEntry) -> None:
        """Remember that the backend took the report of `entry` (any state)."""
        with self._lock:
            self._db.execute(
                "UPDATE batches SET reported = 1, updated_at = ? WHERE pool_id = ? AND version = ? AND batch = ?",
                (time.time(), entry.pool_id, entry.version, entry.batch),
            )

    def unreported(self, pool_id: int) -> list[JournalEntry]:
        """The pool's entries the backend was not told about, oldest first."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE pool_id = ? AND reported = 0 ORDER BY created_at", (pool_id,)
            ).fetchall()
        return [_entry(r) for r in rows]

    def read_file(self, entry: JournalEntry) -> bytes:
        return self.file_path(entry.work_key, entry.suffix).read_bytes()

    def get(self, pool_id: int, version: int, batch: int) -> JournalEntry | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE pool_id = ? AND version = ? AND batch = ?",
                (pool_id, version, batch),
            ).fetchone()
        return None if row is None else _entry(row)

    def in_state(self, pool_id: int, *states: BatchState) -> list[JournalEntry]:
        """The pool's entries in any of `states`, oldest first."""
        marks = ",".join("?" * len(states))
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM batches WHERE pool_id = ? AND state IN ({marks}) ORDER BY created_at",
                (pool_id, *(s.value for s in states)),
            ).fetchall()
        return [_entry(r) for r in rows]

    def refreshed(self, entry: JournalEntry) -> JournalEntry:
        """`entry` as the journal has it now (another step may have moved it on since it was read)."""
        return self._reread(entry)

    def entries(self, pool_id: int) -> list[JournalEntry]:
        """Every entry of the pool, oldest first."""
        return self.in_state(pool_id, *BatchState)

    def _reread(self, entry: JournalEntry) -> JournalEntry:
        updated = self.get(entry.pool_id, entry.version, entry.batch)
        assert updated is not None, "journal rows are never deleted"
        return updated

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One SQLite transaction (the connection is in autocommit mode otherwise); callers hold the lock."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def remove_orphans(self) -> int:
        """Delete files no journal row needs (a crash between writing a file and journaling it)."""
        with self._lock:
            needed = {
                row[0]
                for row in self._db.execute(
                    "SELECT work_key FROM batches WHERE state IN (?, ?, ?)",
                    (*(s.value for s in PENDING_STATES), BatchState.ABANDONED.value),
                )
            }
        removed = 0
        for path in self.files_dir.iterdir():
            known = path.suffix.removeprefix(".") in FILE_SUFFIXES
            if path.suffix == ".partial" or (known and path.stem not in needed):
                path.unlink(missing_ok=True)
                removed += 1
        return removed


_COLUMNS = "pool_id, version, batch, work_key, work_units, samples, state, reported, tx_hash, error, suffix, submission"


def _entry(row: tuple) -> JournalEntry:
    pool_id, version, batch, work_key, units, samples, state, reported, tx_hash, error, suffix, submission = row
    key = bytes.fromhex(work_key)
    planned = None if submission is None else bytes.fromhex(submission)
    return JournalEntry(
        pool_id, version, batch, key, units, samples, BatchState(state), bool(reported), tx_hash, error, suffix, planned
    )


def _fsync_dir(path: Path) -> None:
    """Persist a rename: the directory entry must reach the disk too."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
