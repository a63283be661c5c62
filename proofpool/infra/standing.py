"""Where a compute provider stands: stake, unbonding and withdrawable rewards read from the
chain now; nodes, pool memberships, work waiting for its payout and slashes from the backend's
public ledger (docs/ledger.md), which is as fresh as its indexer. `proofpool provider status`
renders it; both parts are plain dataclasses so `--json` and other callers get the same facts.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.http.ledger_client import LedgerClient


@dataclass(frozen=True)
class ChainStanding:
    """What the chain says about a provider now. Amounts in token base units."""

    provider: str
    registered: bool
    active_stake: int
    required_stake: int
    unbonding: int
    unbonding_matures_at: int
    """Unix time from which `unbonding` may be withdrawn; 0 when nothing unbonds."""
    unbonding_matures_at_utc: str | None
    unbonding_withdrawable: bool
    """True when the unbonding stake has matured (as of the latest block's time) and no submission
    of the provider's nodes is open (`open_work`)."""
    open_work: int
    """Submissions of its nodes still Pending or Accepted and not finalized: while any is open, the
    stake stays bonded (`withdraw` refuses)."""
    compute_units: int
    wallet: int
    withdrawable_rewards: int
    """Credited rewards `provider claim` pays out."""
    block_number: int
    """Latest block when these were read."""


@dataclass(frozen=True)
class Membership:
    """One pool a node is (or was) in, as the ledger's memberships list says."""

    pool_id: int
    state: str | None
    """active, left, ejected or slashed."""
    blacklisted: bool


@dataclass(frozen=True)
class NodeStanding:
    """A node of the provider with the pools it is in."""

    address: str
    compute_units: int | None
    """None for a node whose memberships name this provider but which is no longer registered to it."""
    active: bool
    attested: bool
    pools: list[Membership] = field(default_factory=list)


@dataclass(frozen=True)
class PendingWork:
    """Submissions of one pool not judged yet or accepted and not yet finalized."""

    pool_id: int
    submissions: int
    work_units: int
    reward_per_unit: int
    reward: int
    """work_units x reward_per_unit: paid once the work is accepted and finalized."""


@dataclass(frozen=True)
class Slash:
    """Stake slashed for one invalid submission, with the validator's reason code."""

    pool_id: int
    work_key: str
    node: str | None
    amount: int
    reason: str | None
    """Reason code of the invalidating verdict, e.g. sampling_mismatch."""
    block_number: int
    tx_hash: str


@dataclass(frozen=True)
class LedgerStanding:
    """What the backend's ledger (rebuilt from chain events by its indexer) says about a provider."""

    nodes: list[NodeStanding]
    pending: list[PendingWork]
    pending_rewards: int
    slashes: list[Slash]
    slashed_total: int


PENDING_STATUSES = ("pending", "accepted")
"""Submission states whose reward is still to come: not judged yet, or accepted in the dispute window."""


def read_chain_standing(client: ChainClient, provider: str) -> ChainStanding:
    """The provider's stake, unbonding, wallet and withdrawable rewards, read from the contracts."""
    unbonding, matures_at = client.stake_manager.unbonding(provider)
    open_work = client.pool.open_work(provider)
    latest = client.w3.eth.get_block("latest")
    return ChainStanding(
        provider=provider,
        registered=client.registry.is_provider(provider),
        active_stake=client.stake_manager.active_stake(provider),
        required_stake=client.stake_manager.required_stake(provider),
        unbonding=unbonding,
        unbonding_matures_at=matures_at,
        unbonding_matures_at_utc=utc_time(matures_at) if unbonding else None,
        unbonding_withdrawable=unbonding > 0 and matures_at <= latest["timestamp"] and open_work == 0,
        open_work=open_work,
        compute_units=client.registry.provider_compute_units(provider),
        wallet=client.token.balance_of(provider),
        withdrawable_rewards=client.pool.reward_balance(provider),
        block_number=latest["number"],
    )


def read_ledger_standing(ledger: LedgerClient, provider: str) -> LedgerStanding:
    """The provider's nodes and their pools, unpaid work and slashes, from the public ledger API."""
    memberships: dict[str, list[Membership]] = defaultdict(list)
    for row in ledger.items("memberships", {"provider": provider}):
        memberships[row["node"]].append(Membership(row["pool_id"], row["state"], row["blacklisted"]))
    nodes = [
        NodeStanding(
            row["address"], row["compute_units"], row["active"], row["attested"], memberships.pop(row["address"], [])
        )
        for row in ledger.items("nodes", {"provider": provider})
    ]
    nodes += [NodeStanding(node, None, False, False, pools) for node, pools in memberships.items()]

    unpaid = [
        row
        for status in PENDING_STATUSES
        for row in ledger.items("submissions", {"provider": provider, "status": status})
    ]
    pending: list[PendingWork] = []
    if unpaid:
        rates = {row["pool_id"]: int(row["reward_per_unit"]) for row in ledger.items("pools", {})}
        by_pool: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in unpaid:
            by_pool[row["pool_id"]].append(row)
        for pool_id, rows in sorted(by_pool.items()):
            if pool_id not in rates:
                raise ProofpoolError(f"the ledger lists work in pool {pool_id} but not the pool itself")
            units = sum(row["work_units"] for row in rows)
            pending.append(PendingWork(pool_id, len(rows), units, rates[pool_id], units * rates[pool_id]))

    slashes = [_slash(ledger, row) for row in ledger.items("slashes", {"provider": provider})]
    return LedgerStanding(
        nodes=nodes,
        pending=pending,
        pending_rewards=sum(p.reward for p in pending),
        slashes=slashes,
        slashed_total=sum(s.amount for s in slashes),
    )


def _slash(ledger: LedgerClient, row: dict[str, Any]) -> Slash:
    """A slash with the node and reason code of the submission it punished."""
    detail = ledger.get(f"submissions/{row['pool_id']}/{row['work_key']}", {}).json()
    reasons = [v["reason"] for v in detail["verdicts"] if v["verdict"] == "invalid"]
    return Slash(
        pool_id=row["pool_id"],
        work_key=row["work_key"],
        node=detail["submission"]["node"],
        amount=int(row["amount"]),
        reason=reasons[-1] if reasons else None,
        block_number=row["block_number"],
        tx_hash=row["tx_hash"],
    )


def utc_time(unix: int) -> str:
    """ISO 8601 UTC with a Z, as the ledger API prints times."""
    return datetime.fromtimestamp(unix, UTC).isoformat().replace("+00:00", "Z")
