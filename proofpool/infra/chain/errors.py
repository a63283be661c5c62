"""Chain errors, and decoding of revert data into the Solidity custom error that caused it.

Every revert our contracts raise is a custom error; callers catch `ContractRevert` and
branch on `.name` (e.g. "ComputePoolDuplicateWork") instead of parsing messages.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from eth_abi import decode as abi_decode
from eth_utils import keccak, to_bytes, to_checksum_address

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.networks import DEVNET_CHAIN_ID
from proofpool.infra.chain.units import format_eth

_ERROR_STRING = b"\x08\xc3\x79\xa0"  # Error(string)
_PANIC = b"\x4e\x48\x7b\x71"  # Panic(uint256)


class ChainError(ProofpoolError):
    """Root of errors talking to the chain."""


class ContractRevert(ChainError):
    """A call or transaction reverted; `name` is the custom error, `args` its decoded arguments."""

    def __init__(self, name: str, args: tuple[Any, ...] = (), data: bytes = b"") -> None:
        self.name = name
        self.args_ = args
        self.data = data
        shown = ", ".join(_show(a) for a in args)
        super().__init__(f"reverted: {name}({shown})")

    @property
    def args(self) -> tuple[Any, ...]:  # type: ignore[override]
        """The custom error's decoded arguments (shadows BaseException.args on purpose)."""
        return self.args_


class TxTimeout(ChainError):
    """A sent transaction was not mined within the receipt timeout."""


class NonceConflict(ChainError):
    """The sender's nonce kept colliding with other senders after all retries."""


class InsufficientGas(ChainError):
    """`address` holds too little ETH to pay for gas: `balance` wei, for what `need` says (e.g. "this
    transaction needs about 0.0004 ETH"; None when the node did not say how much). On the devnet the
    message names the command that sends it some."""

    def __init__(self, address: str, balance: int, chain_id: int, need: str | None = None) -> None:
        self.address = address
        self.balance = balance
        self.chain_id = chain_id
        message = f"{address} has {format_eth(balance)} ETH for gas" + (f" ({need})" if need else "")
        message += ": send it some"
        if chain_id == DEVNET_CHAIN_ID:
            message += f" (devnet: proofpool chain fund {address})"
        super().__init__(message)


def _show(value: Any) -> str:
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


def _checksummed(kind: str, value: Any) -> Any:
    """Addresses as checksummed strings, the form every other proofpool API uses."""
    return to_checksum_address(value) if kind == "address" else value


def _signature(entry: dict) -> str:
    return f"{entry['name']}({','.join(_canonical_type(i) for i in entry.get('inputs', []))})"


def _canonical_type(param: dict) -> str:
    kind = param["type"]
    if kind.startswith("tuple"):
        return "(" + ",".join(_canonical_type(c) for c in param["components"]) + ")" + kind[len("tuple") :]
    return kind


@cache
def _error_table() -> dict[bytes, tuple[str, list[str]]]:
    from proofpool.infra.chain.artifacts import all_abis

    table: dict[bytes, tuple[str, list[str]]] = {}
    for abi in all_abis().values():
        for entry in abi:
            if entry.get("type") == "error":
                selector = keccak(text=_signature(entry))[:4]
                table[selector] = (entry["name"], [_canonical_type(i) for i in entry.get("inputs", [])])
    return table


def decode_revert(data: bytes | str | None) -> ContractRevert:
    """Turn raw revert data into a `ContractRevert` named after the error that produced it.

    Unknown selectors and empty data still give a `ContractRevert` (named "UnknownError" /
    "EmptyRevert") so callers never have to handle a second exception type.
    """
    raw = to_bytes(hexstr=data) if isinstance(data, str) else (data or b"")
    if len(raw) < 4:
        return ContractRevert("EmptyRevert", (), raw)
    selector, body = raw[:4], raw[4:]
    try:
        if selector == _ERROR_STRING:
            return ContractRevert("Error", tuple(abi_decode(["string"], body)), raw)
        if selector == _PANIC:
            return ContractRevert("Panic", tuple(abi_decode(["uint256"], body)), raw)
        known = _error_table().get(selector)
        if known is None:
            return ContractRevert("UnknownError", ("0x" + raw.hex(),), raw)
        name, types = known
        values = abi_decode(types, body)
        return ContractRevert(name, tuple(_checksummed(t, v) for t, v in zip(types, values, strict=True)), raw)
    except Exception as exc:  # noqa: BLE001 - malformed revert data is itself a revert to report
        return ContractRevert("MalformedRevert", ("0x" + raw.hex(), str(exc)), raw)
