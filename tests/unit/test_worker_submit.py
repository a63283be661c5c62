"""`submit` looks the work key up on-chain before every send except a fresh batch's first: a
transaction that timed out may have been mined after all, and must not be sent twice. The chain
is faked (these are the only calls `submit` makes); the journal entry is a real one."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

from eth_account import Account
from proofpool.worker.journal import Journal
from proofpool.worker.retry import Backoff
from proofpool.worker.submit import submit

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.errors import TxTimeout

NODE = Account.from_key(ANVIL_KEYS[6]).address


class FakePool:
    """A chain where `submitWork` times out `timeouts` times, each timed-out send mined anyway."""

    def __init__(self, timeouts: int = 0) -> None:
        self.timeouts = timeouts
        self.on_chain = False
        self.calls: list[str] = []

    def get_work(self, _pool: int, _key: bytes) -> SimpleNamespace:
        self.calls.append("getWork")
        return SimpleNamespace(status=WorkStatus.PENDING if self.on_chain else WorkStatus.NONE, node=NODE)

    def submit_work(self, *_args: object) -> dict:
        self.calls.append("submitWork")
        self.on_chain = True
        if self.timeouts:
            self.timeouts -= 1
            raise TxTimeout("transaction 0xab not mined in 0 s")
        return {"transactionHash": bytes(32)}


def entry(tmp_path: Path):
    return Journal(tmp_path / "journal").record_written(1, 0, 0, b"\x01" * 32, b"rows", 10, 4)


def send(tmp_path: Path, pool: FakePool, fresh: bool):
    client = SimpleNamespace(pool=pool, address=NODE)
    return submit(client, entry(tmp_path), threading.Event(), Backoff(initial=0.0), fresh=fresh)  # type: ignore[arg-type]


def test_a_fresh_batch_is_sent_without_a_look_up(tmp_path: Path) -> None:
    pool = FakePool()
    sent = send(tmp_path, pool, fresh=True)
    assert pool.calls == ["submitWork"]
    assert sent.tx_hash == "0x" + "00" * 32


def test_a_retry_of_a_fresh_batch_finds_its_mined_send_and_sends_no_second(tmp_path: Path) -> None:
    pool = FakePool(timeouts=1)
    sent = send(tmp_path, pool, fresh=True)
    assert pool.calls == ["submitWork", "getWork"]
    assert sent.tx_hash is None  # found on-chain, recorded without a transaction


def test_a_batch_from_the_journal_is_looked_up_first(tmp_path: Path) -> None:
    pool = FakePool()
    send(tmp_path, pool, fresh=False)
    assert pool.calls == ["getWork", "submitWork"]
