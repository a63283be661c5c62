"""Getting a journaled file into the store and onto the chain, each step safe to repeat.

Upload: a fresh presigned URL per try (URLs expire), then the PUT. Re-uploading the same key
with the same bytes is harmless, so a worker restarted after an upload simply uploads again.
A `403 not_active_member` right after a (re)join is the backend's indexer lagging the chain,
waited out up to a bound (`proofpool.worker.membership`); a `429` waits its Retry-After.

Submit: before every `submitWork` the chain is asked whether the work key is already there.
A worker killed after its transaction was mined but before the journal said so finds it
on-chain and records it instead of sending a second transaction; so does a worker whose
transaction was mined while the receipt wait timed out.

Bundles: uploaded files waiting together that share (pool, model version) go out as one
`submitWorkBundle` (`Bundle`, grouped by `group_waiting`), a lone file as `submitWork`. A bundle
is looked up and retried exactly as a single file, under its bundle key (`submit_bundle`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import httpx
from proofpool.worker.journal import UPDATE_SUFFIX, JournalEntry
from proofpool.worker.membership import JoinIndexWait
from proofpool.worker.retry import Backoff, is_transient, retry
from web3.types import TxReceipt

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.bundles import MAX_BUNDLE_FILES, bundle_key, canonical
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.errors import ContractRevert
from proofpool.infra.http.node_api import NodeApi
from proofpool.infra.storage.s3 import put_presigned

log = logging.getLogger(__name__)

T = TypeVar("T")

REVERT_ATTEMPTS = 5
"""Tries of a `submitWork` that reverts (state may change: a paused pool, a lagging membership)."""
DEFAULT_MAX_BUNDLE = 32
"""Files per `submitWorkBundle` at most, unless `--max-bundle` says otherwise (1: never bundle): the size
at which the contracts keep submit, attest and finalize at or below 25,000 gas per file (a lone
`submitWork` file costs about 103,000)."""


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
    membership: JoinIndexWait | None = None,
) -> str:
    """PUT the file through a presigned URL (over `http`, a reused client); returns the object key
    (a rollout file's or, for a training pool's journaled update, an update file's).
    With `membership`, a `not_active_member` refusal is waited out within its bound."""

    def once() -> str:
        kind = "update" if entry.suffix == UPDATE_SUFFIX else "rollouts"
        ticket = api.request_upload(entry.pool_id, entry.work_key, len(data), format=kind)
        if membership is not None:
            membership.seen()
        put_presigned(ticket.url, ticket.headers, data, client=http)
        return ticket.key

    def transient(exc: BaseException) -> bool:
        return is_transient(exc) or (membership is not None and membership.transient(exc))

    return retry(once, what="upload", stop=stop, backoff=backoff, transient=transient, context=_context(entry))


STALE_MARGIN = 1
"""Versions kept between a batch and the window's lower edge when it is sent: validators judge the
window at the submission's block, and a checkpoint published between this check and that block
must not push an honest batch out of it (the devnet's fault drills did exactly that once)."""


class StaleBatch(SubmitRefused):
    """The batch's checkpoint version is (about to fall) outside the pool's window."""


class Versioned(Protocol):
    """What the staleness check reads: a journal entry, or a bundle of them."""

    @property
    def pool_id(self) -> int: ...

    @property
    def version(self) -> int: ...


@dataclass(frozen=True)
class Bundle:
    """Files sent as one `submitWorkBundle`: keys in the contract's canonical (ascending) order."""

    pool_id: int
    version: int
    """The model version claimed on-chain, the same for every file."""
    file_keys: tuple[bytes, ...]
    file_units: tuple[int, ...]
    key: bytes
    """`bundle_key(file_keys, file_units)`: the key the chain records the bundle under."""

    @classmethod
    def of(cls, entries: Sequence[JournalEntry]) -> Bundle:
        """The bundle of `entries` (as `submitWork` would send each: the strategy's `on_chain` view);
        ValueError for no file, too many, a repeated file, or files of different pools or versions."""
        kinds = {(e.pool_id, e.version) for e in entries}
        if len(kinds) > 1:
            raise ValueError(f"a bundle's files share one pool and model version, got {sorted(kinds)}")
        keys, units = canonical((e.work_key, e.work_units) for e in entries)
        pool_id, version = kinds.pop()
        return cls(pool_id, version, tuple(keys), tuple(units), bundle_key(keys, units))

    @property
    def work_units(self) -> int:
        return sum(self.file_units)


def group_waiting(entries: Sequence[T], max_bundle: int, kind: Callable[[T], Hashable]) -> list[list[T]]:
    """`entries` (waiting, in order) split into submissions: those of the same `kind` (pool and
    on-chain model version) together, at most `max_bundle` (capped at the contract's
    `MAX_BUNDLE_FILES`) per submission, in the order each group's first entry came. A group of one
    is a lone `submitWork`."""
    if max_bundle < 1:
        raise ValueError(f"max_bundle must be at least 1, got {max_bundle}")
    size = min(max_bundle, MAX_BUNDLE_FILES)
    by_kind: dict[Hashable, list[T]] = {}
    for entry in entries:
        by_kind.setdefault(kind(entry), []).append(entry)
    groups: list[list[T]] = []
    for same in by_kind.values():
        groups += [same[start : start + size] for start in range(0, len(same), size)]
    return groups


def stale_reason(client: ChainClient, entry: Versioned, window: int) -> str | None:
    """Why `entry` (a journaled file, or a bundle) must not be submitted any more, or None: its version
    must be at least latest - window + `STALE_MARGIN` (with the validators' async window)."""
    latest = client.pool.latest_checkpoint(entry.pool_id).version
    oldest = max(0, latest - window + STALE_MARGIN)
    if entry.version >= oldest:
        return None
    return (
        f"version {entry.version} is below {oldest} (latest {latest}, window {window}, margin {STALE_MARGIN}); "
        "validators would reject it as stale and slash the node"
    )


def submit(
    client: ChainClient,
    entry: JournalEntry,
    stop: threading.Event,
    backoff: Backoff,
    window: int | None = None,
    fresh: bool = False,
) -> Submitted:
    """`submitWork` for `entry` unless the chain already has it; `SubmitRefused` after repeated
    reverts, `StaleBatch` when `window` is given and the version is too old (`stale_reason`),
    checked again right before every send.

    A `fresh` batch (generated by this process, never sent) skips the look-up on its first try:
    nothing can have put its work key on-chain yet. A retry looks, since the try before may have
    been mined after all."""

    def send() -> TxReceipt:
        return client.pool.submit_work(entry.pool_id, client.address, entry.work_key, entry.work_units, entry.version)

    return _submit(client, entry, entry.work_key, send, "submitWork", stop, backoff, window, fresh, _context(entry))


def submit_bundle(
    client: ChainClient,
    bundle: Bundle,
    stop: threading.Event,
    backoff: Backoff,
    window: int | None = None,
    fresh: bool = False,
) -> Submitted:
    """`submitWorkBundle` for `bundle` unless the chain already has its key: `submit` for many files
    (the same look-up, staleness check, retries and refusals). A bundle planned by this process and
    never sent is `fresh`."""

    def send() -> TxReceipt:
        return client.pool.submit_work_bundle(
            bundle.pool_id, client.address, list(bundle.file_keys), list(bundle.file_units), bundle.version
        )

    context = bundle_context(bundle)
    return _submit(client, bundle, bundle.key, send, "submitWorkBundle", stop, backoff, window, fresh, context)


def _submit(
    client: ChainClient,
    what: Versioned,
    key: bytes,
    send: Callable[[], TxReceipt],
    name: str,
    stop: threading.Event,
    backoff: Backoff,
    window: int | None,
    fresh: bool,
    context: dict[str, object],
) -> Submitted:
    node = client.address
    reverts = 0
    look_up = not fresh

    def once() -> Submitted:
        nonlocal look_up
        work = client.pool.get_work(what.pool_id, key) if look_up else None
        look_up = True  # every retry looks
        if work is not None and work.status is not WorkStatus.NONE:
            if work.node != node:
                raise SubmitRefused(f"work key 0x{key.hex()} was submitted by another node ({work.node})")
            log.info("work already on-chain, not sending it again", extra=context)
            return Submitted(None)
        stale = None if window is None else stale_reason(client, what, window)
        if stale is not None:
            raise StaleBatch(stale)
        receipt = send()
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
        return retry(once, what=name, stop=stop, backoff=backoff, transient=transient, context=context)
    except ContractRevert as revert:
        raise SubmitRefused(f"{name} refused {reverts} times: {revert}") from revert


def bundle_context(bundle: Bundle) -> dict[str, object]:
    """A bundle's log fields: its key stands where a single file's work key would."""
    return {
        "pool": bundle.pool_id,
        "work_key": "0x" + bundle.key.hex(),
        "version": bundle.version,
        "files": len(bundle.file_keys),
    }


def _context(entry: JournalEntry) -> dict[str, object]:
    return {
        "pool": entry.pool_id,
        "work_key": "0x" + entry.work_key.hex(),
        "version": entry.version,
        "batch": entry.batch,
    }
