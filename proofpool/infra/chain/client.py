"""`ChainClient`: one account's view of a proofpool deployment (all four bindings).

Commands and services build one from the settings (RPC URL, address book, key) instead of
wiring Web3, TxSender and bindings themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eth_account.signers.local import LocalAccount
from web3 import Web3

from proofpool.infra.chain.bindings import ComputePool, ComputeRegistry, PoolToken, StakeManager
from proofpool.infra.chain.deploy import AddressBook, load_address_book
from proofpool.infra.chain.events import EventDecoder
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.config import get_settings


@dataclass(frozen=True)
class ChainClient:
    """Bindings of one deployment, sending as `account` (read-only when it is None)."""

    w3: Web3
    book: AddressBook
    account: LocalAccount | None
    token: PoolToken
    stake_manager: StakeManager
    registry: ComputeRegistry
    pool: ComputePool

    @classmethod
    def build(cls, w3: Web3, book: AddressBook, account: LocalAccount | None = None) -> ChainClient:
        sender = TxSender(w3, account) if account is not None else None
        return cls(
            w3=w3,
            book=book,
            account=account,
            token=PoolToken(w3, book.pool_token, sender),
            stake_manager=StakeManager(w3, book.stake_manager, sender),
            registry=ComputeRegistry(w3, book.compute_registry, sender),
            pool=ComputePool(w3, book.compute_pool, sender),
        )

    @classmethod
    def from_settings(
        cls,
        account: LocalAccount | None = None,
        rpc_url: str | None = None,
        deployments_dir: Path | None = None,
    ) -> ChainClient:
        """Connect to the configured chain and load its address book."""
        settings = get_settings()
        w3 = connect(rpc_url or settings.rpc_url, timeout=settings.rpc_timeout)
        book = load_address_book(w3.eth.chain_id, deployments_dir or settings.deployments_dir)
        return cls.build(w3, book, account)

    def as_account(self, account: LocalAccount) -> ChainClient:
        """The same deployment, sending as another account."""
        return ChainClient.build(self.w3, self.book, account)

    @property
    def address(self) -> str:
        if self.account is None:
            raise ValueError("read-only client has no address")
        return self.account.address

    @property
    def chain_id(self) -> int:
        return self.book.chain_id

    def decoder(self) -> EventDecoder:
        """An event decoder for all four contracts."""
        return EventDecoder(self.w3, self.book.addresses)
