"""Where the indexer stands, read by the backend's requests (async): the chain it follows, the last
block it has indexed and that block's hash as it saw it. What an audit of one submission compares
the chain with (`proofpool.backend.audit`): the ledger is exactly the chain up to that block."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import AsyncConnection

SELECT_TIP = """
    SELECT s.chain_id, s.next_block - 1, b.hash
    FROM indexer_state s LEFT JOIN chain_blocks b ON b.number = s.next_block - 1
    WHERE s.id = 1"""


@dataclass(frozen=True)
class IndexedTip:
    chain_id: int
    last_block: int
    """The last block indexed (the deploy block - 1 before the first range)."""
    block_hash: bytes | None
    """Its hash as the indexer read it; None when the indexer kept no header of it."""


async def indexed_tip(conn: AsyncConnection) -> IndexedTip | None:
    """The indexer's position; None before its first run."""
    row = await (await conn.execute(SELECT_TIP)).fetchone()
    if row is None:
        return None
    chain_id, last, block_hash = row
    return IndexedTip(int(chain_id), int(last), None if block_hash is None else bytes(block_hash))
