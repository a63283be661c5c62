"""Which verdicts a submission's evidence check looks at, and which transaction carries each one's
commitment: pure, from the ledger's verdict rows and the submission's chain logs.

The ledger's verdicts are `accepted` (WorkAttested: its own transaction, an attestWork call) and
`invalid` (WorkInvalidated: in the transaction of the validator's last WorkRejected before it, an
invalidateWork call; the same transaction when the pool has no challenge window, else the
rejection's, since executeRejection carries no commitment). The chain adds the rejections no
invalid verdict carried out (`rejected`: waiting for their window, or overturned) and the contests
(`contest`, whose document sits beside the contested rejection's block).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proofpool.backend.indexer.records import IndexedEvent

from proofpool.infra.chain.bindings import reason_text

VerdictKind = Literal["accepted", "invalid", "rejected", "contest"]


@dataclass(frozen=True)
class Target:
    """One verdict whose evidence to check, and where its commitment is."""

    verdict: VerdictKind
    validator: str
    reason: str | None
    block_number: int
    tx_hash: str
    log_index: int
    commitment_tx: str | None
    """The transaction whose calldata commits to the evidence; None when the chain shows none."""
    review_of_block: int | None = None
    """Contest: the block of the rejection contested. Accepted: of the rejection this validator
    contested before attesting (its contest document may be the attestation's)."""
    note: str | None = None
    """Why there is no commitment transaction."""


def _before(
    events: Sequence[IndexedEvent], name: str, position: tuple[int, int], validator: str | None = None
) -> IndexedEvent | None:
    """The last `name` log at or before `position` (by `validator` when given)."""
    found = None
    for event in events:
        if event.position > position:
            break
        if event.name == name and (validator is None or event.args.get("validator") == validator):
            found = event
    return found


def hex_of(raw: bytes) -> str:
    """0x-hex, as the API writes hashes."""
    return "0x" + raw.hex()


def verdict_targets(verdicts: Sequence[Mapping[str, Any]], events: Sequence[IndexedEvent]) -> list[Target]:
    """The verdicts to check: the ledger's `verdicts` (rows in the API's shape) and, from the
    submission's chain `events` (in chain order), the rejections no invalid verdict carried out and
    the contests; in chain order."""
    targets: list[Target] = []
    used: set[tuple[int, int]] = set()
    for row in verdicts:
        position, validator = (row["block_number"], row["log_index"]), row["validator"]
        common = {
            "verdict": row["verdict"],
            "validator": validator,
            "reason": row["reason"],
            "block_number": row["block_number"],
            "tx_hash": row["tx_hash"],
            "log_index": row["log_index"],
        }
        if row["verdict"] == "accepted":
            contest = _before(events, "RejectionContested", position, validator)
            rejected = None if contest is None else _before(events, "WorkRejected", contest.position)
            review = None if rejected is None else rejected.block_number
            targets.append(Target(**common, commitment_tx=row["tx_hash"], review_of_block=review))
            continue
        rejection = _before(events, "WorkRejected", position, validator)
        if rejection is None:
            note = f"no WorkRejected log of {validator} precedes this verdict on the chain"
            targets.append(Target(**common, commitment_tx=None, note=note))
            continue
        used.add(rejection.position)
        targets.append(Target(**common, commitment_tx=hex_of(rejection.tx_hash)))
    for event in events:
        if event.name == "WorkRejected" and event.position not in used:
            reason = reason_text(bytes.fromhex(str(event.args["reason"]).removeprefix("0x")))
            targets.append(_from_log("rejected", event, reason))
        elif event.name == "RejectionContested":
            rejected = _before(events, "WorkRejected", event.position)
            targets.append(_from_log("contest", event, None, None if rejected is None else rejected.block_number))
    return sorted(targets, key=lambda t: (t.block_number, t.log_index))


def _from_log(kind: VerdictKind, event: IndexedEvent, reason: str | None, review_of_block: int | None = None) -> Target:
    return Target(
        verdict=kind,
        validator=event.args["validator"],
        reason=reason,
        block_number=event.block_number,
        tx_hash=hex_of(event.tx_hash),
        log_index=event.log_index,
        commitment_tx=hex_of(event.tx_hash),
        review_of_block=review_of_block,
    )
