"""`IndexedEvent`: one contract log in the JSON shape it has in `chain_events.args`.

The projections are computed from this one shape, whether the event comes fresh from
`eth_getLogs` or back from `chain_events` during a rebuild: the same events then give the same
rows, which is what makes "ledger equals a rebuild from chain events" hold by construction.
In `args`, bytes are 0x-hex strings, addresses checksummed strings, integers exact JSON numbers
(PostgreSQL's jsonb keeps uint256 exactly), booleans and strings as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from proofpool.infra.chain.events import ChainEvent


@dataclass(frozen=True)
class BlockHeader:
    """What the indexer keeps of a block: enough to detect a reorg and to date events."""

    number: int
    hash: bytes
    parent_hash: bytes
    timestamp: int

    @property
    def time(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp, UTC)


@dataclass(frozen=True)
class IndexedEvent:
    """A decoded log of one of our four contracts, with its block time."""

    block_number: int
    block_hash: bytes
    tx_hash: bytes
    log_index: int
    contract: str
    address: str
    name: str
    args: Mapping[str, Any]
    block_time: datetime

    @property
    def position(self) -> tuple[int, int]:
        """(block number, log index): the chain's total order of logs."""
        return (self.block_number, self.log_index)

    @property
    def key(self) -> tuple[bytes, int]:
        """(tx hash, log index): the natural key every indexer write is idempotent on."""
        return (self.tx_hash, self.log_index)

    @classmethod
    def from_chain(cls, event: ChainEvent, block_time: datetime) -> IndexedEvent:
        return cls(
            block_number=event.block_number,
            block_hash=bytes(event.block_hash),
            tx_hash=bytes(event.tx_hash),
            log_index=event.log_index,
            contract=event.contract,
            address=event.address,
            name=event.name,
            args={name: json_value(value) for name, value in event.args.items()},
            block_time=block_time,
        )


def json_value(value: Any) -> Any:
    """A decoded ABI value in its `chain_events.args` form."""
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, bool | int | str) or value is None:
        return value
    raise TypeError(f"cannot store ABI value of type {type(value).__name__} in chain_events.args")


def hex_bytes(value: str) -> bytes:
    """Inverse of `json_value` for bytes."""
    return bytes.fromhex(value.removeprefix("0x"))
