"""Getting a journaled file into the store and onto the chain, each step safe to repeat.

Upload: a fresh presigned URL per try (URLs expire), then the PUT. Re-uploading the same key
with the same bytes is harmless, so a worker restarted after an upload simply uploads again.

Submit: before every `submitWork` the chain is asked whether the work key is already there.
A worker killed after its transaction was mined but before the journal said so finds it
on-chain and records it instead of sending a second transaction; so does a worker whose
transaction was mined while the receipt wait timed out.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import httpx

from proofpool.chain.bindings import WorkStatus
from proofpool.chain.client import ChainClient
from proofpool.chain.errors import ContractRevert
from proofpool.errors import ProofpoolError
from proofpool.http.node_api import NodeApi
from proofpool.storage.s3 import put_presigned
from worker.journal import JournalEntry
from worker.retry import Backoff, is_transient, retry

log = logging.getLogger(__name__)

REVERT_ATTEMPTS = 5
"""Tries of a `submitWork` that reverts (state may change: a paused pool, a lagging membership)."""


class SubmitRefused(ProofpoolError):
    """The chain keeps refusing the submission; the batch is abandoned (its file is kept)."""


@dataclass(frozen=True)
class Submitted:
    tx_hash: str | None
    """None when the work was found on-chain already (sent before a crash)."""


def upload(
    api: NodeApi,
    entry: JournalEntry,
    data: bytes,
    stop: threading.Event,
    backoff: Backoff,
    http: httpx.Client | None = None,
) -> str:
    """PUT the file through a presigned URL (over `http`, a reused client); returns the object key."""

    def once() -> str:
        ticket = api.request_upload(entry.pool_id, entry.work_key, len(data))
        put_presigned(ticket.url, ticket.headers, data, client=http)
        return ticket.key

    return retry(once, what="upload", stop=stop, backoff=backoff, context=_context(entry))


STALE_MARGIN = 1
"""Versions kept between a batch and the window's lower edge when it is sent: validators judge the
window at the submission's block, and a checkpoint published between this check and that block
must not push an honest batch out of it (the devnet's fault drills did exactly that once)."""


class StaleBatch(SubmitRefused):
    """The batch's checkpoint version is (about to fall) outside the pool's window."""


def stale_reason(client: ChainClient, entry: JournalEntry, window: int) -> str | None:
    """Why `entry` must not be submitted any more, or None: its version must be at least
    latest - window + `STALE_MARGIN` (with the validators' async window)."""
    latest = client.pool.latest_checkpoint(entry.pool_id).version
    oldest = max(0, latest - window + STALE_MARGIN)
    if entry.version >= oldest:
        return None
    return (
        f"version {entry.version} is below {oldest} (latest {latest}, window {window}, margin {STALE_MARGIN}); "
        "validators would reject it as stale and slash the node"
    )


def submit(
    client: ChainClient, entry: JournalEntry, stop: threading.Event, backoff: Backoff, window: int | None = None
) -> Submitted:
    """`submitWork` for `entry` unless the chain already has it; `SubmitRefused` after repeated
    reverts, `StaleBatch` when `window` is given and the version is too old (`stale_reason`),
    checked again right before every send."""
    node = client.address
    reverts = 0

    def once() -> Submitted:
        work = client.pool.get_work(entry.pool_id, entry.work_key)
        if work.status is not WorkStatus.NONE:
            if work.node != node:
                raise SubmitRefused(f"work key 0x{entry.work_key.hex()} was submitted by another node ({work.node})")
            log.info("work already on-chain, not sending it again", extra=_context(entry))
            return Submitted(None)
        stale = None if window is None else stale_reason(client, entry, window)
        if stale is not None:
            raise StaleBatch(stale)
        receipt = client.pool.submit_work(entry.pool_id, node, entry.work_key, entry.work_units, entry.version)
        return Submitted("0x" + receipt["transactionHash"].hex())

    def transient(exc: BaseException) -> bool:
        nonlocal reverts
        if isinstance(exc, SubmitRefused):
            return False
        if isinstance(exc, ContractRevert):
            reverts += 1
            return reverts < REVERT_ATTEMPTS
        return is_transient(exc)

    try:
        return retry(once, what="submitWork", stop=stop, backoff=backoff, transient=transient, context=_context(entry))
    except ContractRevert as revert:
        raise SubmitRefused(f"submitWork refused {reverts} times: {revert}") from revert


def _context(entry: JournalEntry) -> dict[str, object]:
    return {
        "pool": entry.pool_id,
        "work_key": "0x" + entry.work_key.hex(),
        "version": entry.version,
        "batch": entry.batch,
    }
