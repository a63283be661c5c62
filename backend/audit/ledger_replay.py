"""The ledger rows the chain's logs about one submission imply, made by the indexer's own projectors.

`proofpool.backend.indexer.projections` turns each event into SQL statements with parameters. To
know which rows those logs should have produced, without a database and without a second
projector that could drift from the first, this module runs the same projector functions against
a cursor that records instead of executing (`_Recorder`), and applies the five statements a work
event can issue the way PostgreSQL would (an insert keyed by its log is kept once, a status update
touches the submission's row). The rows come out in the API's shape (`0x`-hex bytes, amounts as
decimal strings, the columns of `proofpool.core.ledger_listings`), ready to compare with what
`proofpool.backend.db.ledger.fetch_submission` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proofpool.backend.db import projections as sql
from proofpool.backend.indexer.projections import PROJECTORS
from proofpool.backend.indexer.records import IndexedEvent

Row = dict[str, Any]

IGNORED_STATEMENTS = frozenset({sql.POOL_PAID})
"""Statements of work events that change no table about the submission (the pool's budget)."""


class UnknownStatement(ValueError):
    """A projector issued a statement this replay does not know: it must learn it (a bug, not input)."""


def _hex(raw: bytes | None) -> str | None:
    return None if raw is None else "0x" + bytes(raw).hex()


def _position(params: Mapping[str, Any]) -> Row:
    return {"block_number": params["block"], "tx_hash": _hex(params["tx"]), "log_index": params["log"]}


@dataclass
class ReplayedWork:
    """The rows of one submission as the indexer would write them from its logs (API shape)."""

    submission: Row | None = None
    verdicts: list[Row] = field(default_factory=list)
    slashes: list[Row] = field(default_factory=list)
    rewards: list[Row] = field(default_factory=list)
    status_logs: int = 0
    """Logs that changed the status (after the submission's own)."""


class _Recorder:
    """Stands in for the psycopg cursor a projector writes through (it only calls `execute`)."""

    def __init__(self) -> None:
        self.work = ReplayedWork()
        self._seen: set[tuple[Any, ...]] = set()
        self._apply: dict[str, Callable[[Mapping[str, Any]], None]] = {
            sql.WORK_SUBMITTED: self._submitted,
            sql.WORK_BUNDLE_SUBMITTED: self._submitted,
            sql.WORK_STATUS: self._status,
            sql.VERDICT: self._verdict,
            sql.SLASH: self._slash,
            sql.REWARD: self._reward,
        }

    def execute(self, statement: str, params: Mapping[str, Any]) -> None:
        apply = self._apply.get(statement)
        if apply is not None:
            apply(params)
        elif statement not in IGNORED_STATEMENTS:
            raise UnknownStatement(f"a work event's projector issued a statement the replay does not know: {statement}")

    def _once(self, table: str, *key: Any) -> bool:
        """True the first time a row of `table` with this natural key is written (ON CONFLICT DO NOTHING)."""
        if (table, *key) in self._seen:
            return False
        self._seen.add((table, *key))
        return True

    def _submitted(self, p: Mapping[str, Any]) -> None:
        if self.work.submission is not None:  # ON CONFLICT (pool_id, work_key) DO NOTHING
            return
        keys, units = p.get("file_keys"), p.get("file_units")
        self.work.submission = {
            "pool_id": p["pool_id"],
            "work_key": _hex(p["work_key"]),
            "node": p["node"],
            "provider": p["provider"],
            "work_units": p["work_units"],
            "model_version": p["model_version"],
            "status": "pending",
            "submitted_at": p["time"],
            **_position(p),
            "status_block": None,
            "status_tx_hash": None,
            "files": None
            if keys is None
            else [{"work_key": _hex(k), "work_units": u} for k, u in zip(keys, units, strict=True)],
        }

    def _status(self, p: Mapping[str, Any]) -> None:
        if self.work.submission is None:  # UPDATE of a row that does not exist
            return
        self.work.submission.update(status=p["status"], status_block=p["block"], status_tx_hash=_hex(p["tx"]))
        self.work.status_logs += 1

    def _verdict(self, p: Mapping[str, Any]) -> None:
        if self._once("verdicts", p["tx"], p["log"]):
            self.work.verdicts.append(
                {
                    "pool_id": p["pool_id"],
                    "work_key": _hex(p["work_key"]),
                    "verdict": p["verdict"],
                    "validator": p["validator"],
                    "reason": p["reason"],
                    **_position(p),
                    "lag_blocks": None
                    if self.work.submission is None
                    else p["block"] - self.work.submission["block_number"],
                }
            )

    def _slash(self, p: Mapping[str, Any]) -> None:
        if self._once("slashes", p["tx"], p["log"]):
            self.work.slashes.append(
                {
                    "pool_id": p["pool_id"],
                    "work_key": _hex(p["work_key"]),
                    "provider": p["provider"],
                    "validator": p["validator"],
                    "validator_share": str(p["validator_share"]),
                    "treasury": p["treasury"],
                    "treasury_share": str(p["treasury_share"]),
                    "amount": str(p["amount"]),
                    **_position(p),
                }
            )

    def _reward(self, p: Mapping[str, Any]) -> None:
        if self._once("rewards", p["tx"], p["log"], p["account"], p["kind"]):
            self.work.rewards.append(
                {
                    "account": p["account"],
                    "kind": p["kind"],
                    "amount": str(p["amount"]),
                    "pool_id": p["pool_id"],
                    "work_key": _hex(p["work_key"]),
                    **_position(p),
                }
            )


def replay_work(events: Iterable[IndexedEvent]) -> ReplayedWork:
    """The rows `events` (one submission's logs, in chain order) make, through the indexer's projectors."""
    recorder = _Recorder()
    for event in events:
        projector = PROJECTORS.get(event.name)
        if projector is not None:
            projector(recorder, event)  # type: ignore[arg-type]  # records what a Cursor would execute
    return recorder.work
