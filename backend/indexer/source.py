"""Reading the chain for the indexer: the head, block headers (batched) and one block range's
logs, checked for consistency so a range is never built from two different chains.

`fetch_range` reads the range end's header, then the logs, then (in one JSON-RPC batch) the
headers of the range start, of every block with logs and of the range end again. A block hash
commits to all its ancestors, so an unchanged range-end hash means the chain up to it did not
change while the logs were read; each log's block hash must also match its header. Otherwise
the chain moved under us (`ChainMoved`) and the caller simply reads the range again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proofpool.backend.indexer.decode import FastDecoder
from proofpool.backend.indexer.records import BlockHeader, IndexedEvent
from web3 import Web3

from proofpool.core.errors import ServiceUnavailable


class ChainMoved(Exception):
    """The chain changed while a range was read; read it again."""


class RangeRefused(ServiceUnavailable):
    """The node answered `eth_getLogs` with an error (often: too many results); try a smaller range."""


@dataclass(frozen=True)
class RangeBatch:
    """One block range as read from the chain: its events in order and the headers seen."""

    start: int
    end: int
    events: list[IndexedEvent]
    headers: dict[int, BlockHeader]
    """Headers of `start`, `end` and every block holding one of `events`."""


def parse_header(raw: dict[str, Any]) -> BlockHeader:
    return BlockHeader(
        number=int(raw["number"], 16),
        hash=bytes.fromhex(raw["hash"][2:]),
        parent_hash=bytes.fromhex(raw["parentHash"][2:]),
        timestamp=int(raw["timestamp"], 16),
    )


class ChainSource:
    """The chain as the indexer sees it: `w3` for transport, `decoder` for our four contracts."""

    def __init__(self, w3: Web3, decoder: FastDecoder) -> None:
        self.w3 = w3
        self.decoder = decoder
        self.addresses = decoder.addresses

    def _rpc(self, method: str, params: list[Any]) -> Any:
        reply = self.w3.provider.make_request(method, params)  # type: ignore[arg-type]
        if "error" in reply:
            raise ServiceUnavailable(f"{method} failed: {reply['error']}")
        return reply["result"]

    def chain_id(self) -> int:
        return int(self._rpc("eth_chainId", []), 16)

    def head(self) -> int:
        """Number of the newest block."""
        return int(self._rpc("eth_blockNumber", []), 16)

    def headers(self, numbers: Sequence[int]) -> dict[int, BlockHeader | None]:
        """Headers at these heights in one batch; None where the chain has no such block (yet)."""
        if not numbers:
            return {}
        replies = self.w3.provider.make_batch_request(  # type: ignore[attr-defined]
            [("eth_getBlockByNumber", [hex(n), False]) for n in numbers]
        )
        if not isinstance(replies, list):
            raise ServiceUnavailable(f"eth_getBlockByNumber batch failed: {replies.get('error', replies)}")
        out: dict[int, BlockHeader | None] = {}
        for number, reply in zip(numbers, replies, strict=True):
            if "error" in reply:
                raise ServiceUnavailable(f"eth_getBlockByNumber({number}) failed: {reply['error']}")
            out[number] = parse_header(reply["result"]) if reply.get("result") else None
        return out

    def header(self, number: int) -> BlockHeader | None:
        return self.headers([number])[number]

    def fetch_range(
        self, start: int, end: int, *, address: str | None = None, topics: list[str | None] | None = None
    ) -> RangeBatch:
        """Events of our contracts in blocks `start..end` (inclusive), with consistent headers; only
        those of `address` (one of ours) matching `topics` (`eth_getLogs` topic filters by position)
        when given: one submission's logs, read by `proofpool.backend.audit.chain_view`."""
        end_before = self.header(end)
        if end_before is None:
            raise ChainMoved(f"block {end} is gone")
        query: dict[str, Any] = {"fromBlock": hex(start), "toBlock": hex(end), "address": address or self.addresses}
        if topics is not None:
            query["topics"] = topics
        reply = self.w3.provider.make_request("eth_getLogs", [query])  # type: ignore[arg-type]
        if "error" in reply:
            raise RangeRefused(f"eth_getLogs {start}-{end} failed: {reply['error']}")
        logs = reply["result"]
        decoded = [event for event in map(self.decoder.decode, logs) if event is not None]
        wanted = sorted({start, end, *(e.block_number for e in decoded)})
        headers = self.headers(wanted)
        end_after = headers[end]
        if end_after is None or end_after.hash != end_before.hash:
            raise ChainMoved(f"block {end} changed while range {start}-{end} was read")
        events = []
        for event in decoded:
            header = headers[event.block_number]
            if header is None or header.hash != event.block_hash:
                raise ChainMoved(f"log of block {event.block_number} is not on the current chain")
            events.append(
                IndexedEvent(
                    block_number=event.block_number,
                    block_hash=event.block_hash,
                    tx_hash=event.tx_hash,
                    log_index=event.log_index,
                    contract=event.contract,
                    address=event.address,
                    name=event.name,
                    args=event.args,
                    block_time=header.time,
                )
            )
        events.sort(key=lambda e: e.position)
        return RangeBatch(
            start=start, end=end, events=events, headers={n: h for n, h in headers.items() if h is not None}
        )
