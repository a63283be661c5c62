"""Test vocabulary for the contract tests: actors that send, a chain handle that moves time,
revert and event assertions, and the multi-step flows (stake, add a node, invite, join)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from unittest.mock import ANY

from eth_account.messages import encode_typed_data
from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.types import TxReceipt

from proofpool.infra.chain.deploy import TOKEN, AddressBook
from proofpool.infra.chain.errors import ContractRevert
from proofpool.infra.chain.events import ChainEvent, EventDecoder
from proofpool.infra.chain.signing import sign_invite, sign_node_ownership
from proofpool.infra.chain.tx import TxSender

__all__ = ["ANY", "TOKEN", "Actor", "Chain", "Deployment", "expect_revert", "work_key"]

# IComputePool enums, as the ABI returns them.
POOL_NONE, POOL_CREATED, POOL_ACTIVE, POOL_CLOSED = range(4)
MEMBER_NONE, MEMBER_ACTIVE, MEMBER_LEFT, MEMBER_EJECTED, MEMBER_SLASHED = range(5)
WORK_NONE, WORK_PENDING, WORK_ACCEPTED, WORK_INVALID, WORK_FINALIZED, WORK_FORFEITED, WORK_REJECTED = range(7)
EVIDENCE = bytes.fromhex("ee" * 32)
"""The evidence hash test verdicts commit to."""
ZERO_ADDRESS = "0x0000000000000000000000000000000000000000"
OWNERSHIP_DEADLINE = 10**10
"""The deadline test node signatures carry (far in the future)."""
NODE_OWNERSHIP_FIELDS = [
    {"name": "provider", "type": "address"},
    {"name": "node", "type": "address"},
    {"name": "nonce", "type": "uint256"},
    {"name": "deadline", "type": "uint256"},
]


def work_key(label: str) -> bytes:
    """A deterministic stand-in for a rollout file's sha256."""
    return bytes(Web3.keccak(text=label))


def reason(text: str) -> bytes:
    """A right-padded bytes32 reason code."""
    return text.encode().ljust(32, b"\x00")


@dataclass
class Actor:
    """A named account that can send transactions and make calls."""

    name: str
    account: LocalAccount
    sender: TxSender

    @property
    def address(self) -> str:
        return self.account.address

    def send(self, fn: Any, gas: int | None = None) -> TxReceipt:
        """Send `fn`; a fixed `gas` skips estimation (needed when the next block's time is pinned)."""
        return self.sender.send(fn, gas=gas)

    def call(self, fn: Any) -> Any:
        return self.sender.call(fn)

    def __repr__(self) -> str:  # readable parametrized test ids
        return self.name


def _norm(value: Any) -> Any:
    """Compare addresses case-insensitively (eth_abi decodes them lower-case)."""
    if isinstance(value, str) and value.startswith("0x") and len(value) == 42:
        return value.lower()
    if isinstance(value, tuple | list):
        return tuple(_norm(v) for v in value)
    return value


@contextlib.contextmanager
def expect_revert(name: str, *args: Any) -> Iterator[None]:
    """Assert the block raises `ContractRevert` named `name`; with `args`, also its arguments
    (use `ANY` for values the test cannot know)."""
    try:
        yield
    except ContractRevert as exc:
        assert exc.name == name, f"expected {name}{args}, got {exc}"
        if args:
            assert _norm(tuple(exc.args)) == _norm(args), f"expected {name}{args}, got {exc}"
    else:
        raise AssertionError(f"expected revert {name}{args}, but the call succeeded")


@dataclass
class Chain:
    """The anvil under test: time, blocks and snapshots."""

    w3: Web3

    def rpc(self, method: str, params: list[Any] | None = None) -> Any:
        reply = self.w3.provider.make_request(method, params or [])
        assert "error" not in reply, reply
        return reply["result"]

    def increase_time(self, seconds: int) -> None:
        """Move the chain clock forward and mine a block at the new time."""
        self.rpc("evm_increaseTime", [seconds])
        self.rpc("evm_mine")

    def set_next_timestamp(self, timestamp: int) -> None:
        """Pin the timestamp of the next mined block (and of gas estimates against it)."""
        self.rpc("evm_setNextBlockTimestamp", [timestamp])

    def timestamp(self) -> int:
        return int(self.w3.eth.get_block("latest")["timestamp"])

    def snapshot(self) -> str:
        return self.rpc("evm_snapshot")

    def revert(self, snapshot_id: str) -> None:
        assert self.rpc("evm_revert", [snapshot_id]) is True


@dataclass
class Deployment:
    """The deployed contracts (web3 contract objects), their address book and an event decoder."""

    w3: Web3
    book: AddressBook
    token: Any
    stake: Any
    registry: Any
    pool: Any
    decoder: EventDecoder = field(init=False)

    def __post_init__(self) -> None:
        self.decoder = EventDecoder(self.w3, self.book.addresses)

    def events(self, receipt: TxReceipt, name: str | None = None) -> list[ChainEvent]:
        """Decoded events of `receipt` (only those called `name` if given)."""
        found = self.decoder.decode_receipt(receipt)
        return [e for e in found if name is None or e.name == name]

    def event(self, receipt: TxReceipt, name: str) -> dict[str, Any]:
        """The arguments of the single `name` event in `receipt`."""
        found = self.events(receipt, name)
        assert len(found) == 1, f"expected one {name}, got {[e.name for e in self.events(receipt)]}"
        return dict(found[0].args)

    def role(self, contract: Any, name: str) -> bytes:
        if name == "DEFAULT_ADMIN_ROLE":
            return b"\x00" * 32
        return bytes(getattr(contract.functions, name)().call())

    # ------------------------------------------------------------ flows

    def fund(self, minter: Actor, who: Actor, amount: int = 1_000_000 * TOKEN) -> None:
        minter.send(self.token.functions.mint(who.address, amount))

    def stake_tokens(self, provider: Actor, amount: int) -> TxReceipt:
        provider.send(self.token.functions.approve(self.book.stake_manager, amount))
        return provider.send(self.stake.functions.stake(amount))

    def ownership_signature(self, node: Actor, provider: Actor | str, **domain: Any) -> bytes:
        """The node key's NodeOwnership signature for the node's current nonce and OWNERSHIP_DEADLINE
        (overridable: chain_id, registry, nonce, deadline)."""
        chain_id = domain.get("chain_id", self.w3.eth.chain_id)
        registry = domain.get("registry", self.book.compute_registry)
        nonce = domain.get("nonce", int(self.registry.functions.nodeNonce(node.address).call()))
        deadline = domain.get("deadline", OWNERSHIP_DEADLINE)
        owner = provider if isinstance(provider, str) else provider.address
        return sign_node_ownership(node.account, owner, chain_id, registry, nonce=nonce, deadline=deadline).signature

    def forged_ownership_signature(self, signer: Actor, provider: Actor, node: Actor) -> bytes:
        """NodeOwnership(provider, node, 0, OWNERSHIP_DEADLINE) signed by a key that is not the node's."""
        message = encode_typed_data(
            domain_data={
                "name": "ProofpoolComputeRegistry",
                "version": "1",
                "chainId": self.w3.eth.chain_id,
                "verifyingContract": self.book.compute_registry,
            },
            message_types={"NodeOwnership": NODE_OWNERSHIP_FIELDS},
            message_data={
                "provider": provider.address,
                "node": node.address,
                "nonce": 0,
                "deadline": OWNERSHIP_DEADLINE,
            },
        )
        return bytes(signer.account.sign_message(message).signature)

    def add_node(self, provider: Actor, node: Actor, units: int = 4, specs: bytes = b"\x01" * 32) -> TxReceipt:
        signature = self.ownership_signature(node, provider)
        return provider.send(self.registry.functions.addNode(node.address, units, specs, OWNERSHIP_DEADLINE, signature))

    def invite(self, manager: Actor, pool_id: int, node: Actor | str, nonce: int, expiry: int, **domain: Any) -> bytes:
        """The manager's Invite signature (domain overridable: chain_id, contract)."""
        chain_id = domain.get("chain_id", self.w3.eth.chain_id)
        contract = domain.get("contract", self.book.compute_pool)
        address = node if isinstance(node, str) else node.address
        return sign_invite(manager.account, pool_id, address, nonce, expiry, chain_id, contract).signature

    def join(self, provider: Actor, manager: Actor, pool_id: int, node: Actor, nonce: int, expiry: int) -> TxReceipt:
        signature = self.invite(manager, pool_id, node, nonce, expiry)
        return provider.send(self.pool.functions.joinPool(pool_id, node.address, nonce, expiry, signature))

    def submit(self, node: Actor, pool_id: int, key: bytes, units: int = 10, version: int = 1) -> TxReceipt:
        return node.send(self.pool.functions.submitWork(pool_id, node.address, key, units, version))

    def attest(self, validator: Actor, pool_id: int, keys: Sequence[bytes]) -> TxReceipt:
        return validator.send(self.pool.functions.attestWork(pool_id, list(keys), EVIDENCE))

    def work(self, pool_id: int, key: bytes) -> tuple:
        return tuple(self.pool.functions.getWork(pool_id, key).call())

    def member(self, pool_id: int, node: Actor | str) -> tuple:
        address = node if isinstance(node, str) else node.address
        return tuple(self.pool.functions.getMember(pool_id, address).call())

    def balance(self, who: Actor | str) -> int:
        address = who if isinstance(who, str) else who.address
        return int(self.token.functions.balanceOf(address).call())
