"""The worker's submitter sends files waiting together as one `submitWorkBundle` on a real chain
(the session's anvil with the contracts of this checkout), and a restarted worker neither resends a
mined bundle nor loses one that was planned but never sent.

The worker is a `WorkerNode` in this process with the node's real `ChainClient` and journal. Its
files are journaled as uploaded already, so the backend and the object store play no part (the
object the worker would talk to for them fails the test if touched); the chain is what is checked.
"""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from eth_account.signers.local import LocalAccount
from proofpool.devnet.market import (
    NODE_COMPUTE_UNITS,
    PROVIDER_STAKE,
    Cast,
    devnet_pool_params,
    onboard_node,
    open_market,
)
from proofpool.worker import node as worker_node
from proofpool.worker.console import WorkerConsole
from proofpool.worker.journal import BatchState, JournalEntry
from proofpool.worker.node import Submitter, WorkerConfig, WorkerNode
from proofpool.worker.retry import Backoff
from rich.console import Console

from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.bundles import bundle_key, canonical
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.events import ChainEvent
from proofpool.infra.chain.signing import sign_invite
from tests.fixtures.deployment import Deployment

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Member:
    """A started pool and alice's node, an active member of it, sending as itself."""

    pool_id: int
    node: LocalAccount
    client: ChainClient
    admin: ChainClient


@pytest.fixture(scope="module")
def member(deployment: Deployment) -> Member:
    cast = Cast()
    admin = deployment.admin
    pool_id = open_market(admin, cast, devnet_pool_params(cast))
    provider = onboard_node(admin, cast.alice, cast.alice_node, PROVIDER_STAKE, NODE_COMPUTE_UNITS, pools=(pool_id,))
    expiry = admin.w3.eth.get_block("latest")["timestamp"] + 24 * 3600
    provider.pool.join_pool(
        sign_invite(cast.manager, pool_id, cast.alice_node.address, 1, expiry, admin.chain_id, admin.pool.address)
    )
    return Member(pool_id, cast.alice_node, admin.as_account(cast.alice_node), admin)


class Untouchable:
    """The backend and the object store: the files are uploaded already, so any use is a failure."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} must not be used: the files are uploaded")


def worker(member: Member, state_dir: Path) -> WorkerNode:
    """The node's worker over `state_dir` (a second one over the same directory is a restart)."""
    config = WorkerConfig(
        pool_id=member.pool_id, state_dir=state_dir, checkpoint_cache_dir=state_dir / "cache", backoff=Backoff(0.1)
    )
    console = WorkerConsole(member.node.address, "http://127.0.0.1:9", Console(file=open("/dev/null", "w")))  # noqa: SIM115
    return WorkerNode(config, member.node, member.client, Untouchable(), lambda: Untouchable(), console)  # type: ignore[arg-type]


def journal_uploaded(node: WorkerNode, tag: str, count: int) -> list[JournalEntry]:
    """`count` files of checkpoint 0, journaled and marked uploaded (work units 40 + i)."""
    entries = []
    for batch in range(count):
        data = f"{tag}: rollouts of batch {batch}".encode()
        key = hashlib.sha256(data).digest()
        entry = node.journal.record_written(node.config.pool_id, 0, batch, key, data, 40 + batch, 64)
        entries.append(node.journal.set_state(entry, BatchState.UPLOADED))
    return entries


def pool_events(member: Member, name: str, from_block: int) -> list[ChainEvent]:
    client = member.admin
    logs = client.w3.eth.get_logs({"fromBlock": from_block, "toBlock": "latest", "address": client.pool.address})
    return [e for e in client.decoder().decode_logs(logs) if e.name == name and e.args["poolId"] == member.pool_id]


@pytest.fixture
def sent_from(member: Member) -> int:
    """The first block a test's transactions can be in."""
    return member.admin.w3.eth.block_number + 1


def test_three_queued_files_go_out_as_one_bundle_and_a_restart_does_not_resend_it(
    member: Member, tmp_path: Path, sent_from: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(worker_node, "QUEUE_DEPTH", 3)  # room for all three before the thread looks
    node = worker(member, tmp_path / "state")
    entries = journal_uploaded(node, "bundle", 3)
    submitter = Submitter(node)
    for entry in entries:
        submitter.put(entry, None)
    submitter.start()
    submitter.drain(timeout=60)
    submitter.raise_failure()

    assert pool_events(member, "WorkSubmitted", sent_from) == []
    (event,) = pool_events(member, "WorkBundleSubmitted", sent_from)
    keys, units = canonical((e.work_key, e.work_units) for e in entries)
    key = bundle_key(keys, units)
    assert event.args["workKey"] == key and event.args["node"] == member.node.address
    assert list(event.args["fileKeys"]) == keys and list(event.args["fileUnits"]) == units
    assert event.args["workUnits"] == sum(units) == 123
    work = member.admin.pool.get_work(member.pool_id, key)
    assert (work.status, work.node, work.work_units) == (WorkStatus.PENDING, member.node.address, 123)
    assert member.admin.pool.work_files(member.pool_id, key) == 3
    done = node.journal.entries(member.pool_id)
    assert {(e.state, e.submission) for e in done} == {(BatchState.SUBMITTED, key)}
    (tx_hash,) = {e.tx_hash for e in done}
    assert tx_hash is not None
    receipt = member.admin.w3.eth.get_transaction_receipt(tx_hash)
    assert receipt["gasUsed"] < 2 * 81_542  # less than two `submitWork`s (93,631 measured for three files)
    node.journal.close()

    # Killed after the bundle was mined but before the journal said so: put the rows back.
    db = sqlite3.connect(tmp_path / "state" / "journal.sqlite3")
    db.execute("UPDATE batches SET state = 'uploaded', tx_hash = NULL")
    db.commit()
    db.close()
    nonce = member.admin.w3.eth.get_transaction_count(member.node.address)
    restarted = worker(member, tmp_path / "state")
    restarted.resume()
    assert member.admin.w3.eth.get_transaction_count(member.node.address) == nonce  # nothing sent
    assert len(pool_events(member, "WorkBundleSubmitted", sent_from)) == 1
    after = restarted.journal.entries(member.pool_id)
    assert {(e.state, e.tx_hash) for e in after} == {(BatchState.SUBMITTED, None)}  # found on-chain
    restarted.journal.close()


def test_a_bundle_planned_but_never_sent_is_sent_whole_after_a_restart(
    member: Member, tmp_path: Path, sent_from: int
) -> None:
    node = worker(member, tmp_path / "state")
    entries = journal_uploaded(node, "planned", 3)
    keys, units = canonical((e.work_key, e.work_units) for e in entries)
    key = bundle_key(keys, units)
    node.journal.plan(entries, key)  # killed right after the plan, before the transaction
    node.journal.close()

    restarted = worker(member, tmp_path / "state")
    restarted.resume()
    (event,) = pool_events(member, "WorkBundleSubmitted", sent_from)
    assert event.args["workKey"] == key and list(event.args["fileKeys"]) == keys
    assert {e.state for e in restarted.journal.entries(member.pool_id)} == {BatchState.SUBMITTED}
    restarted.journal.close()


def test_a_lone_file_goes_out_with_submit_work(member: Member, tmp_path: Path, sent_from: int) -> None:
    node = worker(member, tmp_path / "state")
    (entry,) = journal_uploaded(node, "lone", 1)
    submitter = Submitter(node)
    submitter.start()
    submitter.put(entry, None)
    submitter.drain(timeout=60)
    submitter.raise_failure()
    (event,) = pool_events(member, "WorkSubmitted", sent_from)
    assert event.args["workKey"] == entry.work_key
    assert pool_events(member, "WorkBundleSubmitted", sent_from) == []
    assert member.admin.pool.work_files(member.pool_id, entry.work_key) == 1
    node.journal.close()
