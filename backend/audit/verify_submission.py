"""`ledger verify` for one submission: its ledger rows against the chain, in a request's time.

`proofpool.backend.indexer.verify` rebuilds the whole ledger into a scratch database; an auditor
looking at one submission wants the same answer about it alone. This reads:

1. the ledger's submission, verdicts, slashes and credits and the indexer's cursor, in one
   snapshot (`ledger_snapshot`);
2. the chain up to the block that cursor has reached, never further (an indexer merely behind the
   head is not a mismatch): the ComputePool's logs about (pool, work key), one `eth_getLogs` on
   the indexed topics, and `getWork`'s status at that block (`chain_view`);
3. and compares (`submission_diff`): the indexed block is the chain's; the submission row is the
   one its submitting log makes; its status is where the status logs lead and what the contract
   says; each verdict, slash and credit row is made by a log of the chain with the same values,
   and each such log has its row. The rows the logs make come from the indexer's own projectors
   (`ledger_replay`), so this check cannot drift from the indexer.

An unreachable or wrong chain is `ServiceUnavailable` (the API's 503); a finished comparison is a
`SubmissionVerification`, whose `ok` is the verdict.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from proofpool.backend.audit.chain_view import ChainView, ChainViews, WorkLogs
from proofpool.backend.audit.ledger_replay import replay_work
from proofpool.backend.audit.ledger_snapshot import read_snapshot
from proofpool.backend.audit.submission_diff import Check, check_chain_tip, diff_submission
from psycopg import AsyncConnection
from pydantic import ConfigDict, with_config

log = logging.getLogger(__name__)


@with_config(ConfigDict(use_attribute_docstrings=True))
@dataclass(frozen=True)
class SubmissionVerification:
    """One submission's ledger rows checked against the chain."""

    pool_id: int
    """The pool."""
    work_key: str
    """The submission (0x-hex)."""
    ok: bool
    """True when every check passed: the ledger is what the chain implies for this submission."""
    chain_id: int
    """The chain checked (the one the ledger indexes)."""
    from_block: int
    """First block read: the contracts' deploy block."""
    to_block: int
    """Last block read: the last block the ledger has indexed (later blocks are not the ledger's yet)."""
    logs: int
    """ComputePool logs about the submission in that range."""
    checks: list[Check]
    """Each comparison, in order: chain_tip, submission, status, contract_status, verdicts, slashes, credits
    (only chain_tip when the chain lacks the indexed block)."""
    seconds: float
    """Time the verification took."""


def _read_chain(view: ChainView, pool_id: int, work_key: bytes, last: int) -> tuple[WorkLogs, str | None]:
    """The submission's logs up to `last` and getWork's status there (None when the chain lacks `last`)."""
    logs = view.work_logs(pool_id, work_key, last)
    status = None if logs.tip_hash is None else view.work_status(pool_id, work_key, last)
    return logs, status


async def verify_submission(
    conn: AsyncConnection, views: ChainViews, pool_id: int, work_key: str
) -> SubmissionVerification | None:
    """Check the submission `work_key` (0x-hex) of `pool_id` against the chain (module docstring);
    None when the ledger has no such submission."""
    started = time.monotonic()
    snapshot = await read_snapshot(conn, pool_id, work_key)
    if snapshot is None:
        return None
    tip = snapshot.tip
    view = await asyncio.to_thread(views.of, tip.chain_id)
    key = bytes.fromhex(work_key.removeprefix("0x"))
    logs, status = await asyncio.to_thread(_read_chain, view, pool_id, key, tip.last_block)
    tip_check = check_chain_tip(tip.last_block, tip.block_hash, logs.tip_hash)
    if status is None:
        checks = [tip_check]
    else:
        checks = diff_submission(replay_work(logs.events), snapshot.as_rows(), status, tip.last_block, tip_check)
    result = SubmissionVerification(
        pool_id=pool_id,
        work_key=work_key.lower(),
        ok=all(check.ok for check in checks),
        chain_id=tip.chain_id,
        from_block=view.book.deploy_block,
        to_block=tip.last_block,
        logs=len(logs.events),
        checks=checks,
        seconds=round(time.monotonic() - started, 4),
    )
    log.info(
        "submission verified",
        extra={
            "pool_id": pool_id,
            "work_key": result.work_key,
            "ok": result.ok,
            "failed": [c.name for c in checks if not c.ok],
            "to_block": tip.last_block,
            "seconds": result.seconds,
        },
    )
    return result
