"""Contract calls encoded by hand and sent as bare JSON-RPC requests, for the hot paths.

web3's `ContractFunction` finds the function by computing the selector of every function in the
ABI (about 45 keccak hashes per call of `ComputePool`), normalizes every argument and runs
request and result formatters: 1.5-2 ms of CPU per call, where the round trip to a local node
costs 0.5 ms. A provider node makes three chain calls for every batch it submits, on the core
that generates, so those milliseconds came straight out of generation (`bench/worker.py`).

`AbiFunction` works a function's selector and types out once. `rpc` sends one request through
the provider alone: its timeout and its retries of idempotent reads (`proofpool.infra.chain.rpc`)
still apply; web3's middleware and formatters do not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_utils import collapse_if_tuple, keccak, to_checksum_address
from web3 import Web3
from web3.exceptions import Web3RPCError
from web3.types import RPCEndpoint

from proofpool.infra.chain.errors import ChainError


@dataclass(frozen=True)
class AbiFunction:
    """One contract function: its 4-byte selector and its argument and result types."""

    name: str
    selector: bytes
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @classmethod
    def of(cls, abi: Sequence[Mapping[str, Any]], name: str) -> AbiFunction:
        """The function `name` of `abi` (which must not overload it)."""
        entries = [e for e in abi if e.get("type") == "function" and e.get("name") == name]
        if len(entries) != 1:
            raise ChainError(f"the ABI has {len(entries)} functions named {name!r}; expected exactly one")
        inputs = tuple(collapse_if_tuple(dict(i)) for i in entries[0]["inputs"])
        outputs = tuple(collapse_if_tuple(dict(o)) for o in entries[0].get("outputs", ()))
        return cls(name, keccak(text=f"{name}({','.join(inputs)})")[:4], inputs, outputs)

    def encode(self, *args: Any) -> bytes:
        """Calldata for a call with `args` (addresses as hex strings, bytesN as bytes)."""
        return self.selector + abi_encode(list(self.inputs), list(args))

    def decode(self, data: bytes) -> tuple[Any, ...]:
        """The results of a call, addresses checksummed (as web3 returns them)."""
        values = abi_decode(list(self.outputs), data)
        return tuple(
            to_checksum_address(value) if kind == "address" else value
            for kind, value in zip(self.outputs, values, strict=True)
        )


def rpc(w3: Web3, method: str, params: list[Any]) -> Any:
    """The result of one JSON-RPC request; an error reply raises `Web3RPCError` carrying the reply
    (so `proofpool.infra.chain.tx.revert_from_exception` finds revert data in it, as in web3's own)."""
    reply = w3.provider.make_request(RPCEndpoint(method), params)
    error = reply.get("error")
    if error is not None:
        message = error.get("message", error) if isinstance(error, dict) else error
        raise Web3RPCError(f"{method}: {message}", rpc_response=reply)
    return reply["result"]
