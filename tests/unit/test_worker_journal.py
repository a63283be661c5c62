"""The worker's journal: durable files before rows, state moves, restart reads, orphan cleanup."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from proofpool.worker.journal import PENDING_STATES, BatchState, Journal


def record(journal: Journal, batch: int, data: bytes = b"") -> tuple[bytes, bytes]:
    data = data or f"rollouts of batch {batch}".encode()
    key = hashlib.sha256(data).digest()
    journal.record_written(7, 0, batch, key, data, work_units=40 + batch, samples=64)
    return key, data


def test_written_batch_has_its_file_and_survives_a_reopen(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    key, data = record(journal, 0)
    journal.close()

    reopened = Journal(tmp_path)
    entry = reopened.get(7, 0, 0)
    assert entry is not None
    assert (entry.work_key, entry.work_units, entry.samples, entry.state) == (key, 40, 64, BatchState.WRITTEN)
    assert reopened.read_file(entry) == data
    assert reopened.in_state(7, *PENDING_STATES) == [entry]
    assert reopened.get(7, 0, 1) is None
    assert reopened.entries(8) == []


def test_states_move_on_and_submission_deletes_the_local_file(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    key, _ = record(journal, 0)
    entry = journal.get(7, 0, 0)
    assert entry is not None
    entry = journal.set_state(entry, BatchState.UPLOADED)
    assert journal.file_path(key).is_file()
    entry = journal.set_state(entry, BatchState.SUBMITTED, tx_hash="0xabc")
    assert (entry.state, entry.tx_hash) == (BatchState.SUBMITTED, "0xabc")
    assert not journal.file_path(key).exists()
    entry = journal.set_state(entry, BatchState.SUBMITTED)
    assert (entry.state, entry.tx_hash) == (BatchState.SUBMITTED, "0xabc")  # the tx hash is kept
    assert journal.in_state(7, *PENDING_STATES) == []


def test_reports_are_tracked_apart_from_the_submission_state(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    record(journal, 0)
    record(journal, 1)
    first = journal.get(7, 0, 0)
    assert first is not None and not first.reported
    assert [e.batch for e in journal.unreported(7)] == [0, 1]
    journal.mark_reported(first)
    assert [e.batch for e in journal.unreported(7)] == [1]
    reread = journal.get(7, 0, 0)
    assert reread is not None and reread.reported and reread.state is BatchState.WRITTEN


def test_a_batch_is_journaled_once(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    record(journal, 0)
    with pytest.raises(sqlite3.IntegrityError):
        record(journal, 0, b"another file for the same assignment")


def test_orphans_and_partials_are_removed_but_pending_and_abandoned_files_kept(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    pending, _ = record(journal, 0)
    abandoned, _ = record(journal, 1)
    submitted, _ = record(journal, 2)
    entry = journal.get(7, 0, 1)
    assert entry is not None
    journal.set_state(entry, BatchState.ABANDONED, error="refused")
    orphan = journal.files_dir / ("ab" * 32 + ".parquet")
    orphan.write_bytes(b"crashed before its row")
    partial = journal.files_dir / ("cd" * 32 + ".partial")
    partial.write_bytes(b"crashed mid-write")
    done = journal.get(7, 0, 2)
    assert done is not None
    journal.set_state(done, BatchState.SUBMITTED)
    journal.file_path(submitted).write_bytes(b"crashed before the unlink")

    assert journal.remove_orphans() == 3
    assert journal.file_path(pending).is_file()
    assert journal.file_path(abandoned).is_file()
    assert not orphan.exists() and not partial.exists() and not journal.file_path(submitted).exists()
