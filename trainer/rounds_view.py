"""What the aggregator of a training pool sees of the open round, and when it may close it.

Round v trains from checkpoint v. It opens when checkpoint v was published (the block time of
its `CheckpointPublished`); round 0 opens when the pool started (the block time of its
`PoolStarted`), so every aggregator, restarted or not, agrees on when a round's deadline falls.
Its members are the pool's active members and its candidates the accepted (or finalized) files
of model version v, both from the public ledger, one file per node (a node's second file of a
round is `duplicate_batch` for validators; should two ever be accepted, the first submitted
counts).

`round_decision` is the closing rule, a pure function: close as soon as every active member has
a usable file, or once the deadline has passed with at least `min_contributors` files.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Final, Literal

from eth_utils import event_abi_to_log_topic, to_checksum_address

from proofpool.core.diloco.spec import RoundSpec
from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.artifacts import load_artifact
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint.anchor import LOG_WINDOW
from proofpool.infra.http.ledger_client import LedgerClient

USABLE_STATUSES: Final = ("accepted", "finalized")
"""Ledger statuses of work a validator attested (finalized: attested and past the dispute window)."""

Reason = Literal["all_members", "deadline", "no_files", "waiting", "too_few"]


@dataclass(frozen=True)
class Decision:
    """Whether to close the open round now, and why (or why not)."""

    close: bool
    reason: Reason


def round_decision(
    members: Collection[str], contributors: Collection[str], opened_at: float, now: float, rules: RoundSpec
) -> Decision:
    """The closing rule of a round opened at `opened_at` (Unix seconds), asked at `now`.

    `members` are the pool's active nodes, `contributors` the nodes with a usable accepted file of
    the round (addresses, any case). A round never closes without a file. It closes at once when
    every active member contributed (`all_members`; a pool with no active member waits for the
    deadline instead of closing on an empty condition); otherwise not before
    `opened_at + deadline_seconds` (`waiting`), and then only with at least `min_contributors`
    files (`deadline`, else `too_few`: it keeps waiting for more).
    """
    got = {node.lower() for node in contributors}
    if not got:
        return Decision(False, "no_files")
    active = {node.lower() for node in members}
    if active and active <= got:
        return Decision(True, "all_members")
    if now < opened_at + rules.deadline_seconds:
        return Decision(False, "waiting")
    if len(got) >= rules.min_contributors:
        return Decision(True, "deadline")
    return Decision(False, "too_few")


@dataclass(frozen=True)
class Candidate:
    """An accepted file of the open round, as the ledger lists it."""

    work_key: str
    """Hex sha256 of the file, lower case, no 0x."""
    node: str
    """Checksummed address of the submitting node."""
    position: tuple[int, int]
    """(block, log index) of its `WorkSubmitted`: which of a node's files came first."""


def first_per_node(rows: Iterable[dict]) -> tuple[Candidate, ...]:
    """One candidate per node from ledger submission rows: the first it submitted; sorted by work key."""
    first: dict[str, Candidate] = {}
    for row in rows:
        candidate = Candidate(
            str(row["work_key"]).removeprefix("0x").lower(),
            to_checksum_address(row["node"]),
            (int(row["block_number"]), int(row["log_index"])),
        )
        held = first.get(candidate.node)
        if held is None or candidate.position < held.position:
            first[candidate.node] = candidate
    return tuple(sorted(first.values(), key=lambda c: c.work_key))


def active_members(ledger: LedgerClient, pool_id: int) -> frozenset[str]:
    """Checksummed addresses of the pool's active members (the ledger's memberships)."""
    rows = ledger.items("memberships", {"pool_id": pool_id, "state": "active"})
    return frozenset(to_checksum_address(row["node"]) for row in rows)


def round_candidates(ledger: LedgerClient, pool_id: int, round_: int, opened_at: int) -> tuple[Candidate, ...]:
    """Accepted or finalized files of model version `round_`, one per node (`first_per_node`).

    Only submissions at or after `opened_at` are asked for: work on checkpoint `round_` cannot
    be submitted before it was published, and the listing then stays one round long."""
    rows = [
        row
        for status in USABLE_STATUSES
        for row in ledger.items("submissions", {"pool_id": pool_id, "status": status, "since": int(opened_at)})
        if int(row["model_version"]) == round_
    ]
    return first_per_node(rows)


def chain_now(client: ChainClient) -> float:
    """Now, as the later of the wall clock and the latest block's time: on a chain whose clock was
    moved forward (a devnet's time travel) a deadline counts in chain time, as its publications do."""
    return max(time.time(), float(client.w3.eth.get_block("latest")["timestamp"]))


class PoolNotStarted(ProofpoolError):
    """The pool has no `PoolStarted` event: round 0 has not opened."""


def pool_started_at(client: ChainClient, pool_id: int, *, log_window: int = LOG_WINDOW) -> int:
    """Unix time of the block that started `pool_id` (its `PoolStarted` event), when round 0 opens."""
    topic = "0x" + bytes(event_abi_to_log_topic(_event_abi("PoolStarted"))).hex()
    pool_topic = "0x" + pool_id.to_bytes(32, "big").hex()
    head = client.w3.eth.block_number
    start = client.book.deploy_block
    while start <= head:
        end = min(head, start + log_window - 1)
        logs = client.w3.eth.get_logs(
            {"fromBlock": start, "toBlock": end, "address": client.pool.address, "topics": [topic, pool_topic]}
        )
        for event in client.decoder().decode_logs(logs):
            if event.name == "PoolStarted" and event["poolId"] == pool_id:
                return int(client.w3.eth.get_block(event.block_number)["timestamp"])
        start = end + 1
    raise PoolNotStarted(f"pool {pool_id} has not been started (no PoolStarted event): round 0 is not open")


def _event_abi(name: str) -> dict:
    return next(
        entry
        for entry in load_artifact("ComputePool").abi
        if entry.get("type") == "event" and entry.get("name") == name
    )
