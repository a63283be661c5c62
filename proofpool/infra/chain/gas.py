"""ETH for gas: an account's balance, the check that refuses to go on when it cannot pay, and the
warning for when it soon will not.

`TxSender` turns a node's "insufficient funds" answer into `InsufficientGas` once a transaction
fails. The checks here run before anything is sent: a worker node's before it joins a pool,
`validator run`'s against `PROOFPOOL_VALIDATOR_MIN_GAS_ETH` (and `validator status` shows the
same warning), `pool create`'s before the first of its several transactions.
"""

from __future__ import annotations

from typing import Final

from eth_utils import to_checksum_address
from web3 import Web3

from proofpool.infra.chain.errors import InsufficientGas
from proofpool.infra.chain.units import format_eth

LOW_GAS_FACTOR: Final = 10
"""A balance under this many times a role's minimum still sends, but is worth a loud warning: the
role runs out mid-work (a validator keeps deciding verdicts it cannot send)."""


def eth_balance(w3: Web3, address: str) -> int:
    """`address`'s ETH in wei at the latest block."""
    return int(w3.eth.get_balance(to_checksum_address(address)))


def require_gas(w3: Web3, address: str, needed: int, need: str) -> int:
    """`address`'s balance in wei; `InsufficientGas` (its message saying `need`, e.g. "a validator
    needs at least 0.01 ETH") when it holds less than `needed` wei."""
    balance = eth_balance(w3, address)
    if balance < needed:
        raise InsufficientGas(to_checksum_address(address), balance, w3.eth.chain_id, need)
    return balance


def gas_warning(balance: int, minimum: int) -> str | None:
    """Why a role that wants `minimum` wei (0: no minimum) should worry about holding `balance`, or None."""
    if balance == 0:
        return "no transaction can be sent"
    if balance < minimum:
        return f"under the {format_eth(minimum)} ETH minimum"
    if balance < LOW_GAS_FACTOR * minimum:
        return f"under {LOW_GAS_FACTOR}x the {format_eth(minimum)} ETH minimum; top it up before it runs out"
    return None
