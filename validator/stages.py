"""Where a submission's time goes, from its block to its verdict's block.

Every submission passes the same stages, each ending at a timestamp some component records:

| stage | from | to | recorded by |
|---|---|---|---|
| `indexing` | the submission's block (chain time, whole seconds) | its outbox row (`outbox.created_at`) | indexer |
| `dispatch` | outbox row | handed to the broker (`outbox.dispatched_at`) | indexer |
| `queue` | dispatched | claimed by a validator (`validations.claimed_at`) | validator |
| `checks` | claimed | decision recorded (`validations.decided_at`) | validator |
| `verdict_wait` | decided | its transaction sent (`validations.send_started_at`) | verdict sender |
| `verdict_tx` | sent | receipt recorded (`validations.sent_at`) | verdict sender |

and `total`, the submission's block to the verdict's block, both in chain time: what a provider
waits to learn whether it will be paid. The validator exports each as the Prometheus histogram
`proofpool_submission_stage_seconds{stage}` (`observe_decided` at the decision, `observe_sent` when
the receipt is in); `stage_rows` reads the same timestamps back from the database, so a benchmark
can print exact percentiles per stage (`bench/e2e.py`). Chain times have a resolution of one second
(block timestamps), so `indexing` and `total` carry up to a second of rounding; the other stages
are database clock differences.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

import psycopg
from proofpool.validator import metrics
from psycopg import Connection

log = logging.getLogger(__name__)

STAGES: Final = ("indexing", "dispatch", "queue", "checks", "verdict_wait", "verdict_tx")
"""The stages in order; their sum is a submission's time from block to verdict receipt."""
TOTAL: Final = "total"
"""Submission block to verdict block (chain time)."""

_TIMES = """
    SELECT s.pool_id, s.work_key,
           extract(epoch FROM s.submitted_at)::float8,
           extract(epoch FROM o.created_at)::float8,
           extract(epoch FROM o.dispatched_at)::float8,
           extract(epoch FROM v.claimed_at)::float8,
           extract(epoch FROM v.decided_at)::float8,
           extract(epoch FROM v.send_started_at)::float8,
           extract(epoch FROM v.sent_at)::float8
      FROM validations v
      JOIN submissions s ON s.pool_id = v.pool_id AND s.work_key = v.work_key
      LEFT JOIN outbox o ON o.dedupe_key = v.pool_id::text || ':0x' || encode(v.work_key, 'hex')"""

_BY_KEYS = " WHERE (v.pool_id, v.work_key) IN (SELECT * FROM unnest(%(pools)s::bigint[], %(keys)s::bytea[]))"

_BY_POOL = " WHERE v.pool_id = %(pool_id)s"

_VERDICT_BLOCKS = """
    SELECT DISTINCT ON (v.pool_id, v.work_key) v.pool_id, v.work_key, extract(epoch FROM b.timestamp)::float8
      FROM verdicts v JOIN chain_blocks b ON b.number = v.block_number
     WHERE v.pool_id = %(pool_id)s
     ORDER BY v.pool_id, v.work_key, v.block_number, v.log_index"""


@dataclass(frozen=True)
class StageTimes:
    """The recorded timestamps (Unix seconds) of one submission; None where not (yet) recorded."""

    pool_id: int
    work_key: bytes
    submitted: float
    indexed: float | None
    dispatched: float | None
    claimed: float | None
    decided: float | None
    send_started: float | None
    sent: float | None
    verdict_block: float | None = None
    """Time of the block of the submission's first indexed verdict (`verdicts` + `chain_blocks`)."""

    def durations(self) -> dict[str, float]:
        """Seconds per stage, for the stages whose both ends are recorded (`total` needs the verdict
        block). A stage whose ends come from different clocks (block time against the database's)
        can be slightly negative by rounding: clamped to 0."""
        ends = (
            self.submitted,
            self.indexed,
            self.dispatched,
            self.claimed,
            self.decided,
            self.send_started,
            self.sent,
        )
        out = {
            stage: max(0.0, end - start)
            for stage, start, end in zip(STAGES, ends[:-1], ends[1:], strict=True)
            if start is not None and end is not None
        }
        if self.verdict_block is not None:
            out[TOTAL] = max(0.0, self.verdict_block - self.submitted)
        return out


def _rows(conn: Connection, where: str, params: dict[str, object]) -> list[StageTimes]:
    return [StageTimes(int(r[0]), bytes(r[1]), *r[2:]) for r in conn.execute(_TIMES + where, params).fetchall()]


def stage_rows(conn: Connection, pool_id: int) -> list[StageTimes]:
    """The stage timestamps of every judged submission of `pool_id`, with its verdict's block time."""
    rows = _rows(conn, _BY_POOL, {"pool_id": pool_id})
    blocks = {(int(p), bytes(k)): float(t) for p, k, t in conn.execute(_VERDICT_BLOCKS, {"pool_id": pool_id})}
    return [replace(row, verdict_block=blocks.get((row.pool_id, row.work_key))) for row in rows]


def observe_decided(conn: Connection, pool_id: int, work_key: bytes) -> None:
    """Export the stages up to the decision of one submission. Metrics only: a failure is logged,
    never raised into the validation that just recorded its decision."""
    try:
        rows = _rows(conn, _BY_KEYS, {"pools": [pool_id], "keys": [work_key]})
    except psycopg.Error as exc:
        log.warning("stage times not read: %s", exc)
        return
    for row in rows:
        for stage, seconds in row.durations().items():
            if stage in ("indexing", "dispatch", "queue", "checks"):
                metrics.STAGE_SECONDS.labels(stage).observe(seconds)


def observe_sent(conn: Connection, keys: Sequence[tuple[int, bytes]], verdict_block_time: float) -> None:
    """Export the verdict stages and the total of submissions whose verdict transaction was mined in
    a block stamped `verdict_block_time`. Metrics only, like `observe_decided`."""
    if not keys:
        return
    try:
        rows = _rows(conn, _BY_KEYS, {"pools": [p for p, _ in keys], "keys": [k for _, k in keys]})
    except psycopg.Error as exc:
        log.warning("stage times not read: %s", exc)
        return
    for row in rows:
        durations = replace(row, verdict_block=verdict_block_time).durations()
        for stage in ("verdict_wait", "verdict_tx", TOTAL):
            if stage in durations:
                metrics.STAGE_SECONDS.labels(stage).observe(durations[stage])
