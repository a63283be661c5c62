"""A validator's standing, for `proofpool validator status`: its ETH for gas and verdicts
(PostgreSQL), what it earned (chain + public ledger), the slashes it reported, and how much work
waits in the queues; and the gas check `proofpool validator run` starts with.

Each source may be down independently; the figure is then replaced by a line saying why, and
the others are still shown.
"""

from __future__ import annotations

from typing import Any

import psycopg
import redis
from proofpool.validator import store

from proofpool.core.errors import ProofpoolError
from proofpool.infra.broker import REVIEWS_QUEUE, VALIDATE_QUEUE, VERDICTS_QUEUE, reviews_queue, verdicts_queue
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.gas import eth_balance, gas_warning, require_gas
from proofpool.infra.chain.units import format_eth, parse_eth
from proofpool.infra.config import Settings
from proofpool.infra.http.ledger_client import LedgerClient


def min_gas(settings: Settings) -> int:
    """`PROOFPOOL_VALIDATOR_MIN_GAS_ETH` in wei (0: no minimum)."""
    return parse_eth(str(settings.validator_min_gas_eth))


def require_validator_gas(client: ChainClient, settings: Settings, address: str) -> tuple[int, str | None]:
    """`address`'s ETH in wei and the warning it deserves (None: none); `InsufficientGas` under the
    minimum, so a validator does not start deciding verdicts it cannot send."""
    minimum = min_gas(settings)
    need = f"a validator needs at least {format_eth(minimum)} ETH, PROOFPOOL_VALIDATOR_MIN_GAS_ETH"
    balance = require_gas(client.w3, address, minimum, need)
    return balance, gas_warning(balance, minimum)


def validator_status(client: ChainClient, settings: Settings, address: str) -> dict[str, Any]:
    balance = eth_balance(client.w3, address)
    data: dict[str, Any] = {
        "validator": address,
        "has_validator_role": client.pool.has_role("VALIDATOR_ROLE", address),
        "eth_balance": balance,
        "withdrawable_rewards": client.pool.reward_balance(address),
    }
    warning = gas_warning(balance, min_gas(settings))
    if warning is not None:
        data["gas_warning"] = warning
    try:
        with psycopg.connect(settings.database_url, connect_timeout=3) as conn:
            counts = store.validator_counts(conn, address)
        data["verdicts_sent"] = counts["sent"]
        data["verdicts_waiting"] = counts["waiting"]
        data["verdicts_failing"] = counts["failing"]
        data["superseded"] = counts["superseded"]
        data["in_progress"] = counts["claimed"]
    except psycopg.Error as exc:
        data["verdicts_error"] = f"database unreachable: {exc}".splitlines()[0]
    try:
        with LedgerClient(settings.backend_url, timeout=5.0) as ledger:
            rewards = ledger.items("rewards", {"account": address})
            data["fees_earned"] = sum(int(r["amount"]) for r in rewards if r["kind"] == "validator_fee")
            data["slash_shares_earned"] = sum(int(r["amount"]) for r in rewards if r["kind"] == "slash_share")
            data["slashes_reported"] = len(ledger.items("slashes", {"validator": address}))
    except ProofpoolError as exc:
        data["ledger_error"] = str(exc)
    try:
        broker = redis.Redis.from_url(settings.celery_broker_url, socket_connect_timeout=3, socket_timeout=3)
        data["queue_depth"] = {
            VALIDATE_QUEUE: int(broker.llen(VALIDATE_QUEUE)),
            VERDICTS_QUEUE: int(broker.llen(verdicts_queue(address))),
            REVIEWS_QUEUE: int(broker.llen(reviews_queue(address))),
        }
    except (redis.RedisError, ValueError) as exc:
        data["queue_error"] = f"broker unreachable or not Redis: {exc}"
    return data
