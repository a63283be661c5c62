"""Pool membership as the chain says it (the `memberships` and `pools` projections the
indexer writes): who may upload rollouts for a pool right now.

Async functions taking the connection first; callers own the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import AsyncConnection
from psycopg.rows import class_row


@dataclass(frozen=True)
class Membership:
    """A node's membership row joined with its pool's status.

    `state` is None for an address that never joined (a row created by a blacklisting);
    `pool_status` is None if the pool row is not indexed yet.
    """

    pool_id: int
    node: str
    provider: str | None
    state: str | None
    blacklisted: bool
    pool_status: str | None

    @property
    def may_submit(self) -> bool:
        """Active, not blacklisted, in an active pool: what `submitWork` itself requires."""
        return self.state == "active" and not self.blacklisted and self.pool_status == "active"


GET_MEMBERSHIP = """
    SELECT m.pool_id, m.node, m.provider, m.state, m.blacklisted, p.status AS pool_status
    FROM memberships m
    LEFT JOIN pools p ON p.pool_id = m.pool_id
    WHERE m.pool_id = %(pool_id)s AND m.node = %(node)s"""


async def get_membership(conn: AsyncConnection, pool_id: int, node: str) -> Membership | None:
    """The membership of checksummed `node` in `pool_id`, or None if it never had one."""
    async with conn.cursor(row_factory=class_row(Membership)) as cur:
        await cur.execute(GET_MEMBERSHIP, {"pool_id": pool_id, "node": node})
        return await cur.fetchone()


async def is_active_member(conn: AsyncConnection, pool_id: int, node: str) -> bool:
    """True when `node` may submit work to `pool_id` now (see `Membership.may_submit`)."""
    membership = await get_membership(conn, pool_id, node)
    return membership is not None and membership.may_submit
