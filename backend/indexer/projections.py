"""From events to projection rows: one function per event name.

Each function turns one `IndexedEvent` into the statements of `proofpool.backend.db.projections` that
apply it. They read nothing but the event (and the rows the statements touch), so replaying the
same events in chain order always gives the same rows: the incremental indexer and
`proofpool.backend.indexer.rebuild` call the same `apply_events`, and a test checks both agree.

Event names that change no projection (token transfers, admin setters, ...) are stored in
`chain_events` and skipped here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proofpool.backend.db import projections as sql
from proofpool.backend.indexer.records import IndexedEvent, hex_bytes
from psycopg import Connection, Cursor
from web3 import Web3

from proofpool.infra.chain.bindings import reason_text

Apply = Callable[[Cursor, IndexedEvent], None]

VALIDATOR_ROLE_ID = "0x" + Web3.keccak(text="VALIDATOR_ROLE").hex().removeprefix("0x")
MAX_EPOCH = 9_224_318_015_999  # last second PostgreSQL's timestamptz can hold (year 294276)


def _at(event: IndexedEvent) -> dict[str, Any]:
    """Where the change happened: kept on every row it touches."""
    return {"block": event.block_number, "tx": event.tx_hash, "log": event.log_index}


def _work(event: IndexedEvent) -> dict[str, Any]:
    return {"pool_id": event.args["poolId"], "work_key": hex_bytes(event.args["workKey"]), **_at(event)}


# --- StakeManager ---------------------------------------------------------------------------


def staked(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.STAKED, {"provider": e.args["provider"], "active_stake": e.args["activeStake"], **_at(e)})


def unbond_started(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(
        sql.UNBOND_STARTED,
        {
            "provider": e.args["provider"],
            "amount": e.args["amount"],
            "unbonding": e.args["unbondingAmount"],
            "matures_at": min(int(e.args["maturesAt"]), MAX_EPOCH),
            **_at(e),
        },
    )


def withdrawn(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.WITHDRAWN, {"provider": e.args["provider"], **_at(e)})


def slashed(cur: Cursor, e: IndexedEvent) -> None:
    from_unbonding, from_active = int(e.args["fromUnbonding"]), int(e.args["fromActive"])
    cur.execute(
        sql.SLASHED,
        {
            "provider": e.args["provider"],
            "from_unbonding": from_unbonding,
            "from_active": from_active,
            "slashed": from_unbonding + from_active,
            **_at(e),
        },
    )


# --- ComputeRegistry ------------------------------------------------------------------------


def provider_registered(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.PROVIDER_REGISTERED, {"provider": e.args["provider"], **_at(e)})


def node_added(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(
        sql.PROVIDER_COMPUTE_UNITS,
        {"provider": e.args["provider"], "compute_units": e.args["providerComputeUnits"], **_at(e)},
    )
    cur.execute(
        sql.NODE_ADDED,
        {
            "node": e.args["node"],
            "provider": e.args["provider"],
            "compute_units": e.args["computeUnits"],
            "specs_hash": hex_bytes(e.args["specsHash"]),
            **_at(e),
        },
    )


def node_removed(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(
        sql.PROVIDER_COMPUTE_UNITS,
        {"provider": e.args["provider"], "compute_units": e.args["providerComputeUnits"], **_at(e)},
    )
    cur.execute(sql.NODE_REMOVED, {"node": e.args["node"], **_at(e)})


def node_attested(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.NODE_ATTESTED, {"node": e.args["node"], **_at(e)})


# --- ComputePool: pools ---------------------------------------------------------------------


def pool_created(cur: Cursor, e: IndexedEvent) -> None:
    a = e.args
    cur.execute(
        sql.POOL_CREATED,
        {
            "pool_id": a["poolId"],
            "creator": a["creator"],
            "manager": a["manager"],
            "treasury": a["treasury"],
            "model_uri": a["modelUri"],
            "spec_sha256": hex_bytes(a["specSha256"]),
            "reward_per_unit": a["rewardPerUnit"],
            "validator_fee": a["validatorFee"],
            "slash_amount": a["slashAmount"],
            "dispute_window": a["disputeWindow"],
            "validator_slash_share_bps": a["validatorSlashShareBps"],
            **_at(e),
        },
    )


def pool_funded(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.POOL_FUNDED, {"pool_id": e.args["poolId"], "budget": e.args["budget"], **_at(e)})


def pool_started(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.POOL_STATUS, {"pool_id": e.args["poolId"], "status": "active", **_at(e)})


def pool_closed(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.POOL_STATUS, {"pool_id": e.args["poolId"], "status": "closed", **_at(e)})


def pool_budget_refunded(cur: Cursor, e: IndexedEvent) -> None:
    # The event carries the budget left, as PoolFunded does.
    cur.execute(sql.POOL_FUNDED, {"pool_id": e.args["poolId"], "budget": e.args["budget"], **_at(e)})


# --- ComputePool: memberships ---------------------------------------------------------------


def node_joined(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(
        sql.NODE_JOINED, {"pool_id": e.args["poolId"], "node": e.args["node"], "provider": e.args["provider"], **_at(e)}
    )


def pool_approved(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(
        sql.POOL_APPROVED,
        {"pool_id": e.args["poolId"], "provider": e.args["provider"], "max_slash": e.args["maxSlash"], **_at(e)},
    )


def pool_approval_revoked(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.POOL_APPROVAL_REVOKED, {"pool_id": e.args["poolId"], "provider": e.args["provider"], **_at(e)})


def node_left(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.MEMBER_STATE, {"pool_id": e.args["poolId"], "node": e.args["node"], "state": "left", **_at(e)})


def node_ejected(cur: Cursor, e: IndexedEvent) -> None:
    state = "slashed" if e.args["slashed"] else "ejected"
    cur.execute(sql.MEMBER_STATE, {"pool_id": e.args["poolId"], "node": e.args["node"], "state": state, **_at(e)})


def node_blacklisted(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.NODE_BLACKLISTED, {"pool_id": e.args["poolId"], "node": e.args["node"], **_at(e)})


# --- ComputePool: work ----------------------------------------------------------------------


def _submission(e: IndexedEvent) -> dict[str, Any]:
    """The columns a `WorkSubmitted` and a `WorkBundleSubmitted` both set."""
    return {
        **_work(e),
        "node": e.args["node"],
        "provider": e.args["provider"],
        "work_units": e.args["workUnits"],
        "model_version": e.args["modelVersion"],
        "time": e.block_time,
    }


def work_submitted(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.WORK_SUBMITTED, _submission(e))


def work_bundle_submitted(cur: Cursor, e: IndexedEvent) -> None:
    # Every later event on the bundle (attested, invalidated, finalized, ...) names the bundle key
    # as its workKey, so the work functions below update this row like any other submission.
    cur.execute(
        sql.WORK_BUNDLE_SUBMITTED,
        {
            **_submission(e),
            "file_keys": [hex_bytes(key) for key in e.args["fileKeys"]],
            "file_units": [int(units) for units in e.args["fileUnits"]],
        },
    )


def work_attested(cur: Cursor, e: IndexedEvent) -> None:
    work = _work(e)
    cur.execute(sql.WORK_STATUS, {**work, "status": "accepted"})
    cur.execute(sql.VERDICT, {**work, "verdict": "accepted", "validator": e.args["validator"], "reason": None})


def work_invalidated(cur: Cursor, e: IndexedEvent) -> None:
    work = _work(e)
    reason = reason_text(hex_bytes(e.args["reason"]))
    cur.execute(sql.WORK_STATUS, {**work, "status": "invalid"})
    cur.execute(sql.VERDICT, {**work, "verdict": "invalid", "validator": e.args["validator"], "reason": reason})


def work_rejected(cur: Cursor, e: IndexedEvent) -> None:
    # With no challenge window, WorkInvalidated follows in the same transaction and wins.
    cur.execute(sql.WORK_STATUS, {**_work(e), "status": "rejected"})


_RESTORED = {1: "pending", 2: "accepted"}
"""IComputePool.WorkStatus values an overturned rejection can restore."""


def rejection_overturned(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.WORK_STATUS, {**_work(e), "status": _RESTORED[int(e.args["restored"])]})


def validator_slashed(cur: Cursor, e: IndexedEvent) -> None:
    # The slashed validator's stake is projected from the StakeManager's Slashed event; here the
    # credit of the validator who proved the verdict wrong.
    account, amount = e.args["beneficiary"], int(e.args["amount"])
    cur.execute(sql.REWARD, {**_work(e), "account": account, "kind": "slash_share", "amount": amount})


def work_finalized(cur: Cursor, e: IndexedEvent) -> None:
    work = _work(e)
    reward, fee = int(e.args["reward"]), int(e.args["validatorFee"])
    cur.execute(sql.WORK_STATUS, {**work, "status": "finalized"})
    cur.execute(sql.POOL_PAID, {**work, "paid": reward + fee})
    cur.execute(sql.REWARD, {**work, "account": e.args["provider"], "kind": "provider_reward", "amount": reward})
    cur.execute(sql.REWARD, {**work, "account": e.args["validator"], "kind": "validator_fee", "amount": fee})


def work_forfeited(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.WORK_STATUS, {**_work(e), "status": "forfeited"})


def work_expired(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(sql.WORK_STATUS, {**_work(e), "status": "expired"})


def slash_distributed(cur: Cursor, e: IndexedEvent) -> None:
    work = _work(e)
    validator_share, treasury_share = int(e.args["validatorShare"]), int(e.args["treasuryShare"])
    cur.execute(
        sql.SLASH,
        {
            **work,
            "provider": e.args["provider"],
            "validator": e.args["validator"],
            "validator_share": validator_share,
            "treasury": e.args["treasury"],
            "treasury_share": treasury_share,
            "amount": validator_share + treasury_share,
        },
    )
    cur.execute(sql.REWARD, {**work, "account": e.args["validator"], "kind": "slash_share", "amount": validator_share})


def rewards_withdrawn(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(
        sql.REWARD,
        {
            "account": e.args["account"],
            "pool_id": None,
            "work_key": None,
            "kind": "withdrawal",
            "amount": e.args["amount"],
            **_at(e),
        },
    )


def checkpoint_published(cur: Cursor, e: IndexedEvent) -> None:
    cur.execute(
        sql.CHECKPOINT,
        {
            "pool_id": e.args["poolId"],
            "version": e.args["version"],
            "manifest_sha256": hex_bytes(e.args["manifestSha256"]),
            "uri": e.args["uri"],
            **_at(e),
        },
    )


def _validator_role(active: bool) -> Apply:
    def apply(cur: Cursor, e: IndexedEvent) -> None:
        if e.contract == "ComputePool" and e.args["role"].lower() == VALIDATOR_ROLE_ID:
            cur.execute(sql.VALIDATOR_ROLE, {"account": e.args["account"], "active": active, **_at(e)})

    return apply


role_granted = _validator_role(True)
role_revoked = _validator_role(False)

PROJECTORS: Mapping[str, Apply] = {
    "Staked": staked,
    "UnbondStarted": unbond_started,
    "Withdrawn": withdrawn,
    "Slashed": slashed,
    "ProviderRegistered": provider_registered,
    "NodeAdded": node_added,
    "NodeRemoved": node_removed,
    "NodeAttested": node_attested,
    "PoolCreated": pool_created,
    "PoolFunded": pool_funded,
    "PoolStarted": pool_started,
    "PoolClosed": pool_closed,
    "PoolBudgetRefunded": pool_budget_refunded,
    "PoolApproved": pool_approved,
    "PoolApprovalRevoked": pool_approval_revoked,
    "NodeJoined": node_joined,
    "NodeLeft": node_left,
    "NodeEjected": node_ejected,
    "NodeBlacklisted": node_blacklisted,
    "WorkSubmitted": work_submitted,
    "WorkBundleSubmitted": work_bundle_submitted,
    "WorkAttested": work_attested,
    "WorkInvalidated": work_invalidated,
    "WorkRejected": work_rejected,
    "RejectionOverturned": rejection_overturned,
    "ValidatorSlashed": validator_slashed,
    "WorkFinalized": work_finalized,
    "WorkForfeited": work_forfeited,
    "WorkExpired": work_expired,
    "SlashDistributed": slash_distributed,
    "RewardsWithdrawn": rewards_withdrawn,
    "CheckpointPublished": checkpoint_published,
    "RoleGranted": role_granted,
    "RoleRevoked": role_revoked,
}
"""Event name -> the function that applies it. Names are unique across our four contracts
except the OpenZeppelin ones, which the functions check by contract."""


def apply_events(conn: Connection, events: Sequence[IndexedEvent]) -> int:
    """Apply events in chain order inside the caller's transaction; returns how many changed a
    projection. Statements are pipelined: one round trip per batch, not per statement."""
    applied = 0
    with conn.pipeline(), conn.cursor() as cur:
        for event in events:
            projector = PROJECTORS.get(event.name)
            if projector is not None:
                projector(cur, event)
                applied += 1
    return applied
