"""The worker sends files that wait together as one `submitWorkBundle`, and never a file twice.

Grouping (by pool and on-chain version, at most `max_bundle`, a lone file as `submitWork`), the
journal's plan of each submission (recorded before it is sent, kept across a restart) and the
recovery of a worker killed between planning, mining and journaling. The chain is a small fake
with the contract's rules that matter here (a key is recorded once, by its sender; a bundle's key
is `bundle_key` of its canonical files); the journal is the real SQLite one.
tests/integration/test_worker_bundles.py runs the same against anvil.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from eth_account import Account
from proofpool.worker.console import WorkerConsole
from proofpool.worker.journal import BatchState, Journal, JournalEntry
from proofpool.worker.node import Submitter, WorkerConfig, WorkerNode
from proofpool.worker.retry import Backoff
from proofpool.worker.submit import DEFAULT_MAX_BUNDLE, Bundle, group_waiting
from rich.console import Console

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.bundles import MAX_BUNDLE_FILES, bundle_key, canonical
from proofpool.infra.chain.errors import ContractRevert

NODE = Account.from_key(ANVIL_KEYS[6])
OTHER_NODE = Account.from_key(ANVIL_KEYS[7]).address
POOL = 1


class FakePool:
    """`submitWork` / `submitWorkBundle` recording each key once (a second send of a key reverts, as
    `ComputePoolDuplicateWork`), `getWork` reading them back; `latest` is the latest checkpoint."""

    def __init__(self, latest: int = 0, reverts: int = 0) -> None:
        self.latest = latest
        self.reverts = reverts
        self.work: dict[bytes, tuple[str, tuple[bytes, ...]]] = {}
        self.sent: list[tuple[str, tuple[bytes, ...], int]] = []
        """(function, file keys, model version) of every transaction that was mined."""
        self.lookups: list[bytes] = []

    def get_work(self, _pool: int, key: bytes) -> SimpleNamespace:
        self.lookups.append(key)
        if key not in self.work:
            return SimpleNamespace(status=WorkStatus.NONE, node="0x" + "00" * 20)
        return SimpleNamespace(status=WorkStatus.PENDING, node=self.work[key][0])

    def latest_checkpoint(self, _pool: int) -> SimpleNamespace:
        return SimpleNamespace(version=self.latest)

    def submit_work(self, pool: int, node: str, key: bytes, units: int, version: int) -> dict:
        return self._record("submitWork", node, key, (key,), version)

    def submit_work_bundle(self, pool: int, node: str, keys: list[bytes], units: list[int], version: int) -> dict:
        assert canonical(zip(keys, units, strict=True)) == (keys, units), "keys must be canonical"
        return self._record("submitWorkBundle", node, bundle_key(keys, units), tuple(keys), version)

    def _record(self, function: str, node: str, key: bytes, files: tuple[bytes, ...], version: int) -> dict:
        if self.reverts:
            self.reverts -= 1
            raise ContractRevert("ComputePoolNotActiveMember")
        if key in self.work:
            raise ContractRevert("ComputePoolDuplicateWork")
        self.work[key] = (node, files)
        self.sent.append((function, files, version))
        return {"transactionHash": hashlib.sha256(key).digest()}

    def mined_files(self) -> list[bytes]:
        """Every file key in a mined submission, with repeats."""
        return [file for _, files, _ in self.sent for file in files]


class Untouchable:
    """The backend and the store: nothing here may upload (the entries are uploaded already)."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} must not be used: the files are uploaded")


def make_node(tmp_path: Path, pool: FakePool, max_bundle: int = DEFAULT_MAX_BUNDLE) -> WorkerNode:
    """A worker over `tmp_path/state` (a second call is the same node restarted)."""
    client = SimpleNamespace(pool=pool, address=NODE.address)
    config = WorkerConfig(
        pool_id=POOL,
        state_dir=tmp_path / "state",
        checkpoint_cache_dir=tmp_path / "cache",
        max_bundle=max_bundle,
        backoff=Backoff(initial=0.0),
    )
    console = WorkerConsole(NODE.address, "http://127.0.0.1:9", Console(file=open("/dev/null", "w")))  # noqa: SIM115
    return WorkerNode(config, NODE, client, Untouchable(), lambda: Untouchable(), console)  # type: ignore[arg-type]


def uploaded(node: WorkerNode, batch: int, version: int = 0, units: int = 50) -> JournalEntry:
    """A journaled file of `batch`, already in the store."""
    data = f"rollouts of v{version} batch {batch}".encode()
    entry = node.journal.record_written(POOL, version, batch, hashlib.sha256(data).digest(), data, units, 64)
    return node.journal.set_state(entry, BatchState.UPLOADED)


# --- grouping --------------------------------------------------------------------------------


def test_grouping_keeps_pool_and_version_apart_and_caps_the_size() -> None:
    waiting = [(1, 0, "a"), (1, 1, "b"), (1, 0, "c"), (2, 0, "d"), (1, 0, "e"), (1, 0, "f")]
    groups = group_waiting(waiting, 3, kind=lambda e: e[:2])
    assert [[e[2] for e in g] for g in groups] == [["a", "c", "e"], ["f"], ["b"], ["d"]]
    assert [len(g) for g in group_waiting(waiting, 1, kind=lambda e: e[:2])] == [1] * 6
    assert len(group_waiting([(1, 0, str(i)) for i in range(300)], 1000, kind=lambda e: e[:2])[0]) == MAX_BUNDLE_FILES
    with pytest.raises(ValueError, match="at least 1"):
        group_waiting(waiting, 0, kind=lambda e: e[:2])


def test_a_bundle_is_canonical_and_refuses_mixed_versions(tmp_path: Path) -> None:
    node = make_node(tmp_path, FakePool())
    entries = [uploaded(node, b) for b in range(3)]
    bundle = Bundle.of(entries)
    assert list(bundle.file_keys) == sorted(e.work_key for e in entries)
    assert bundle.key == bundle_key(bundle.file_keys, bundle.file_units)
    assert bundle.work_units == 150 and bundle.version == 0
    with pytest.raises(ValueError, match="one pool and model version"):
        Bundle.of([*entries, uploaded(node, 0, version=1)])


def test_files_waiting_together_go_out_as_one_bundle(tmp_path: Path) -> None:
    pool = FakePool()
    node = make_node(tmp_path, pool)
    entries = [uploaded(node, b) for b in range(3)]
    done = node.finish_all([(e, True) for e in entries])
    assert [(f, len(files)) for f, files, _ in pool.sent] == [("submitWorkBundle", 3)]
    assert pool.lookups == []  # planned just now from fresh files: nothing can be on-chain
    key = bundle_key(*canonical((e.work_key, e.work_units) for e in entries))
    assert {d.state for d in done} == {BatchState.SUBMITTED} and len(done) == 3
    assert {d.submission for d in done} == {key}
    assert len({d.tx_hash for d in done}) == 1
    assert not list(node.journal.files_dir.iterdir())  # every file deleted once on-chain


def test_a_lone_file_is_sent_with_submit_work(tmp_path: Path) -> None:
    pool = FakePool()
    node = make_node(tmp_path, pool)
    (done,) = node.finish_all([(uploaded(node, 0), True)])
    assert [(f, files) for f, files, _ in pool.sent] == [("submitWork", (done.work_key,))]
    assert done.state is BatchState.SUBMITTED and done.submission == done.work_key and not done.bundled


def test_versions_split_bundles_and_max_bundle_caps_them(tmp_path: Path) -> None:
    pool = FakePool(latest=1)
    node = make_node(tmp_path, pool, max_bundle=2)
    v0 = [uploaded(node, b, version=0) for b in range(3)]
    v1 = [uploaded(node, b, version=1) for b in range(2)]
    node.finish_all([(e, True) for e in [v0[0], v1[0], v0[1], v1[1], v0[2]]])
    assert [(f, len(files), v) for f, files, v in pool.sent] == [
        ("submitWorkBundle", 2, 0),
        ("submitWork", 1, 0),
        ("submitWorkBundle", 2, 1),
    ]
    assert sorted(pool.mined_files()) == sorted(e.work_key for e in v0 + v1)


def test_max_bundle_one_sends_every_file_alone(tmp_path: Path) -> None:
    pool = FakePool()
    node = make_node(tmp_path, pool, max_bundle=1)
    node.finish_all([(uploaded(node, b), True) for b in range(3)])
    assert [f for f, _, _ in pool.sent] == ["submitWork"] * 3


def test_the_submitter_bundles_what_is_queued_and_sends_a_lone_file_at_once(tmp_path: Path) -> None:
    pool = FakePool()
    node = make_node(tmp_path, pool)
    submitter = Submitter(node)
    for b in range(2):  # queued before the thread runs: both waiting when it looks
        submitter.put(uploaded(node, b), None)
    submitter.start()
    submitter.drain(timeout=10)
    submitter.raise_failure()
    assert [(f, len(files)) for f, files, _ in pool.sent] == [("submitWorkBundle", 2)]
    assert node.submitted == 2

    alone = Submitter(node)
    alone.start()
    alone.put(uploaded(node, 2), None)
    alone.drain(timeout=10)
    alone.raise_failure()
    assert [f for f, _, _ in pool.sent] == ["submitWorkBundle", "submitWork"]


# --- refusals ---------------------------------------------------------------------------------


def test_a_bundle_that_keeps_reverting_is_abandoned_whole(tmp_path: Path) -> None:
    pool = FakePool(reverts=99)
    node = make_node(tmp_path, pool)
    done = node.finish_all([(uploaded(node, b), True) for b in range(3)])
    assert {d.state for d in done} == {BatchState.ABANDONED} and len(done) == 3
    assert all("submitWorkBundle refused 5 times" in (d.error or "") for d in done)
    assert all(node.journal.read_file(d) for d in done)  # files kept for the operator
    assert pool.sent == []


def test_a_stale_bundle_is_abandoned_whole_without_a_send(tmp_path: Path) -> None:
    pool = FakePool(latest=3)
    node = make_node(tmp_path, pool)
    done = node.finish_all([(uploaded(node, b, version=0), True) for b in range(2)])
    assert {d.state for d in done} == {BatchState.ABANDONED}
    assert all("below 2 (latest 3, window 2, margin 1)" in (d.error or "") for d in done)
    assert pool.sent == []


def test_a_bundle_key_another_node_holds_is_refused(tmp_path: Path) -> None:
    pool = FakePool()
    node = make_node(tmp_path, pool)
    entries = [uploaded(node, b) for b in range(2)]
    key = bundle_key(*canonical((e.work_key, e.work_units) for e in entries))
    node.journal.plan(entries, key)  # planned before a crash: looked up on the restart
    pool.work[key] = (OTHER_NODE, ())
    done = make_node(tmp_path, pool).send_all(entries)
    assert {d.state for d in done} == {BatchState.ABANDONED}
    assert all("submitted by another node" in (d.error or "") for d in done)


# --- the journal ------------------------------------------------------------------------------


def test_a_plan_survives_a_reopen_and_never_changes(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    entries = []
    for b in range(3):
        data = f"file {b}".encode()
        written = journal.record_written(POOL, 0, b, hashlib.sha256(data).digest(), data, 10 + b, 64)
        entries.append(journal.set_state(written, BatchState.UPLOADED))
    key = bundle_key(*canonical((e.work_key, e.work_units) for e in entries[:2]))
    planned = journal.plan(entries[:2], key)
    assert all(e.submission == key and e.bundled for e in planned)
    journal.close()

    reopened = Journal(tmp_path)
    restored = reopened.planned(POOL, key)
    assert [e.work_key for e in restored] == sorted(e.work_key for e in entries[:2])  # canonical order
    assert reopened.get(POOL, 0, 2).submission is None  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="planned into submission"):
        reopened.plan([entries[0], entries[2]], entries[0].work_key)
    assert reopened.get(POOL, 0, 2).submission is None  # type: ignore[union-attr]  # nothing recorded
    done = reopened.set_states(restored, BatchState.SUBMITTED, tx_hash="0xbeef")
    assert {(e.state, e.tx_hash) for e in done} == {(BatchState.SUBMITTED, "0xbeef")}
    assert reopened.planned(POOL, key) == []
    assert not reopened.file_path(entries[0].work_key).exists()
    assert reopened.file_path(entries[2].work_key).exists()


def test_a_journal_from_before_bundles_keeps_uploaded_files_lone(tmp_path: Path) -> None:
    """An uploaded file of an older worker may have been sent with `submitWork` already: it must
    never go into a bundle (the file would count twice if both were mined)."""
    tmp_path.mkdir(exist_ok=True)
    db = sqlite3.connect(tmp_path / "journal.sqlite3")
    db.execute(
        "CREATE TABLE batches (pool_id INTEGER NOT NULL, version INTEGER NOT NULL, batch INTEGER NOT NULL,"
        " work_key TEXT NOT NULL UNIQUE, work_units INTEGER NOT NULL, samples INTEGER NOT NULL, state TEXT NOT NULL,"
        " reported INTEGER NOT NULL DEFAULT 0, tx_hash TEXT, error TEXT, created_at REAL NOT NULL,"
        " updated_at REAL NOT NULL, suffix TEXT NOT NULL DEFAULT 'parquet', PRIMARY KEY (pool_id, version, batch))"
    )
    for batch, state in enumerate(("uploaded", "written", "submitted")):
        db.execute(
            "INSERT INTO batches VALUES (1, 0, ?, ?, 10, 64, ?, 0, NULL, NULL, 0, 0, 'parquet')",
            (batch, f"{batch:064x}", state),
        )
    db.commit()
    db.close()
    journal = Journal(tmp_path)
    assert [e.submission for e in journal.entries(1)] == [bytes.fromhex(f"{0:064x}"), None, None]


# --- crash recovery ---------------------------------------------------------------------------


def test_a_bundle_planned_but_never_mined_is_sent_again_whole(tmp_path: Path) -> None:
    pool = FakePool()
    node = make_node(tmp_path, pool)
    entries = [uploaded(node, b) for b in range(3)]
    key = bundle_key(*canonical((e.work_key, e.work_units) for e in entries))
    node.journal.plan(entries, key)  # killed right after the plan, before the transaction
    node.journal.close()

    restarted = make_node(tmp_path, pool)
    restarted.resume()
    assert pool.lookups == [key]  # looked up first: the transaction might have been mined
    assert [(f, len(files)) for f, files, _ in pool.sent] == [("submitWorkBundle", 3)]
    assert key in pool.work
    assert {e.state for e in restarted.journal.entries(POOL)} == {BatchState.SUBMITTED}


def test_a_bundle_mined_but_not_journaled_is_found_and_not_sent_again(tmp_path: Path) -> None:
    pool = FakePool()
    node = make_node(tmp_path, pool)
    entries = [uploaded(node, b) for b in range(3)]
    bundle = Bundle.of(entries)
    node.journal.plan(entries, bundle.key)
    pool.submit_work_bundle(POOL, NODE.address, list(bundle.file_keys), list(bundle.file_units), 0)  # mined...
    node.journal.close()  # ...and killed before the journal said so

    restarted = make_node(tmp_path, pool)
    restarted.resume()
    assert len(pool.sent) == 1  # no second transaction
    after = restarted.journal.entries(POOL)
    assert {(e.state, e.tx_hash) for e in after} == {(BatchState.SUBMITTED, None)}  # found on-chain
    assert pool.mined_files().count(entries[0].work_key) == 1


def test_a_restored_bundle_is_sent_whole_even_when_one_file_is_queued_alone(tmp_path: Path) -> None:
    """A heartbeat that re-assigns one batch of a planned bundle queues that file alone: the whole
    planned bundle goes out, never the file by itself."""
    pool = FakePool()
    node = make_node(tmp_path, pool)
    entries = [uploaded(node, b) for b in range(3)]
    key = Bundle.of(entries).key
    node.journal.plan(entries, key)
    done = node.finish_all([(node.journal.refreshed(entries[1]), False)])
    assert [(f, len(files)) for f, files, _ in pool.sent] == [("submitWorkBundle", 3)]
    assert len(done) == 3 and {d.state for d in done} == {BatchState.SUBMITTED}
    assert node.finish_all([(entries[0], False)]) == []  # on-chain already: nothing to do


def test_a_file_sent_alone_before_a_crash_stays_alone(tmp_path: Path) -> None:
    """Killed while a lone `submitWork` was in flight: on restart the file is looked up and recorded,
    not bundled with the files that waited beside it."""
    pool = FakePool()
    node = make_node(tmp_path, pool)
    lone = uploaded(node, 0)
    node.journal.plan([lone], lone.work_key)
    pool.submit_work(POOL, NODE.address, lone.work_key, lone.work_units, 0)  # mined, not journaled
    others = [uploaded(node, b) for b in (1, 2)]
    node.journal.close()

    restarted = make_node(tmp_path, pool)
    restarted.resume()
    assert [(f, len(files)) for f, files, _ in pool.sent] == [("submitWork", 1), ("submitWorkBundle", 2)]
    assert sorted(pool.mined_files()) == sorted([lone.work_key, *(e.work_key for e in others)])
    assert {e.state for e in restarted.journal.entries(POOL)} == {BatchState.SUBMITTED}


def test_a_training_pool_never_bundles(tmp_path: Path) -> None:
    pool = FakePool(latest=0)
    node = make_node(tmp_path, pool)
    node.training = True
    node.finish_all([(uploaded(node, 0, version=0), True), (uploaded(node, 1, version=0), True)])
    assert [f for f, _, _ in pool.sent] == ["submitWork", "submitWork"]


def test_the_cli_default_is_the_workers() -> None:
    from proofpool.cli.worker import DEFAULT_MAX_BUNDLE as CLI_DEFAULT

    assert CLI_DEFAULT == DEFAULT_MAX_BUNDLE
