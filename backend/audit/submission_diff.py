"""One submission's ledger rows against the rows its chain logs make: the pure half of
`proofpool.backend.audit.verify_submission`.

Every check is a `Check` (name, ok, detail). Rows are matched by the log that made them: verdicts
and slashes by (transaction, log index), credits by (transaction, log index, account, kind), the
natural keys the indexer writes them on. A ledger row that no log of the chain makes is "not on
the chain"; a chain log without its ledger row is "missing from the ledger"; a row whose log
exists but whose values differ names each column that differs, with both values. Columns are
those of the ledger listings (`proofpool.core.ledger_listings`): what the API serves is what is
checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from proofpool.backend.audit.ledger_replay import ReplayedWork
from pydantic import ConfigDict, with_config

from proofpool.core.ledger_listings import REWARDS, SLASHES, SUBMISSIONS, VERDICTS, Listing

Row = Mapping[str, Any]

MAX_LISTED = 10
"""Problems a check's detail spells out; the rest are counted."""

STATUS_COLUMNS = ("status", "status_block", "status_tx_hash")
"""The submission's columns that later logs change (compared by the `status` check)."""

CHECK_NAMES = ("chain_tip", "submission", "status", "contract_status", "verdicts", "slashes", "credits")
"""Every check a verification reports, in order."""


@with_config(ConfigDict(use_attribute_docstrings=True))
@dataclass(frozen=True)
class Check:
    """One comparison of a verification."""

    name: str
    """What was compared: one of `CHECK_NAMES`."""
    ok: bool
    """Whether the ledger agrees with the chain on it."""
    detail: str
    """What was compared and, when it failed, each difference found."""


def _shown(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return repr(value)


def _summary(problems: Sequence[str]) -> str:
    listed = "; ".join(problems[:MAX_LISTED])
    more = len(problems) - MAX_LISTED
    return listed + (f"; and {more} more" if more > 0 else "")


def _changes(columns: Sequence[str], ledger: Row, chain: Row) -> list[str]:
    """'<column> is <ledger> in the ledger, <chain> on the chain' for each column that differs."""
    return [
        f"{name} is {_shown(ledger.get(name))} in the ledger, {_shown(chain.get(name))} on the chain"
        for name in columns
        if ledger.get(name) != chain.get(name)
    ]


def _columns(listing: Listing, leave_out: Sequence[str] = ()) -> list[str]:
    return [column.name for column in listing.columns if column.name not in leave_out]


def check_chain_tip(last: int, ledger_hash: bytes | None, chain_hash: bytes | None) -> Check:
    """The block the ledger has indexed up to must be the chain's block of that number."""
    if chain_hash is None:
        return Check(
            "chain_tip",
            False,
            f"the ledger has indexed up to block {last}, which the chain does not have (another chain, or a "
            "devnet that was reset?)",
        )
    if ledger_hash is not None and ledger_hash != chain_hash:
        return Check(
            "chain_tip",
            False,
            f"block {last} is 0x{chain_hash.hex()} on the chain but 0x{ledger_hash.hex()} in the ledger: the "
            "ledger follows a fork the chain has left (the indexer rolls it back when it notices)",
        )
    kept = "as the ledger has it" if ledger_hash is not None else "(the ledger keeps no header of it)"
    return Check("chain_tip", True, f"block {last} is 0x{chain_hash.hex()} on the chain, {kept}")


def check_submission(chain: Row | None, ledger: Row) -> Check:
    """The submission row against the log that submitted it (WorkSubmitted or WorkBundleSubmitted)."""
    if chain is None:
        return Check(
            "submission",
            False,
            f"no WorkSubmitted or WorkBundleSubmitted log of the chain submits it, yet the ledger has it "
            f"(block {ledger.get('block_number')}, tx {ledger.get('tx_hash')})",
        )
    changes = _changes(_columns(SUBMISSIONS, STATUS_COLUMNS), ledger, chain)
    if changes:
        return Check("submission", False, _summary(changes))
    return Check(
        "submission",
        True,
        f"as submitted by the log {chain['tx_hash']}:{chain['log_index']} (block {chain['block_number']})",
    )


def check_status(chain: Row | None, ledger: Row, status_logs: int) -> Check:
    """The status and the log that last changed it, against the status the chain's logs lead to."""
    if chain is None:
        return Check("status", False, "the chain has no submission whose status the ledger could follow")
    changes = _changes(STATUS_COLUMNS, ledger, chain)
    if changes:
        return Check("status", False, _summary(changes))
    if status_logs == 0:
        return Check("status", True, f"{chain['status']}: no log changed it since the submission")
    which = "the only status log" if status_logs == 1 else f"the last of {status_logs} status logs"
    where = f"{chain['status_tx_hash']}, block {chain['status_block']}"
    return Check("status", True, f"{chain['status']}, as {which} left it ({where})")


def check_contract_status(contract_status: str, ledger_status: str, block: int) -> Check:
    """The ledger's status against the contract's own view of the work (`getWork`) at `block`."""
    said = f"getWork at block {block} says {contract_status!r}"
    if contract_status != ledger_status:
        return Check("contract_status", False, f"{said}, the ledger {ledger_status!r}")
    return Check("contract_status", True, f"{said}, as the ledger does")


def _describe(name: str, row: Row) -> str:
    where = f"{row.get('tx_hash')}:{row.get('log_index')}, block {row.get('block_number')}"
    if name == "verdicts":
        return f"the {row.get('verdict')} verdict of {row.get('validator')} ({where})"
    if name == "slashes":
        return f"the slash of {row.get('provider')} ({where})"
    return f"the {row.get('kind')} of {row.get('account')} ({where})"


def check_rows(name: str, listing: Listing, key: Sequence[str], chain: Sequence[Row], ledger: Sequence[Row]) -> Check:
    """Rows of `listing` made by logs (`key`: the natural key naming the log) against the ledger's."""
    by_key = {tuple(row.get(k) for k in key): row for row in chain}
    problems: list[str] = []
    matched: set[tuple[Any, ...]] = set()
    seen = set(by_key)
    for row in ledger:
        at = tuple(row.get(k) for k in key)
        seen.add(at)
        made = by_key.get(at)
        if made is None:
            problems.append(f"{_describe(name, row)} is in the ledger, but no log of the chain makes it")
            continue
        matched.add(at)
        changes = _changes(_columns(listing), row, made)
        if changes:
            problems.append(f"{_describe(name, row)}: {', '.join(changes)}")
    problems += [
        f"{_describe(name, row)} is on the chain but missing from the ledger"
        for at, row in by_key.items()
        if at not in matched
    ]
    if problems:
        return Check(name, False, f"{len(problems)} of {len(seen)} differ: {_summary(problems)}")
    if not chain:
        return Check(name, True, "none on the chain, none in the ledger")
    return Check(name, True, f"{len(chain)} on the chain, each in the ledger with the same values")


POSITION = ("tx_hash", "log_index")
ROW_CHECKS: tuple[tuple[str, str, Listing, tuple[str, ...]], ...] = (
    ("verdicts", "verdicts", VERDICTS, POSITION),
    ("slashes", "slashes", SLASHES, POSITION),
    ("credits", "rewards", REWARDS, (*POSITION, "account", "kind")),
)
"""(check name, field of the submission detail, listing, natural key) of each kind of row made by logs."""


def diff_submission(
    replayed: ReplayedWork, ledger: Mapping[str, Any], contract_status: str, last: int, tip: Check
) -> list[Check]:
    """Every check of one submission: `replayed` (the rows its chain logs make), `ledger` (the
    submission detail as the ledger API serves it, as plain dicts), `contract_status` (getWork's
    status at block `last`, lower case) and `tip` (`check_chain_tip`)."""
    submission = ledger["submission"]
    checks = [
        tip,
        check_submission(replayed.submission, submission),
        check_status(replayed.submission, submission, replayed.status_logs),
        check_contract_status(contract_status, submission["status"], last),
    ]
    for name, field_, listing, key in ROW_CHECKS:
        checks.append(check_rows(name, listing, key, getattr(replayed, field_), ledger[field_]))
    return checks
