"""A journaled batch whose version fell out of the pool's window while the worker was away is
abandoned, not submitted: validators judge staleness at the submission's block, so sending it
would get an honest node slashed. Chain and API are faked (only `latest_checkpoint` is read and
nothing may be uploaded or submitted); the journal is the real SQLite one."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from eth_account import Account
from proofpool.worker.console import WorkerConsole
from proofpool.worker.journal import BatchState
from proofpool.worker.node import WorkerConfig, WorkerNode
from proofpool.worker.submit import stale_reason
from rich.console import Console

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.bindings import WorkStatus

NODE = Account.from_key(ANVIL_KEYS[6])


class Untouchable:
    """Any use but the ones allowed is a failure of the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{name} must not be used for a stale batch")


def node_at(tmp_path: Path, latest: int) -> WorkerNode:
    pool = SimpleNamespace(latest_checkpoint=lambda _pool: SimpleNamespace(version=latest))
    client = SimpleNamespace(pool=pool, address=NODE.address)
    config = WorkerConfig(pool_id=1, state_dir=tmp_path / "state", checkpoint_cache_dir=tmp_path / "cache")
    console = WorkerConsole(NODE.address, "http://127.0.0.1:9", Console(file=open("/dev/null", "w")))  # noqa: SIM115
    return WorkerNode(config, NODE, client, Untouchable(), lambda: Untouchable(), console)  # type: ignore[arg-type]


def journaled(node: WorkerNode, version: int):
    data = f"rollouts of version {version}".encode()
    return node.journal.record_written(1, version, 0, hashlib.sha256(data).digest(), data, 10, 4)


def test_a_batch_below_the_window_is_abandoned_without_upload(tmp_path: Path) -> None:
    node = node_at(tmp_path, latest=3)
    done = node.finish(journaled(node, version=0))
    assert done.state is BatchState.ABANDONED
    assert "below 2 (latest 3, window 2, margin 1)" in (done.error or "")
    assert node.journal.read_file(done)  # the file is kept


def test_a_batch_inside_the_window_goes_on_to_the_upload(tmp_path: Path) -> None:
    node = node_at(tmp_path, latest=3)
    try:
        node.finish(journaled(node, version=2))
    except AssertionError as used:
        assert "request_upload" in str(used)  # it went on to upload: not abandoned
    else:
        raise AssertionError("an in-window batch was not uploaded")


def test_the_window_is_checked_again_right_before_submit_work(tmp_path: Path) -> None:
    """A checkpoint published while the batch uploaded: the send is refused, not slashed later."""
    import threading

    from proofpool.worker.retry import Backoff
    from proofpool.worker.submit import StaleBatch, submit

    versions = iter([2, 4])  # at the upload: fine; at the send: two versions later

    def sent(*_args: object) -> None:
        raise AssertionError("submitWork was sent for a stale batch")

    pool = SimpleNamespace(
        latest_checkpoint=lambda _pool: SimpleNamespace(version=next(versions)),
        get_work=lambda _pool, _key: SimpleNamespace(status=WorkStatus.NONE),
        submit_work=sent,
    )
    client = SimpleNamespace(pool=pool, address=NODE.address)
    node = node_at(tmp_path, latest=2)
    entry = journaled(node, version=2)
    assert stale_reason(client, entry, window=2) is None  # type: ignore[arg-type]
    try:
        submit(client, entry, threading.Event(), Backoff(), window=2)  # type: ignore[arg-type]
    except StaleBatch as refused:
        assert "below 3 (latest 4" in str(refused)
    else:
        raise AssertionError("a batch that fell out of the window was sent")
