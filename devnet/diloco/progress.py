"""What the training pool's devnet shows while it runs: one line per closed round, read the way an
auditor would read the market (the ledger API for verdicts and slashes, the chain for the latest
checkpoint) plus the aggregator's own round log (`rounds.jsonl`: who was averaged, the inner and
held-out losses it measured)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proofpool.devnet.progress import Snapshot


@dataclass(frozen=True)
class RoundRow:
    """One closed round as the aggregator logged it (a line of its rounds.jsonl)."""

    round: int
    version: int
    closed: str
    """`all_members` or `deadline`."""
    contributors: tuple[str, ...]
    """Node addresses whose files were averaged, in work-key order."""
    eval_loss: float | None
    inner_loss: float | None
    inner_loss_last: float | None
    wait_seconds: float | None

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> RoundRow | None:
        """The round of a rounds.jsonl line; None for the base model's line (no round)."""
        if row.get("round") is None:
            return None
        return cls(
            round=int(row["round"]),
            version=int(row["version"]),
            closed=str(row.get("closed", "")),
            contributors=tuple(row.get("contributors", ())),
            eval_loss=_number(row.get("eval_loss")),
            inner_loss=_number(row.get("inner_loss")),
            inner_loss_last=_number(row.get("inner_loss_last")),
            wait_seconds=_number((row.get("seconds") or {}).get("wait")),
        )


def closed_rounds(rows: Sequence[Mapping[str, Any]]) -> dict[int, RoundRow]:
    """The aggregator's closed rounds by round (a restarted aggregator appends to the same file:
    the last line of a round wins, though a round is closed once)."""
    found = {}
    for row in rows:
        parsed = RoundRow.from_json(row)
        if parsed is not None:
            found[parsed.round] = parsed
    return found


def base_eval_loss(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The base model's held-out loss, as the aggregator measured it before round 0."""
    for row in rows:
        if row.get("round") is None and row.get("version") == 0:
            return _number(row.get("eval_loss"))
    return None


def round_line(row: RoundRow, rounds: int, snapshot: Snapshot, names: Mapping[str, str]) -> str:
    """The live view's line for a closed round: who was averaged, the losses, and the market's
    verdicts and slashes so far. `names` maps node addresses to provider names."""
    who = ", ".join(names.get(node, node[:10]) for node in row.contributors) or "-"
    closed = "at the deadline" if row.closed == "deadline" else "all members in"
    accepted = sum(v.verdicts.get("accepted", 0) for v in snapshot.validators)
    invalid = sum(v.verdicts.get("invalid", 0) for v in snapshot.validators)
    slashed = [n.name for n in snapshot.nodes if n.slashed]
    return (
        f"round {row.round} -> checkpoint {row.version}/{rounds}: "
        f"{len(row.contributors)} contributors ({who}; {closed}) · "
        f"eval loss {_fmt(row.eval_loss)} · inner loss {_fmt(row.inner_loss)} → {_fmt(row.inner_loss_last)} · "
        f"verdicts {accepted} accepted, {invalid} invalid · slashed: {', '.join(slashed) or 'none'}"
    )


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
