"""Invites: the orchestrator holds the pool manager key and signs an EIP-712 invite for an
announced, registered node that is not a member and not banned, so its provider can call
`joinPool`. The checks mirror `ComputePool._checkJoin` (including the provider's approval of the
pool), so an invite we hand out is one the contract will take (unless the chain moved since the
indexer last looked).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from eth_account.signers.local import LocalAccount
from proofpool.backend.api.errors import ApiError
from proofpool.backend.db import nodes as db
from proofpool.backend.orchestrator.heartbeat import not_registered
from proofpool.backend.orchestrator.manager_key import manager_key
from psycopg import AsyncConnection

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.deploy import load_address_book
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.config import Settings

log = logging.getLogger(__name__)

INVITE_TTL = 3600
"""Seconds an invite stays valid. A repeated request within the first half of that returns the same
invite, unless the node's membership changed since (it may have been used: invites are single use)."""


@dataclass(frozen=True)
class SignedInvite:
    """An invite plus where it is valid (the EIP-712 domain)."""

    row: db.InviteRow
    chain_id: int
    pool_contract: str


def manager_account(settings: Settings) -> LocalAccount:
    """The pool manager key, or a 503 when the operator did not configure a usable one."""
    try:
        account = manager_key(settings)
    except ConfigError as exc:
        raise ApiError(503, "invites_unavailable", f"the configured pool manager key cannot be loaded: {exc}") from exc
    if account is None:
        raise ApiError(
            503, "invites_unavailable", "this backend holds no pool manager key (PROOFPOOL_MANAGER_PRIVATE_KEY)"
        )
    return account


async def _target_pool(conn: AsyncConnection, manager: str, pool_id: int | None) -> int:
    if pool_id is None:
        pool = await db.first_active_pool(conn, manager)
        if pool is None:
            raise ApiError(404, "no_active_pool", f"no active pool is managed by {manager}")
        return pool.pool_id
    pool = await db.pool(conn, pool_id)
    if pool is None:
        raise ApiError(404, "unknown_pool", f"pool {pool_id} is not known (or not indexed yet)")
    if pool.manager != manager:
        raise ApiError(403, "pool_not_managed", f"pool {pool_id} is managed by {pool.manager}, not by this backend")
    if pool.status != "active":
        raise ApiError(403, "pool_not_active", f"pool {pool_id} is {pool.status}; nodes can join active pools only")
    return pool_id


async def _domain(conn: AsyncConnection, settings: Settings) -> tuple[int, str]:
    chain_id = await db.chain_id(conn)
    if chain_id is None:
        raise ApiError(503, "chain_unknown", "the indexer has not recorded which chain it follows yet")
    try:
        book = load_address_book(chain_id, settings.deployments_dir)
    except ConfigError as exc:
        raise ApiError(503, "chain_unknown", str(exc)) from exc
    return chain_id, book.addresses["ComputePool"]


async def issue_invite(
    conn: AsyncConnection,
    settings: Settings,
    caller: str,
    node: str,
    *,
    now: int,
    pool_id: int | None = None,
    ttl: int = INVITE_TTL,
) -> SignedInvite:
    """An invite for `node` asked for by `caller` (the verified signer): the node's provider, or the
    node itself, which can then join on its own (`joinPool` takes a valid invite from anyone)."""
    manager = manager_account(settings)
    registered = await db.registered_node(conn, node)
    if registered is None or not registered.active:
        raise not_registered(node)
    provider = registered.provider
    if caller not in (provider, node):
        raise ApiError(403, "not_node_provider", f"node {node} belongs to provider {provider}")
    if not await db.is_announced(conn, node):
        raise ApiError(403, "node_not_announced", f"node {node} must announce itself with PUT /v1/nodes first")
    target = await _target_pool(conn, manager.address, pool_id)
    member = await db.membership(conn, target, node)
    if member is not None and member.blacklisted:
        raise ApiError(403, "node_banned", f"node {node} is blacklisted in pool {target}")
    if member is not None and member.state == "slashed":
        raise ApiError(403, "node_slashed", f"node {node} was slashed in pool {target} and may not rejoin")
    if member is not None and member.state == "active":
        raise ApiError(403, "already_member", f"node {node} is already an active member of pool {target}")
    if not await db.pool_approved(conn, target, provider):
        raise ApiError(
            403,
            "pool_not_approved",
            f"provider {provider} has not approved pool {target}: its nodes may join only pools it approved "
            f"(`proofpool provider approve-pool {target} --max-slash AMOUNT`, with the provider's key)",
        )
    chain_id, pool_contract = await _domain(conn, settings)

    # Chain time may run ahead of the wall clock (devnet time travel): expire relative to the later.
    base = max(now, await db.latest_block_time(conn) or 0)
    membership_block = None if member is None else member.block_number
    reused = await db.reusable_invite(conn, target, node, manager.address, base + ttl // 2, membership_block)
    if reused is not None:
        return SignedInvite(reused, chain_id, pool_contract)
    nonce = await db.next_invite_nonce(conn)
    invite = sign_invite(manager, target, node, nonce, base + ttl, chain_id, pool_contract)
    row = db.InviteRow(
        nonce, target, node, provider, manager.address, invite.expiry, invite.signature, membership_block
    )
    await db.insert_invite(conn, row)
    log.info("invite signed", extra={"pool": target, "node": node, "provider": provider, "nonce": nonce})
    return SignedInvite(row, chain_id, pool_contract)
