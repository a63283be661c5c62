"""One submission as the ledger holds it, with the block the ledger holds it as of: both read in one
REPEATABLE READ snapshot, so an indexer writing meanwhile cannot pair rows of one block with the
cursor of another."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from proofpool.backend.db import ledger
from proofpool.backend.db.indexed_tip import IndexedTip, indexed_tip
from psycopg import AsyncConnection

from proofpool.core.errors import ServiceUnavailable


@dataclass(frozen=True)
class LedgerSnapshot:
    detail: ledger.SubmissionDetail
    tip: IndexedTip

    def as_rows(self) -> dict[str, Any]:
        """The submission detail as plain dicts, in the API's shape (what the audits compare)."""
        return asdict(self.detail)


async def read_snapshot(conn: AsyncConnection, pool_id: int, work_key: str) -> LedgerSnapshot | None:
    """The submission `work_key` (0x-hex) of `pool_id` and the indexer's tip; None when the ledger
    has no such submission. `conn` is an autocommit connection (the backend's pool)."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        detail = await ledger.fetch_submission(conn, pool_id, work_key)
        if detail is None:
            return None
        tip = await indexed_tip(conn)
    if tip is None:  # rows without a cursor: written by hand, not by the indexer
        raise ServiceUnavailable("the ledger has rows but no indexer cursor: run `proofpool indexer run` first")
    return LedgerSnapshot(detail, tip)
