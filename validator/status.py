"""A validator's standing, for `proofpool validator status`: its verdicts (PostgreSQL), what it
earned (chain + public ledger), the slashes it reported, and how much work waits in the queues.

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
from proofpool.infra.config import Settings
from proofpool.infra.http.ledger_client import LedgerClient


def validator_status(client: ChainClient, settings: Settings, address: str) -> dict[str, Any]:
    data: dict[str, Any] = {
        "validator": address,
        "has_validator_role": client.pool.has_role("VALIDATOR_ROLE", address),
        "withdrawable_rewards": client.pool.reward_balance(address),
    }
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
