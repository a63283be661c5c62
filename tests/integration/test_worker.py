"""`proofpool worker run` against the real market: anvil, PostgreSQL, Redis, SeaweedFS, the
indexer and the backend as processes, and the worker as a child process running vLLM on the
devnet model. The three tests share one node and one journal directory, in order: a worker
joins and submits files; a worker SIGKILLed mid-upload is restarted and loses nothing,
duplicates nothing; a checkpoint published mid-run is picked up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest
from proofpool.devnet.services import wait_until
from proofpool.worker.journal import BatchState, Journal
from proofpool_arithmetic.build import init_model

from proofpool.core.rollout import read_rollouts
from proofpool.infra.chain.bindings import MemberState
from proofpool.infra.chain.events import ChainEvent
from proofpool.infra.checkpoint import publish_checkpoint
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore, rollout_key
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.market import Market

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

STARTUP = 300.0
"""Seconds a worker may take to load vLLM, join and finish its first batches on 2 busy cores."""


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node's state directory, kept across the tests like a provider's disk across restarts."""
    return tmp_path_factory.mktemp("worker-state")


@pytest.fixture(scope="module")
def store(seaweed: SeaweedProcess) -> ObjectStore:
    return ObjectStore.from_settings(seaweed.settings(get_settings()))


def submissions(market: Market) -> list[ChainEvent]:
    """Every file the market's node submitted, in chain order: its WorkSubmitted events, and one
    event per file of its WorkBundleSubmitted events (with that file's key and units)."""
    client = market.stack.admin
    logs = client.w3.eth.get_logs(
        {"fromBlock": client.book.deploy_block, "toBlock": "latest", "address": client.pool.address}
    )
    files: list[ChainEvent] = []
    for e in client.decoder().decode_logs(logs):
        if e.args.get("node") != market.node or e.args.get("poolId") != market.pool_id:
            continue
        if e.name == "WorkSubmitted":
            files.append(e)
        elif e.name == "WorkBundleSubmitted":
            files += [
                dataclasses.replace(e, args={**e.args, "workKey": key, "workUnits": units})
                for key, units in zip(e.args["fileKeys"], e.args["fileUnits"], strict=True)
            ]
    return files


def journal_entries(journal_dir: Path, pool_id: int) -> list:
    journal = Journal(journal_dir)
    try:
        return journal.entries(pool_id)
    finally:
        journal.close()


def assert_chain_matches_journal_and_store(market: Market, journal_dir: Path, store: ObjectStore) -> list[ChainEvent]:
    """Each journaled batch is on-chain exactly once, nothing else is, and each file is in the store
    with the sha256 the chain records, holding the model version the chain records."""
    events = submissions(market)
    keys = [e.args["workKey"] for e in events]
    assert len(keys) == len(set(keys)), "a work key was submitted twice"
    entries = journal_entries(journal_dir, market.pool_id)
    assert {e.work_key for e in entries} == set(keys)
    assert len({(e.version, e.batch) for e in entries}) == len(entries) == len(keys)
    assert all(e.state is BatchState.SUBMITTED for e in entries), entries
    for event in events:
        key = event.args["workKey"]
        data = store.get_object(rollout_key(market.pool_id, market.node, key.hex()))
        assert hashlib.sha256(data).digest() == key
        meta, rows = read_rollouts(data)
        assert (meta.pool_id, meta.node) == (market.pool_id, market.node)
        assert {r.model_version for r in rows} == {event.args["modelVersion"]}
        assert sum(len(r.completion_tokens) for r in rows) == event.args["workUnits"]
        assert len(rows) == 64  # devnet assignment: 8 problems x groups of 8
    assert not list((journal_dir / "files").glob("*.parquet")), "a submitted file was kept, or one was not submitted"
    return events


def test_worker_joins_and_submits_files(market: Market, journal_dir: Path, store: ObjectStore) -> None:
    client = market.stack.admin
    assert client.pool.get_member(market.pool_id, market.node).state is MemberState.NONE
    worker = market.spawn_worker(journal_dir, "--max-batches", "3")
    worker.process.wait(timeout=STARTUP)
    assert worker.process.returncode == 0, worker.log_tail()

    assert client.pool.get_member(market.pool_id, market.node).state is MemberState.ACTIVE  # joined by itself
    events = assert_chain_matches_journal_and_store(market, journal_dir, store)
    assert len(events) == 3
    assert {e.args["modelVersion"] for e in events} == {0}
    log = worker.log_path.read_text()
    assert "joined pool" in log and "tok/s" in log


def test_worker_killed_mid_upload_resumes_without_duplicates(
    market: Market, journal_dir: Path, store: ObjectStore, seaweed: SeaweedProcess
) -> None:
    before = len(submissions(market))
    worker = market.spawn_worker(journal_dir, name="worker-killed")
    wait_until(lambda: len(submissions(market)) > before, timeout=STARTUP, what="a first submission", service=worker)

    os.kill(seaweed.pid, signal.SIGSTOP)  # the store stops answering: the next PUT hangs mid-upload
    try:
        wait_until(
            lambda: any(e.state is BatchState.WRITTEN for e in journal_entries(journal_dir, market.pool_id)),
            timeout=120,
            what="a batch written and stuck in its upload",
            service=worker,
        )
        worker.kill()
    finally:
        os.kill(seaweed.pid, signal.SIGCONT)
    stuck = [e for e in journal_entries(journal_dir, market.pool_id) if e.state is BatchState.WRITTEN]
    assert stuck  # the hung upload, plus any batch generated meanwhile (the submitter queues up to two)
    for entry in stuck:
        assert (journal_dir / "files" / f"{entry.work_key.hex()}.parquet").is_file()  # finished files survived

    restarted = market.spawn_worker(journal_dir, "--max-batches", "1", name="worker-restarted")
    restarted.process.wait(timeout=STARTUP)
    assert restarted.process.returncode == 0, restarted.log_tail()
    assert "resuming batch" in restarted.log_path.read_text()
    events = assert_chain_matches_journal_and_store(market, journal_dir, store)
    assert {e.work_key for e in stuck} <= {e.args["workKey"] for e in events}


def test_worker_picks_up_a_checkpoint_published_mid_run(
    market: Market, journal_dir: Path, store: ObjectStore, tmp_path: Path
) -> None:
    before = len(submissions(market))
    worker = market.spawn_worker(journal_dir, name="worker-checkpoint")
    wait_until(lambda: len(submissions(market)) > before, timeout=STARTUP, what="a submission on v0", service=worker)

    manager = market.stack.admin.as_account(market.stack.cast.manager)
    model_dir = init_model(tmp_path / "v1", seed=1)  # same architecture, other weights
    prefix = f"test/{uuid.uuid4().hex}/"  # the session's bucket is shared with other modules' pools
    published = publish_checkpoint(manager, store, market.pool_id, 1, model_dir, shard_size=1 << 20, prefix=prefix)
    wait_until(
        lambda: any(e.args["modelVersion"] == 1 for e in submissions(market)),
        timeout=STARTUP,
        what="a submission on checkpoint 1",
        service=worker,
    )
    started = time.monotonic()
    assert worker.stop(timeout=30) == 0, worker.log_tail()  # SIGTERM: clean exit within 30 s
    assert time.monotonic() - started < 30

    events = assert_chain_matches_journal_and_store(market, journal_dir, store)
    versions = [e.args["modelVersion"] for e in events]
    first_v1 = versions.index(1)
    assert set(versions[first_v1:]) == {1}, "files after the switch must all carry the new version"
    assert published.version == 1
    assert "checkpoint 1" in worker.log_path.read_text()


def test_worker_skips_a_checkpoint_it_cannot_fetch_and_reports_why(market: Market, journal_dir: Path) -> None:
    worker = market.spawn_worker(journal_dir, name="worker-unservable")
    manager = market.stack.admin.as_account(market.stack.cast.manager)
    bogus = hashlib.sha256(b"a manifest nobody uploaded").digest()
    nowhere = f"s3://{market.bucket}/test/{uuid.uuid4().hex}/pools/1/checkpoints/2/"  # no other module's files
    manager.pool.publish_checkpoint(market.pool_id, 2, bogus, nowhere)

    def problem() -> dict | None:
        reply = httpx.get(f"{market.stack.backend_url}/v1/nodes/{market.node}", timeout=5)
        return reply.json()["unservable"]

    reported = lambda: (problem() or {}).get("checkpoint_version") == 2  # noqa: E731
    wait_until(reported, timeout=STARTUP, what="the unservable report", service=worker)
    report = problem()
    assert report is not None and report["reason"] == "manifest_missing", report
    assert worker.alive  # skipped, not crashed
    assert not any(e.args["modelVersion"] == 2 for e in submissions(market))
    assert worker.stop(timeout=30) == 0, worker.log_tail()
    assert "cannot serve checkpoint 2" in worker.log_path.read_text()
