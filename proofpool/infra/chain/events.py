"""Decoding contract logs (from receipts or `eth_getLogs`) into `ChainEvent` values.

One decoder for every consumer: the CLI shows a receipt's events, the indexer projects
`eth_getLogs` ranges, tests assert on them. Logs of unknown contracts or topics are
skipped, never fatal: the chain is public and anybody may emit anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eth_utils import event_abi_to_log_topic, to_checksum_address
from web3 import Web3
from web3._utils.events import get_event_data
from web3.exceptions import LogTopicError, MismatchedABI
from web3.types import LogReceipt, TxReceipt

from proofpool.infra.chain.artifacts import load_artifact


@dataclass(frozen=True)
class ChainEvent:
    """One decoded log. `args` keeps the Solidity argument names; bytes stay bytes."""

    contract: str
    name: str
    args: Mapping[str, Any]
    address: str
    block_number: int
    block_hash: bytes
    tx_hash: bytes
    log_index: int
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Any:
        return self.args[key]


class EventDecoder:
    """Decodes logs of the contracts in `address_book` ({contract name: address})."""

    def __init__(self, w3: Web3, address_book: Mapping[str, str]) -> None:
        self._codec = w3.codec
        self._by_address: dict[str, tuple[str, dict[bytes, dict]]] = {}
        for name, address in address_book.items():
            topics = {
                bytes(event_abi_to_log_topic(entry)): entry
                for entry in load_artifact(name).abi
                if entry.get("type") == "event" and not entry.get("anonymous")
            }
            self._by_address[to_checksum_address(address)] = (name, topics)

    @property
    def addresses(self) -> list[str]:
        """Contract addresses whose logs this decoder understands (for `eth_getLogs`)."""
        return list(self._by_address)

    def decode_log(self, log: LogReceipt) -> ChainEvent | None:
        """The event in `log`, or None when it is not one of ours."""
        known = self._by_address.get(to_checksum_address(log["address"]))
        if known is None or not log["topics"]:
            return None
        contract, topics = known
        abi = topics.get(bytes(log["topics"][0]))
        if abi is None:
            return None
        try:
            data = get_event_data(self._codec, abi, log)
        except (MismatchedABI, LogTopicError, ValueError):
            return None
        return ChainEvent(
            contract=contract,
            name=data["event"],
            args=dict(data["args"]),
            address=to_checksum_address(log["address"]),
            block_number=int(log["blockNumber"]),
            block_hash=bytes(log["blockHash"]),
            tx_hash=bytes(log["transactionHash"]),
            log_index=int(log["logIndex"]),
        )

    def decode_logs(self, logs: Iterable[LogReceipt]) -> list[ChainEvent]:
        """Every event of ours in `logs`, in their order."""
        return [event for event in (self.decode_log(log) for log in logs) if event is not None]

    def decode_receipt(self, receipt: TxReceipt) -> list[ChainEvent]:
        """Events emitted by one mined transaction."""
        return self.decode_logs(receipt["logs"])
