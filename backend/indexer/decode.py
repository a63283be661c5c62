"""Decoding raw `eth_getLogs` results straight into the `chain_events.args` shape, fast.

`proofpool.infra.chain.events.EventDecoder` (web3's `get_event_data` behind web3's result formatters)
costs about 1 ms per log here, which alone caps the indexer near 1,000 events/s. This decoder
reads the same ABIs but decodes static words by slicing (addresses checksummed through a cache),
leaving only dynamic types (strings) to eth_abi: about 20x faster. A test checks it gives the
same events as `EventDecoder` on the chain-loop scenario; like it, it skips logs of unknown
contracts or topics and logs that do not decode (anybody can emit anything).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_utils import event_abi_to_log_topic, to_checksum_address

from proofpool.infra.chain.artifacts import load_artifact


@lru_cache(maxsize=65536)
def checksum(raw20: bytes) -> str:
    """EIP-55 address of 20 raw bytes (cached: the same few addresses recur in every log)."""
    return to_checksum_address(raw20)


def _static_word(kind: str, word: bytes) -> Any:
    """One 32-byte ABI word of an elementary static type, in the JSON shape; KeyError if not static."""
    if kind == "address":
        return checksum(word[12:])
    if kind.startswith("uint"):
        return int.from_bytes(word, "big")
    if kind.startswith("int"):
        return int.from_bytes(word, "big", signed=True)
    if kind == "bool":
        return word[31] != 0
    if kind.startswith("bytes") and kind != "bytes":
        return "0x" + word[: int(kind[5:])].hex()
    raise KeyError(kind)


def _is_static(kind: str) -> bool:
    try:
        _static_word(kind, bytes(32))
    except (KeyError, ValueError):
        return False
    return True


def _json(kind: str, value: Any) -> Any:
    """An eth_abi-decoded value in the JSON shape (eth_abi gives lowercase addresses: checksum them)."""
    if kind.endswith("]"):
        inner = kind[: kind.rindex("[")]
        return [_json(inner, v) for v in value]
    if kind == "address":
        return checksum(bytes.fromhex(value[2:]))
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


@dataclass(frozen=True)
class EventLayout:
    contract: str
    name: str
    names: tuple[str, ...]
    """Argument names in ABI order."""
    topic_args: tuple[tuple[str, str], ...]
    data_args: tuple[tuple[str, str], ...]
    data_static: bool


@dataclass(frozen=True)
class RawEvent:
    """A decoded log before its block time is known."""

    contract: str
    name: str
    args: dict[str, Any]
    address: str
    block_number: int
    block_hash: bytes
    tx_hash: bytes
    log_index: int


class FastDecoder:
    """Decodes raw logs of the contracts in `address_book` ({contract name: address})."""

    def __init__(self, address_book: Mapping[str, str]) -> None:
        self._layouts: dict[tuple[str, bytes], EventLayout] = {}
        self.addresses: list[str] = []
        for contract, address in address_book.items():
            checksummed = to_checksum_address(address)
            self.addresses.append(checksummed)
            for entry in load_artifact(contract).abi:
                if entry.get("type") != "event" or entry.get("anonymous"):
                    continue
                inputs = entry["inputs"]
                data_args = tuple((i["name"], i["type"]) for i in inputs if not i["indexed"])
                self._layouts[(checksummed.lower(), bytes(event_abi_to_log_topic(entry)))] = EventLayout(
                    contract=contract,
                    name=entry["name"],
                    names=tuple(i["name"] for i in inputs),
                    topic_args=tuple((i["name"], i["type"]) for i in inputs if i["indexed"]),
                    data_args=data_args,
                    data_static=all(_is_static(kind) for _, kind in data_args),
                )

    def decode(self, log: Mapping[str, Any]) -> RawEvent | None:
        """One raw log (hex strings as JSON-RPC returns them), or None when it is not ours."""
        topics = log.get("topics") or []
        if not topics:
            return None
        layout = self._layouts.get((log["address"].lower(), bytes.fromhex(topics[0][2:])))
        if layout is None or len(topics) != len(layout.topic_args) + 1:
            return None
        try:
            values = self._values(layout, topics, bytes.fromhex(log["data"][2:]))
        except (DecodingError, ValueError, KeyError, IndexError):
            return None
        return RawEvent(
            contract=layout.contract,
            name=layout.name,
            args={name: values[name] for name in layout.names},
            address=checksum(bytes.fromhex(log["address"][2:])),
            block_number=int(log["blockNumber"], 16),
            block_hash=bytes.fromhex(log["blockHash"][2:]),
            tx_hash=bytes.fromhex(log["transactionHash"][2:]),
            log_index=int(log["logIndex"], 16),
        )

    @staticmethod
    def _values(layout: EventLayout, topics: list[str], data: bytes) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for (name, kind), topic in zip(layout.topic_args, topics[1:], strict=True):
            word = bytes.fromhex(topic[2:])
            try:
                values[name] = _static_word(kind, word)
            except KeyError:  # an indexed dynamic value: the topic is its hash
                values[name] = "0x" + word.hex()
        if layout.data_static:
            if len(data) < 32 * len(layout.data_args):
                raise ValueError("log data too short")
            for i, (name, kind) in enumerate(layout.data_args):
                values[name] = _static_word(kind, data[32 * i : 32 * i + 32])
        elif layout.data_args:
            decoded = abi_decode([kind for _, kind in layout.data_args], data)
            for (name, kind), value in zip(layout.data_args, decoded, strict=True):
                values[name] = _json(kind, value)
        return values
