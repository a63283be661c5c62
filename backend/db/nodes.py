"""Queries of discovery and the orchestrator: node announcements, invites, batch counters,
assignment settings, and the chain projections they read (nodes, memberships, pools,
checkpoints, indexer_state), which the indexer writes.

Async functions taking the connection first; callers own the transaction. Types are
converted here: timestamps leave as unix seconds (float), hashes as bytes, JSON as dicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

# --------------------------------------------------------------------------- rows


@dataclass(frozen=True)
class RegisteredNode:
    """A node as the chain registry knows it (`nodes` projection)."""

    address: str
    provider: str
    compute_units: int
    specs_hash: bytes
    attested: bool
    active: bool


@dataclass(frozen=True)
class Announcement:
    """What a node told the backend about itself."""

    address: str
    provider: str
    specs: dict[str, Any]
    endpoint: str | None
    announced_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class NodeView:
    """Everything the public status of a node needs, in one row.

    `membership` is the node's most relevant pool: an active membership first, else the
    lowest pool id where it has a membership row. `joined_at` is the time of the block that
    last changed that membership (its join, for an active member).
    """

    address: str
    registered: bool
    registry_active: bool
    provider: str | None
    compute_units: int | None
    specs_hash: bytes | None
    announced: bool
    specs: dict[str, Any] | None
    endpoint: str | None
    announced_at: datetime | None
    pool_id: int | None
    membership: str | None
    blacklisted: bool
    joined_at: float | None


@dataclass(frozen=True)
class HeartbeatContext:
    """What one heartbeat needs to answer, fetched in one round trip."""

    provider: str
    registry_active: bool
    announced: bool
    pool_id: int | None
    membership: str | None
    blacklisted: bool
    pool_status: str | None
    model_uri: str | None
    """The pool's model URI, which names its environment (and so its task set)."""
    spec_sha256: bytes | None
    """The pool's on-chain `specSha256` (32 zero bytes: no spec), which its model URI must name."""
    checkpoint_version: int | None
    manifest_sha256: bytes | None
    checkpoint_uri: str | None
    batch_version: int | None
    batch: int | None
    batch_size: int | None
    group_size: int | None
    max_tokens: int | None
    temperature: float | None


@dataclass(frozen=True)
class PoolRow:
    pool_id: int
    manager: str
    status: str


@dataclass(frozen=True)
class Membership:
    pool_id: int
    node: str
    provider: str | None
    state: str | None
    blacklisted: bool
    block_number: int


@dataclass(frozen=True)
class ActiveMember:
    """An active member of a pool the orchestrator manages, for the sweeper."""

    pool_id: int
    node: str
    provider: str | None
    joined_at: float | None


@dataclass(frozen=True)
class InviteRow:
    nonce: int
    pool_id: int
    node: str
    provider: str
    manager: str
    expiry: int
    signature: bytes
    membership_block: int | None


# --------------------------------------------------------------------------- projections (read only)

SELECT_REGISTERED = """
    SELECT address, provider, compute_units, specs_hash, attested, active FROM nodes WHERE address = %(node)s"""


async def registered_node(conn: AsyncConnection, node: str) -> RegisteredNode | None:
    """The registry's record of `node`, or None if the indexer has not seen it."""
    async with conn.cursor(row_factory=class_row(RegisteredNode)) as cur:
        await cur.execute(SELECT_REGISTERED, {"node": node})
        row = await cur.fetchone()
    return None if row is None else RegisteredNode(**{**row.__dict__, "specs_hash": bytes(row.specs_hash)})


# The membership that matters: an active one first, then the lowest pool id.
_MEMBERSHIP_LATERAL = """
    LEFT JOIN LATERAL (
        SELECT m.pool_id, m.state, m.blacklisted, m.block_number
        FROM memberships m
        WHERE m.node = %(node)s AND (%(pool_id)s::bigint IS NULL OR m.pool_id = %(pool_id)s::bigint)
        ORDER BY (m.state = 'active') DESC NULLS LAST, m.pool_id
        LIMIT 1
    ) m ON true"""

SELECT_NODE_VIEW = (
    """
    SELECT %(node)s AS address,
           n.address IS NOT NULL AS registered,
           coalesce(n.active, false) AS registry_active,
           coalesce(n.provider, a.provider) AS provider,
           n.compute_units, n.specs_hash,
           a.address IS NOT NULL AS announced,
           a.specs, a.endpoint, a.announced_at,
           m.pool_id, m.state AS membership, coalesce(m.blacklisted, false) AS blacklisted,
           extract(epoch FROM b.timestamp)::float8 AS joined_at
    FROM (SELECT 1) one
    LEFT JOIN nodes n ON n.address = %(node)s
    LEFT JOIN node_announcements a ON a.address = %(node)s"""
    + _MEMBERSHIP_LATERAL
    + """
    LEFT JOIN chain_blocks b ON b.number = m.block_number"""
)


async def node_view(conn: AsyncConnection, node: str) -> NodeView | None:
    """The public status inputs of `node`; None if it is neither registered nor announced."""
    async with conn.cursor(row_factory=class_row(NodeView)) as cur:
        await cur.execute(SELECT_NODE_VIEW, {"node": node, "pool_id": None})
        row = await cur.fetchone()
    if row is None or not (row.registered or row.announced):
        return None
    return row


SELECT_HEARTBEAT_CONTEXT = (
    """
    SELECT n.provider, n.active AS registry_active,
           a.address IS NOT NULL AS announced,
           m.pool_id, m.state AS membership, coalesce(m.blacklisted, false) AS blacklisted,
           p.status AS pool_status,
           p.model_uri, p.spec_sha256,
           c.version AS checkpoint_version, c.manifest_sha256, c.uri AS checkpoint_uri,
           nb.model_version AS batch_version, nb.batch,
           cfg.batch_size, cfg.group_size, cfg.max_tokens, cfg.temperature
    FROM nodes n
    LEFT JOIN node_announcements a ON a.address = n.address"""
    + _MEMBERSHIP_LATERAL
    + """
    LEFT JOIN pools p ON p.pool_id = m.pool_id
    LEFT JOIN LATERAL (
        SELECT version, manifest_sha256, uri FROM checkpoints
        WHERE pool_id = m.pool_id ORDER BY version DESC LIMIT 1
    ) c ON true
    LEFT JOIN node_batches nb ON nb.pool_id = m.pool_id AND nb.node = n.address
    LEFT JOIN pool_assignment_config cfg ON cfg.pool_id = m.pool_id
    WHERE n.address = %(node)s"""
)


async def heartbeat_context(conn: AsyncConnection, node: str, pool_id: int | None = None) -> HeartbeatContext | None:
    """Registry, announcement, membership (in `pool_id` if given), latest checkpoint, batch
    counter and pool settings of `node`; None if the registry projection has no such node."""
    async with conn.cursor(row_factory=class_row(HeartbeatContext)) as cur:
        await cur.execute(SELECT_HEARTBEAT_CONTEXT, {"node": node, "pool_id": pool_id})
        return await cur.fetchone()


SELECT_POOL = "SELECT pool_id, manager, status FROM pools WHERE pool_id = %(pool_id)s"


async def pool(conn: AsyncConnection, pool_id: int) -> PoolRow | None:
    async with conn.cursor(row_factory=class_row(PoolRow)) as cur:
        await cur.execute(SELECT_POOL, {"pool_id": pool_id})
        return await cur.fetchone()


SELECT_MANAGED_ACTIVE_POOL = """
    SELECT pool_id, manager, status FROM pools
    WHERE manager = %(manager)s AND status = 'active' ORDER BY pool_id LIMIT 1"""


async def first_active_pool(conn: AsyncConnection, manager: str) -> PoolRow | None:
    """The lowest-id active pool whose manager is `manager` (the default pool of an invite)."""
    async with conn.cursor(row_factory=class_row(PoolRow)) as cur:
        await cur.execute(SELECT_MANAGED_ACTIVE_POOL, {"manager": manager})
        return await cur.fetchone()


SELECT_MANAGED_POOLS = "SELECT pool_id, manager, status FROM pools WHERE manager = %(manager)s ORDER BY pool_id"


async def managed_pools(conn: AsyncConnection, manager: str) -> list[PoolRow]:
    """Every indexed pool whose manager is `manager`, by id (what the sweeper says it watches)."""
    async with conn.cursor(row_factory=class_row(PoolRow)) as cur:
        await cur.execute(SELECT_MANAGED_POOLS, {"manager": manager})
        return await cur.fetchall()


SELECT_MEMBERSHIP = """
    SELECT pool_id, node, provider, state, blacklisted, block_number FROM memberships
    WHERE pool_id = %(pool_id)s AND node = %(node)s"""


async def membership(conn: AsyncConnection, pool_id: int, node: str) -> Membership | None:
    async with conn.cursor(row_factory=class_row(Membership)) as cur:
        await cur.execute(SELECT_MEMBERSHIP, {"pool_id": pool_id, "node": node})
        return await cur.fetchone()


async def pool_approved(conn: AsyncConnection, pool_id: int, provider: str) -> bool:
    """Whether `provider` approved `pool_id` (`ComputePool.approvePool`) and has not revoked it."""
    cur = await conn.execute(
        "SELECT approved FROM pool_approvals WHERE pool_id = %(pool_id)s AND provider = %(provider)s",
        {"pool_id": pool_id, "provider": provider},
    )
    row = await cur.fetchone()
    return bool(row and row[0])


SELECT_ACTIVE_MEMBERS = """
    SELECT m.pool_id, m.node, m.provider, extract(epoch FROM b.timestamp)::float8 AS joined_at
    FROM memberships m
    JOIN pools p ON p.pool_id = m.pool_id
    LEFT JOIN chain_blocks b ON b.number = m.block_number
    WHERE p.manager = %(manager)s AND m.state = 'active'
    ORDER BY m.pool_id, m.node"""


async def active_members(conn: AsyncConnection, manager: str) -> list[ActiveMember]:
    """Active members of every pool managed by `manager` (the sweeper's candidates)."""
    async with conn.cursor(row_factory=class_row(ActiveMember)) as cur:
        await cur.execute(SELECT_ACTIVE_MEMBERS, {"manager": manager})
        return await cur.fetchall()


async def chain_id(conn: AsyncConnection) -> int | None:
    """The chain the indexer follows, or None before its first run."""
    row = await (await conn.execute("SELECT chain_id FROM indexer_state WHERE id = 1")).fetchone()
    return None if row is None else int(row[0])


# --------------------------------------------------------------------------- announcements

UPSERT_ANNOUNCEMENT = """
    INSERT INTO node_announcements (address, provider, specs, endpoint)
    VALUES (%(address)s, %(provider)s, %(specs)s, %(endpoint)s)
    ON CONFLICT (address) DO UPDATE
       SET provider = EXCLUDED.provider, specs = EXCLUDED.specs, endpoint = EXCLUDED.endpoint, updated_at = now()
    RETURNING address, provider, specs, endpoint, announced_at, updated_at"""


async def upsert_announcement(
    conn: AsyncConnection, address: str, provider: str, specs: dict[str, Any], endpoint: str | None
) -> Announcement:
    """Record (or refresh) a node's announcement; the first announcement time is kept."""
    async with conn.cursor(row_factory=class_row(Announcement)) as cur:
        await cur.execute(
            UPSERT_ANNOUNCEMENT,
            {"address": address, "provider": provider, "specs": Jsonb(specs), "endpoint": endpoint},
        )
        row = await cur.fetchone()
    assert row is not None  # RETURNING of an upsert always yields the row
    return row


# --------------------------------------------------------------------------- batch counters

ADVANCE_BATCH = """
    WITH advanced AS (
        INSERT INTO node_batches (pool_id, node, model_version, batch)
        VALUES (%(pool_id)s, %(node)s, %(version)s, %(completed)s + 1)
        ON CONFLICT (pool_id, node) DO UPDATE
           SET model_version = EXCLUDED.model_version, batch = EXCLUDED.batch, updated_at = now()
         WHERE node_batches.model_version <> EXCLUDED.model_version OR node_batches.batch = %(completed)s
        RETURNING pool_id, node, model_version, batch
    ), issued AS (
        INSERT INTO issued_batches (pool_id, node, model_version, last_batch)
        SELECT pool_id, node, model_version, batch FROM advanced
        ON CONFLICT (pool_id, node, model_version) DO UPDATE
           SET last_batch = GREATEST(issued_batches.last_batch, EXCLUDED.last_batch), updated_at = now()
    )
    SELECT batch FROM advanced"""


async def advance_batch(conn: AsyncConnection, pool_id: int, node: str, version: int, completed: int) -> bool:
    """Move `node` past batch `completed` of checkpoint `version`, and record batch `completed` + 1
    as handed out (`issued_batches`, which validators bound a file's batch by).

    The caller checks that `completed` is the node's current batch (0 when the row is missing
    or holds an older version); the WHERE clause makes two racing heartbeats advance once.
    False when another request advanced it first.
    """
    cur = await conn.execute(
        ADVANCE_BATCH, {"pool_id": pool_id, "node": node, "version": version, "completed": completed}
    )
    return (await cur.fetchone()) is not None


# A bundle's row stands for all of its files (revision 0010): it counts cardinality(file_keys);
# a submitWork row (file_keys NULL) counts one.
COUNT_SUBMITTED = """
    SELECT COALESCE(sum(COALESCE(cardinality(file_keys), 1)), 0) FROM submissions
    WHERE pool_id = %(pool_id)s AND node = %(node)s AND model_version = %(version)s"""


async def submitted_files(conn: AsyncConnection, pool_id: int, node: str, version: int) -> int:
    """Files `node` submitted on-chain to `pool_id` claiming checkpoint `version`, whatever their
    verdict (a rejected file was slashed: that is its price, not a way around answering). A
    bundle counts its files, so batching submissions never lets a node skip batches."""
    cur = await conn.execute(COUNT_SUBMITTED, {"pool_id": pool_id, "node": node, "version": version})
    row = await cur.fetchone()
    assert row is not None  # an aggregate always returns a row
    return int(row[0])


# --------------------------------------------------------------------------- invites

SELECT_REUSABLE_INVITE = """
    SELECT nonce, pool_id, node, provider, manager, expiry, signature, membership_block FROM pool_invites
    WHERE pool_id = %(pool_id)s AND node = %(node)s AND manager = %(manager)s AND expiry >= %(min_expiry)s
      AND membership_block IS NOT DISTINCT FROM %(membership_block)s
    ORDER BY expiry DESC LIMIT 1"""


async def reusable_invite(
    conn: AsyncConnection, pool_id: int, node: str, manager: str, min_expiry: int, membership_block: int | None
) -> InviteRow | None:
    """An invite already issued to `node` that stays valid until at least `min_expiry` and was
    signed while the node's membership was as it is now (so it cannot have been used since)."""
    params = {
        "pool_id": pool_id,
        "node": node,
        "manager": manager,
        "min_expiry": min_expiry,
        "membership_block": membership_block,
    }
    async with conn.cursor(row_factory=class_row(InviteRow)) as cur:
        await cur.execute(SELECT_REUSABLE_INVITE, params)
        row = await cur.fetchone()
    return None if row is None else InviteRow(**{**row.__dict__, "signature": bytes(row.signature)})


async def next_invite_nonce(conn: AsyncConnection) -> int:
    """A fresh invite nonce (never handed out before by this database)."""
    row = await (await conn.execute("SELECT nextval(pg_get_serial_sequence('pool_invites', 'nonce'))")).fetchone()
    assert row is not None
    return int(row[0])


INSERT_INVITE = """
    INSERT INTO pool_invites (nonce, pool_id, node, provider, manager, expiry, signature, membership_block)
    VALUES (%(nonce)s, %(pool_id)s, %(node)s, %(provider)s, %(manager)s, %(expiry)s, %(signature)s,
            %(membership_block)s)"""


async def insert_invite(conn: AsyncConnection, invite: InviteRow) -> None:
    """Keep a signed invite, so a repeated request returns it instead of signing another."""
    await conn.execute(INSERT_INVITE, invite.__dict__)


async def is_announced(conn: AsyncConnection, node: str) -> bool:
    row = await (await conn.execute("SELECT 1 FROM node_announcements WHERE address = %s", (node,))).fetchone()
    return row is not None


async def latest_block_time(conn: AsyncConnection) -> int | None:
    """Unix time of the newest block the indexer stored (the chain's clock as we know it)."""
    row = await (
        await conn.execute(
            "SELECT extract(epoch FROM timestamp)::bigint FROM chain_blocks ORDER BY number DESC LIMIT 1"
        )
    ).fetchone()
    return None if row is None else int(row[0])
