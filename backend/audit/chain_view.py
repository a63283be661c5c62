"""What the audits read of the chain about one submission: its logs up to a block, the contract's
status of it at that block, and the calldata of the transactions that judged it.

The logs are one `eth_getLogs` of the ComputePool filtered by the indexed topics (poolId, workKey)
from the deploy block, decoded by the indexer's `FastDecoder`, each checked against its block's
header, with the last block's header read before and after (as `ChainSource.fetch_range` does),
so a reorg under the read is noticed and the read made again rather than mixing two chains.

A node that does not answer is remembered for `OUTAGE_MEMORY` seconds: the routes are public, and
each request would otherwise wait out the JSON-RPC client's retries again. Calldata is cached by
transaction hash, which commits to it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from eth_abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from proofpool.backend.indexer.decode import FastDecoder
from proofpool.backend.indexer.records import IndexedEvent
from proofpool.backend.indexer.source import ChainMoved, ChainSource
from web3 import Web3
from web3.exceptions import Web3RPCError

from proofpool.core.errors import ConfigError, ServiceUnavailable
from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.calls import AbiFunction, rpc
from proofpool.infra.chain.deploy import AddressBook, load_address_book
from proofpool.infra.chain.rpc import connect

OUTAGE_MEMORY = 10.0
"""Seconds a node that did not answer is taken as down: requests meanwhile fail at once."""
MAX_CHAIN_MOVED = 5
"""Reads of one submission's logs retried because the chain moved under them, before giving up."""
CACHED_TRANSACTIONS = 4096
VERDICT_FUNCTIONS = ("attestWork", "invalidateWork", "contestRejection", "executeRejection")
"""ComputePool functions whose calldata the evidence check reads."""

_UNREACHABLE = (requests.RequestException, ConnectionError, TimeoutError)


class ChainMovedTooOften(ServiceUnavailable):
    """The chain kept changing while one submission's logs were read."""


@dataclass(frozen=True)
class WorkLogs:
    """The chain's logs about one submission up to block `last`, and that block's hash."""

    events: list[IndexedEvent]
    last: int
    tip_hash: bytes | None
    """Hash of block `last`; None when the chain has no such block (nothing else was read)."""


@dataclass(frozen=True)
class Call:
    """A transaction's call of one of `VERDICT_FUNCTIONS`, decoded."""

    function: str
    args: dict[str, Any]
    """Arguments by ABI name; bytes32 values as bytes, arrays as lists."""


@dataclass(frozen=True)
class Transaction:
    to: str | None
    input: bytes


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{exc.__class__.__name__}: {text.splitlines()[0]}" if text else exc.__class__.__name__


class ChainView:
    """One chain (its deployment `book`) as the audits read it, through `w3` (JSON-RPC at `where`)."""

    def __init__(self, w3: Web3, book: AddressBook, where: str) -> None:
        self.w3, self.book, self.where = w3, book, where
        self.source = ChainSource(w3, FastDecoder(book.addresses))
        abi = load_artifact("ComputePool").abi
        self._get_work = AbiFunction.of(abi, "getWork")
        self._functions = {f.selector: f for f in (AbiFunction.of(abi, name) for name in VERDICT_FUNCTIONS)}
        self._names = {f.selector: [i["name"] for i in _inputs(abi, f.name)] for f in self._functions.values()}
        self._down_until = 0.0
        self._down_why = ""
        self._checked = False
        self._transactions: OrderedDict[str, Transaction | None] = OrderedDict()
        self._lock = threading.Lock()

    @contextmanager
    def _reading(self, what: str) -> Iterator[None]:
        """Run a read; a node that does not answer is `ServiceUnavailable`, remembered for a while."""
        now = time.monotonic()
        if now < self._down_until:
            raise ServiceUnavailable(f"{self._down_why} (not retried for {self._down_until - now:.0f} more s)")
        try:
            if not self._checked:
                self._check_chain()
            yield
        except _UNREACHABLE as exc:
            self._down_why = f"the JSON-RPC node at {self.where} does not answer ({what}: {_first_line(exc)})"
            self._down_until = time.monotonic() + OUTAGE_MEMORY
            raise ServiceUnavailable(self._down_why) from exc
        except Web3RPCError as exc:
            raise ServiceUnavailable(f"the JSON-RPC node at {self.where} refused {what}: {_first_line(exc)}") from exc

    def _check_chain(self) -> None:
        served = int(rpc(self.w3, "eth_chainId", []), 16)
        if served != self.book.chain_id:
            raise ServiceUnavailable(
                f"the JSON-RPC node at {self.where} serves chain {served}, the ledger indexes chain "
                f"{self.book.chain_id}: point PROOFPOOL_RPC_URL at a node of chain {self.book.chain_id}"
            )
        self._checked = True

    # --- one submission's logs ----------------------------------------------------------------

    def work_logs(self, pool_id: int, work_key: bytes, last: int) -> WorkLogs:
        """The ComputePool's logs about (pool_id, work_key) from the deploy block to `last`, in chain order."""
        with self._reading(f"the logs of submission 0x{work_key.hex()}"):
            for _ in range(MAX_CHAIN_MOVED):
                logs = self._read_logs(pool_id, work_key, last)
                if logs is not None:
                    return logs
        raise ChainMovedTooOften(f"the chain kept changing while the logs up to block {last} were read; try again")

    def _read_logs(self, pool_id: int, work_key: bytes, last: int) -> WorkLogs | None:
        """One consistent read (the indexer's own, `ChainSource.fetch_range`, on the two indexed
        topics), or None when the chain moved under it."""
        before = self.source.header(last)
        if before is None:
            return WorkLogs([], last, None)
        key = "0x" + work_key.hex()
        topics = [None, "0x" + pool_id.to_bytes(32, "big").hex(), key]
        try:
            batch = self.source.fetch_range(self.book.deploy_block, last, address=self.book.compute_pool, topics=topics)
        except ChainMoved:
            return None
        if batch.headers[last].hash != before.hash:
            return None
        # Topics are matched by position: keep the events whose poolId and workKey they really are.
        events = [e for e in batch.events if e.args.get("poolId") == pool_id and e.args.get("workKey") == key]
        return WorkLogs(events, last, before.hash)

    # --- the contract's view ------------------------------------------------------------------

    def work_status(self, pool_id: int, work_key: bytes, block: int) -> str:
        """`getWork(pool_id, work_key).status` at `block`, as the ledger writes statuses ('none' if never submitted)."""
        with self._reading(f"getWork at block {block}"):
            call = {"to": self.book.compute_pool, "data": "0x" + self._get_work.encode(pool_id, work_key).hex()}
            result = bytes.fromhex(rpc(self.w3, "eth_call", [call, hex(block)]).removeprefix("0x"))
        status = self._get_work.decode(result)[2]
        return WorkStatus(status).name.lower()

    # --- verdict transactions -----------------------------------------------------------------

    def transaction(self, tx_hash: str) -> Transaction | None:
        """The transaction's recipient and calldata; None when the chain has no such transaction."""
        with self._lock:
            if tx_hash in self._transactions:
                self._transactions.move_to_end(tx_hash)
                return self._transactions[tx_hash]
        with self._reading(f"transaction {tx_hash}"):
            raw = rpc(self.w3, "eth_getTransactionByHash", [tx_hash])
        found = None if raw is None else Transaction(raw.get("to"), bytes.fromhex(raw["input"].removeprefix("0x")))
        if found is not None:  # an unknown hash may yet be mined: only a transaction is remembered
            with self._lock:
                self._transactions[tx_hash] = found
                while len(self._transactions) > CACHED_TRANSACTIONS:
                    self._transactions.popitem(last=False)
        return found

    def decode_call(self, tx: Transaction) -> Call | None:
        """The ComputePool verdict function `tx` calls, with its arguments; None for anything else."""
        if tx.to is None or tx.to.lower() != self.book.compute_pool.lower():
            return None
        function = self._functions.get(tx.input[:4])
        if function is None:
            return None
        try:
            values = abi_decode(list(function.inputs), tx.input[4:])
        except (DecodingError, ValueError):
            return None
        return Call(function.name, dict(zip(self._names[function.selector], values, strict=True)))


def _inputs(abi: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return next(e for e in abi if e.get("type") == "function" and e.get("name") == name)["inputs"]


class ChainViews:
    """A `ChainView` per chain id, built on first use from the RPC URL and the address books."""

    def __init__(self, rpc_url: str, deployments_dir: Path, timeout: float) -> None:
        self.rpc_url, self.deployments_dir, self.timeout = rpc_url, deployments_dir, timeout
        self._views: dict[int, ChainView] = {}
        self._lock = threading.Lock()

    def of(self, chain_id: int) -> ChainView:
        """The view of chain `chain_id` (the chain the ledger indexes); `ServiceUnavailable` when
        there is no address book for it."""
        with self._lock:
            view = self._views.get(chain_id)
            if view is None:
                try:
                    book = load_address_book(chain_id, self.deployments_dir)
                except ConfigError as exc:
                    raise ServiceUnavailable(f"cannot read the chain the ledger indexes: {exc}") from exc
                w3 = connect(self.rpc_url, timeout=self.timeout, check=False)
                view = self._views[chain_id] = ChainView(w3, book, self.rpc_url)
            return view
