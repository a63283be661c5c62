"""Sending transactions: local signing, one nonce sequence per sender, fee bumps on
"underpriced", resync on "nonce too low", receipts with a timeout, reverts turned into
`ContractRevert` named after the contract's custom error, and a node's "insufficient funds"
turned into `InsufficientGas` naming the sender, its balance and what the transaction needs.

One key may send from several threads (a lock) and several processes on one machine
(a file lock next to the devnet state); senders on other machines are reconciled by the
"nonce too low" retry.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eth_account.signers.local import LocalAccount
from filelock import FileLock
from hexbytes import HexBytes
from web3 import Web3
from web3.contract.contract import ContractConstructor, ContractFunction
from web3.exceptions import ContractLogicError, TimeExhausted, Web3RPCError
from web3.types import TxReceipt

from proofpool.infra.chain.artifacts import Artifact
from proofpool.infra.chain.calls import rpc
from proofpool.infra.chain.errors import (
    ChainError,
    ContractRevert,
    InsufficientGas,
    NonceConflict,
    TxTimeout,
    decode_revert,
)
from proofpool.infra.chain.gas import eth_balance
from proofpool.infra.chain.units import format_eth
from proofpool.infra.config import get_settings

log = logging.getLogger(__name__)

_NONCE_ERRORS = ("nonce too low", "already known", "nonce has already been used", "invalid nonce")
_UNDERPRICED = ("underpriced", "fee too low", "max fee per gas less than block base fee")
_NO_FUNDS = ("insufficient funds", "doesn't have enough funds")
"""How nodes refuse a sender that cannot pay (geth and anvil: "insufficient funds for gas * price +
value"; hardhat: "sender doesn't have enough funds"), on a send or on an estimate with a value."""
_GAS_MARGIN = 1.2
_FEE_KEYS = ("gasPrice", "maxFeePerGas", "maxPriorityFeePerGas")
_MAX_ATTEMPTS = 6
FEE_CACHE_SECONDS = 10.0
"""How long fees fetched for a first try are reused: `maxFeePerGas` allows for the base fee to
double, which takes at least six full blocks, and a fee that fell short anyway gets the
"underpriced" retry with fresh, bumped fees. Saves two round trips on every transaction of a
sender that sends often (a provider node sends one per batch)."""


def revert_from_exception(exc: Exception) -> ContractRevert | None:
    """The decoded custom error inside a web3 exception, or None if it was no revert."""
    if isinstance(exc, ContractRevert):
        return exc
    if isinstance(exc, ContractLogicError):
        data = exc.data
        if isinstance(data, dict):
            data = data.get("data")
        return decode_revert(data)
    if isinstance(exc, Web3RPCError):
        payload = exc.rpc_response.get("error", {}) if exc.rpc_response else {}
        data = payload.get("data") if isinstance(payload, dict) else None
        if isinstance(data, str) and data.startswith("0x"):
            return decode_revert(data)
        message = str(payload.get("message", "")) if isinstance(payload, dict) else ""
        if "revert" in message.lower():
            return decode_revert(None)
    return None


def _says_no_funds(exc: Exception) -> bool:
    """True when the node refused a request because the sender cannot pay for it."""
    message = str(exc).lower()
    return isinstance(exc, Web3RPCError) and any(s in message for s in _NO_FUNDS)


def max_cost(tx: dict[str, Any]) -> int:
    """Wei a built transaction may cost its sender at most: gas limit times max fee, plus its value."""
    fee = tx.get("maxFeePerGas", tx.get("gasPrice", 0))
    return int(tx["gas"]) * int(fee) + int(tx.get("value", 0))


def call_data(w3: Web3, to: str, data: bytes, sender: str | None = None) -> bytes:
    """eth_call of hand-encoded calldata (`proofpool.infra.chain.calls`) at the latest block; returns the
    raw result, and a revert raises `ContractRevert`."""
    request = {"to": to, "data": "0x" + data.hex()}
    if sender is not None:
        request["from"] = sender
    try:
        result = rpc(w3, "eth_call", [request, "latest"])
    except Web3RPCError as exc:
        raise revert_from_exception(exc) or exc from None
    return bytes.fromhex(result.removeprefix("0x"))


@dataclass(frozen=True)
class _Lane:
    """Per (chain, sender) coordination shared by every TxSender of this process."""

    thread_lock: threading.Lock
    file_lock: FileLock


_lanes: dict[tuple[int, str], _Lane] = {}
_lanes_guard = threading.Lock()


def _lane(chain_id: int, address: str) -> _Lane:
    with _lanes_guard:
        key = (chain_id, address)
        if key not in _lanes:
            folder = Path(get_settings().state_dir) / "nonces"
            folder.mkdir(parents=True, exist_ok=True)
            _lanes[key] = _Lane(threading.Lock(), FileLock(str(folder / f"{chain_id}-{address}.lock")))
        return _lanes[key]


class TxSender:
    """Signs and sends transactions for one account."""

    def __init__(self, w3: Web3, account: LocalAccount, receipt_timeout: float | None = None) -> None:
        self.w3 = w3
        self.account = account
        self.address = account.address
        self.receipt_timeout = receipt_timeout or get_settings().tx_receipt_timeout
        self._chain_id = w3.eth.chain_id
        self._lane = _lane(self._chain_id, self.address)
        self._fee_cache: tuple[float, dict[str, int]] | None = None

    def call(self, fn: ContractFunction) -> Any:
        """eth_call from this account; a revert raises `ContractRevert`."""
        try:
            return fn.call({"from": self.address})
        except Exception as exc:
            revert = revert_from_exception(exc)
            if revert is None:
                raise
            raise revert from None

    def send(self, fn: ContractFunction, value: int = 0, gas: int | None = None) -> TxReceipt:
        """Send `fn` as a transaction and wait for its receipt.

        Raises `ContractRevert` before sending when the estimate reverts, and after mining
        if the transaction reverted anyway (state changed in between).
        """
        tx: dict[str, Any] = {"from": self.address, "value": value, "chainId": self._chain_id}
        if gas is None:
            gas = self._estimate(fn, value)
        try:
            # with the fees given, web3 does not fetch them itself (two round trips saved)
            built = fn.build_transaction({**tx, "gas": gas, **self._fees(1.0)})
        except Exception as exc:
            refusal = self._refusal(exc)
            if refusal is None:
                raise
            raise refusal from None
        return self._send_built(built)

    def estimate_cost(self, fn: ContractFunction, value: int = 0) -> int:
        """Wei that `send(fn, value)` would cost at most at the current fees (for checks before a
        sequence of transactions); a revert raises `ContractRevert`, as `send` would."""
        return max_cost({"gas": self._estimate(fn, value), "value": value, **self._fees(1.0)})

    def _estimate(self, fn: ContractFunction | ContractConstructor, value: int) -> int:
        """Gas limit for `fn`: the node's estimate with a margin."""
        try:
            return int(fn.estimate_gas({"from": self.address, "value": value}) * _GAS_MARGIN)
        except Exception as exc:
            refusal = self._refusal(exc)
            if refusal is None:
                raise
            raise refusal from None

    def _refusal(self, exc: Exception, cost: int | None = None) -> ChainError | None:
        """What a failed estimate or send tells the caller: too little ETH (`InsufficientGas`; `cost`
        is what the transaction needed, when known), a revert (`ContractRevert`), or None: neither."""
        if _says_no_funds(exc):
            need = None if cost is None else f"this transaction needs about {format_eth(cost)} ETH"
            return InsufficientGas(self.address, eth_balance(self.w3, self.address), self._chain_id, need)
        return revert_from_exception(exc)

    def call_data(self, to: str, data: bytes) -> bytes:
        """`call_data` from this account."""
        return call_data(self.w3, to, data, self.address)

    def send_data(self, to: str, data: bytes) -> TxReceipt:
        """`send` for hand-encoded calldata: the gas estimate goes out as a bare JSON-RPC request
        (a revert in it raises `ContractRevert` before anything is sent)."""
        call = {"from": self.address, "to": to, "data": "0x" + data.hex()}
        try:
            gas = int(int(rpc(self.w3, "eth_estimateGas", [call]), 16) * _GAS_MARGIN)
        except Web3RPCError as exc:
            raise self._refusal(exc) or exc from None
        built = {"from": self.address, "to": to, "data": data, "value": 0, "gas": gas, "chainId": self._chain_id}
        return self._send_built({**built, **self._fees(1.0)})

    def deploy(self, artifact: Artifact, *args: Any) -> str:
        """Deploy `artifact` with constructor `args`; returns the checksum address."""
        factory = self.w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
        ctor = factory.constructor(*args)
        gas = self._estimate(ctor, 0)
        built = ctor.build_transaction({"from": self.address, "chainId": self._chain_id, "gas": gas})
        receipt = self._send_built(built)
        return Web3.to_checksum_address(receipt["contractAddress"])

    def transfer_eth(self, to: str, wei: int) -> TxReceipt:
        """Plain value transfer (used to give node keys gas money on the devnet)."""
        return self._send_built(
            {
                "from": self.address,
                "to": Web3.to_checksum_address(to),
                "value": wei,
                "gas": 21_000,
                "chainId": self._chain_id,
            }
        )

    def _fees(self, bump: float) -> dict[str, int]:
        """Fees for a try; a first try (`bump` 1) reuses fees fetched in the last `FEE_CACHE_SECONDS`."""
        now = time.monotonic()
        if bump == 1.0 and self._fee_cache is not None and now - self._fee_cache[0] < FEE_CACHE_SECONDS:
            return self._fee_cache[1]
        block = self.w3.eth.get_block("latest")
        base = block.get("baseFeePerGas")
        if base is None:
            fees = {"gasPrice": int(self.w3.eth.gas_price * bump)}
        else:
            tip = int(self.w3.eth.max_priority_fee * bump) or 1
            fees = {"maxPriorityFeePerGas": tip, "maxFeePerGas": int((2 * base + tip) * bump)}
        if bump == 1.0:
            self._fee_cache = (now, fees)
        return fees

    def _send_built(self, built: dict[str, Any]) -> TxReceipt:
        """Sign and send with a fresh nonce; the first try keeps the fees `built` carries (if any),
        a retry after "underpriced" bumps them. The nonce and the send are bare JSON-RPC requests
        (`proofpool.infra.chain.calls`): web3's formatting of them cost a provider node 2 ms a batch."""
        fees = {k: built[k] for k in _FEE_KEYS if k in built}
        built = {k: v for k, v in built.items() if k not in _FEE_KEYS}
        bump = 1.0
        for attempt in range(_MAX_ATTEMPTS):
            with self._lane.thread_lock, self._lane.file_lock:
                nonce = int(rpc(self.w3, "eth_getTransactionCount", [self.address, "pending"]), 16)
                fees = fees or self._fees(bump)
                signed = self.account.sign_transaction({**built, **fees, "nonce": nonce})
                try:
                    tx_hash = HexBytes(rpc(self.w3, "eth_sendRawTransaction", ["0x" + signed.raw_transaction.hex()]))
                except Web3RPCError as exc:
                    message = str(exc).lower()
                    if any(s in message for s in _NONCE_ERRORS):
                        log.info("nonce %s taken for %s, resyncing (attempt %d)", nonce, self.address, attempt)
                        continue
                    if any(s in message for s in _UNDERPRICED):
                        bump *= 1.25
                        fees = {}
                        self._fee_cache = None  # fees moved: the next transaction fetches them again
                        continue
                    refusal = self._refusal(exc, max_cost({**built, **fees}))
                    if refusal is not None:
                        raise refusal from None
                    raise
            return self._wait(tx_hash, built)
        raise NonceConflict(f"could not place a transaction for {self.address} after {_MAX_ATTEMPTS} tries")

    def _wait(self, tx_hash: HexBytes, built: dict[str, Any]) -> TxReceipt:
        try:
            receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=self.receipt_timeout, poll_latency=0.05)
        except TimeExhausted as exc:
            raise TxTimeout(f"transaction {tx_hash.hex()} not mined in {self.receipt_timeout:.0f} s") from exc
        if receipt["status"] != 1:
            raise self._replay_revert(built, receipt)
        return receipt

    def _replay_revert(self, built: dict[str, Any], receipt: TxReceipt) -> ContractRevert:
        """Re-run a mined, reverted transaction as a call to learn which error it hit."""
        call = {k: built[k] for k in ("from", "to", "data", "value") if k in built}
        try:
            self.w3.eth.call(call, receipt["blockNumber"] - 1)
        except Exception as exc:  # noqa: BLE001 - we only want the revert data out of it
            revert = revert_from_exception(exc)
            if revert is not None:
                return revert
        return ContractRevert("RevertedOnChain", ("0x" + receipt["transactionHash"].hex(),))
