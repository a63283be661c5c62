"""`proofpool ledger`: the public contribution ledger for auditors, over the backend's HTTP API.

Reads only, no key needed. Tables for people (long hashes shortened, amounts in POOL), exact
values with `--json` or `--csv`; `--all` follows cursors to the last page.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.units import DECIMALS
from proofpool.infra.config import get_settings
from proofpool.infra.http.ledger_client import LedgerClient, LedgerRefused

# LedgerClient and LedgerRefused live in proofpool.infra.http.ledger_client (provider status reads the ledger
# too); they stay importable from here, where auditors' scripts and tests have always found them.
__all__ = ["LedgerClient", "LedgerRefused", "app", "format_tokens", "render_table"]

app = typer.Typer(no_args_is_help=True)

# Columns of the table for people; --json and --csv print every field, exactly.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "providers": ("address", "active_stake", "unbonding", "slashed_total", "compute_units", "block_number"),
    "nodes": ("address", "provider", "compute_units", "attested", "active", "block_number"),
    "pools": ("pool_id", "status", "manager", "reward_per_unit", "validator_fee", "slash_amount", "budget",
              "block_number"),
    "submissions": ("pool_id", "work_key", "node", "status", "work_units", "submitted_at", "block_number", "tx_hash"),
    "verdicts": ("pool_id", "work_key", "verdict", "reason", "validator", "block_number", "tx_hash"),
    "slashes": ("pool_id", "work_key", "provider", "amount", "validator_share", "treasury_share", "block_number"),
    "rewards": ("account", "kind", "amount", "pool_id", "work_key", "block_number", "tx_hash"),
    "validators": ("address", "active", "block_number", "tx_hash"),
    "checkpoints": ("pool_id", "version", "manifest_sha256", "uri", "block_number", "tx_hash"),
}  # fmt: skip

AMOUNT_FIELDS = frozenset(
    {
        "active_stake",
        "unbonding",
        "slashed_total",
        "reward_per_unit",
        "validator_fee",
        "slash_amount",
        "budget",
        "validator_share",
        "treasury_share",
        "amount",
    }
)


BackendOption = Annotated[
    str | None,
    typer.Option("--backend-url", help="Backend base URL. Default: $PROOFPOOL_BACKEND_URL or http://127.0.0.1:8000."),
]
LimitOption = Annotated[int, typer.Option("--limit", min=1, max=1000, help="Rows per page (1..1000).")]
AllOption = Annotated[bool, typer.Option("--all", help="Follow cursors and print every page.")]
CursorOption = Annotated[str | None, typer.Option("--cursor", help="Start after this cursor (from a previous page).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the page(s) as JSON (exact values).")]
CsvOption = Annotated[bool, typer.Option("--csv", help="Print CSV with one header row (exact values).")]
PoolIdOption = Annotated[int | None, typer.Option("--pool-id", min=0, help="Only this pool.")]


def _address_option(help_text: str) -> Any:
    return typer.Option(None, help=help_text)


class SubmissionStatus(StrEnum):
    pending = "pending"
    accepted = "accepted"
    rejected = "rejected"
    invalid = "invalid"
    finalized = "finalized"
    forfeited = "forfeited"
    expired = "expired"


class PoolStatus(StrEnum):
    created = "created"
    active = "active"
    closed = "closed"


class Verdict(StrEnum):
    accepted = "accepted"
    invalid = "invalid"


class RewardKind(StrEnum):
    provider_reward = "provider_reward"
    validator_fee = "validator_fee"
    slash_share = "slash_share"
    withdrawal = "withdrawal"


@dataclass(frozen=True)
class Paging:
    """The options every list command shares."""

    limit: int
    follow: bool
    cursor: str | None
    as_json: bool
    as_csv: bool
    backend_url: str | None


def run_listing(resource: str, filters: dict[str, Any], paging: Paging) -> None:
    """Fetch and render one listing (the body of every list command)."""
    if paging.as_json and paging.as_csv:
        raise ProofpoolError("choose one of --json and --csv")
    client = LedgerClient(paging.backend_url or get_settings().backend_url)
    params = {**filters, "limit": paging.limit, "cursor": paging.cursor}
    try:
        if paging.as_csv:
            _print_csv(client.csv_pages(resource, params, paging.follow), paging.follow)
            return
        items: list[dict[str, Any]] = []
        next_cursor = None
        for page in client.pages(resource, params, paging.follow):
            items += page["items"]
            next_cursor = page["next_cursor"]
    finally:
        client.close()
    if paging.as_json:
        typer.echo(json.dumps({"items": items, "next_cursor": next_cursor}, indent=2))
        return
    Console().print(render_table(resource, items))
    if next_cursor:
        Console(stderr=True).print(f"more rows: add --cursor {next_cursor} (or --all)")


def _print_csv(pages: Iterator[tuple[str, str | None]], follow: bool) -> None:
    last_cursor = None
    for number, (text, cursor) in enumerate(pages):
        rows = text.partition("\n")[2]
        sys.stdout.write(text if number == 0 else rows)  # one header row for the whole output
        last_cursor = cursor
    sys.stdout.flush()
    if last_cursor and not follow:
        Console(stderr=True).print(f"more rows: add --cursor {last_cursor} (or --all)")


def render_table(resource: str, items: list[dict[str, Any]]) -> Table:
    """A rich table of the main columns: hashes and addresses shortened, amounts in POOL."""
    table = Table(title=f"{resource} ({len(items)} rows)", title_justify="left")
    columns = [c for c in TABLE_COLUMNS[resource] if c in items[0]] if items else []
    for column in columns:
        table.add_column(column, justify="right" if column in AMOUNT_FIELDS else "left", overflow="fold")
    for item in items:
        table.add_row(*(_cell(column, item[column]) for column in columns))
    return table


def _cell(column: str, value: Any) -> str:
    if value is None:
        return ""
    if column in AMOUNT_FIELDS:
        return format_tokens(int(value))
    if isinstance(value, str) and value.startswith("0x") and len(value) in (42, 66):
        return f"{value[:8]}…{value[-4:]}"
    return str(value)


def format_tokens(units: int) -> str:
    """Base units -> POOL, exactly (no floating point, any uint256)."""
    whole, fraction = divmod(units, 10**DECIMALS)
    digits = f"{fraction:0{DECIMALS}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


@app.command()
def providers(
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Registered providers: stake, unbonding, slashed total, compute units."""
    run_listing("providers", {}, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


@app.command()
def nodes(
    provider: str | None = _address_option("Only this provider's nodes."),
    active: bool | None = typer.Option(None, "--active/--removed", help="Only registered or only removed nodes."),
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Registered nodes: provider, compute units, attestation."""
    filters = {"provider": provider, "active": _flag(active)}
    run_listing("nodes", filters, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


@app.command()
def pools(
    status: PoolStatus | None = typer.Option(None, help="Only pools in this status."),
    creator: str | None = _address_option("Only pools created by this account."),
    manager: str | None = _address_option("Only pools managed by this key."),
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Pools: terms (reward per unit, validator fee, slash amount, dispute window) and budget."""
    filters = {"status": status, "creator": creator, "manager": manager}
    run_listing("pools", filters, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


@app.command()
def submissions(
    pool_id: PoolIdOption = None,
    provider: str | None = _address_option("Only work of this provider's nodes."),
    node: str | None = _address_option("Only this node's work."),
    status: SubmissionStatus | None = typer.Option(None, help="Only submissions in this status."),
    since: str | None = typer.Option(None, help="Submitted at or after (ISO 8601 or Unix seconds; UTC if no zone)."),
    until: str | None = typer.Option(None, help="Submitted before (exclusive)."),
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Submitted work in submission order, with its status and the block/tx of its last status change."""
    filters = {"pool_id": pool_id, "provider": provider, "node": node, "status": status, "since": since, "until": until}
    run_listing("submissions", filters, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


@app.command()
def submission(
    pool_id: int = typer.Argument(..., min=0, help="Pool id."),
    work_key: str = typer.Argument(..., help="Work key: sha256 of the rollout file, 0x-hex."),
    as_json: JsonOption = False,
    backend_url: BackendOption = None,
) -> None:
    """One submission with its verdicts (reason codes), slash and the credits paid for it."""
    client = LedgerClient(backend_url or get_settings().backend_url)
    try:
        detail = client.get(f"submissions/{pool_id}/{work_key}", {}).json()
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps(detail, indent=2))
        return
    console = Console()
    console.print(render_table("submissions", [detail["submission"]]))
    for part in ("verdicts", "slashes", "rewards"):
        if detail[part]:
            console.print(render_table(part, detail[part]))


@app.command()
def verdicts(
    pool_id: PoolIdOption = None,
    validator: str | None = _address_option("Only this validator's verdicts."),
    verdict: Verdict | None = typer.Option(None, help="Only accepted or only invalid verdicts."),
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Validator verdicts in chain order; invalid ones with their reason code."""
    filters = {"pool_id": pool_id, "validator": validator, "verdict": verdict}
    run_listing("verdicts", filters, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


@app.command()
def slashes(
    pool_id: PoolIdOption = None,
    provider: str | None = _address_option("Only slashes of this provider."),
    validator: str | None = _address_option("Only slashes reported by this validator."),
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Stake slashed for invalid work and its split between validator and treasury."""
    filters = {"pool_id": pool_id, "provider": provider, "validator": validator}
    run_listing("slashes", filters, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


@app.command()
def rewards(
    account: str | None = _address_option("Only this account's credits and withdrawals."),
    pool_id: PoolIdOption = None,
    kind: RewardKind | None = typer.Option(None, help="Only this kind of entry."),
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Credits (provider rewards, validator fees, slash shares) and withdrawals in chain order."""
    filters = {"account": account, "pool_id": pool_id, "kind": kind}
    run_listing("rewards", filters, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


@app.command()
def validators(
    active: bool | None = typer.Option(None, "--active/--revoked", help="Only current or only revoked validators."),
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Accounts granted (or revoked) the validator role."""
    run_listing("validators", {"active": _flag(active)}, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


@app.command()
def checkpoints(
    pool_id: PoolIdOption = None,
    limit: LimitOption = 100,
    all_pages: AllOption = False,
    cursor: CursorOption = None,
    as_json: JsonOption = False,
    as_csv: CsvOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Published checkpoints: version, manifest sha256, URI."""
    run_listing("checkpoints", {"pool_id": pool_id}, Paging(limit, all_pages, cursor, as_json, as_csv, backend_url))


def _flag(value: bool | None) -> str | None:
    return None if value is None else str(value).lower()


VERIFY_MATCH, VERIFY_MISMATCH, VERIFY_FAILED = 0, 1, 2


@app.command()
def verify(
    database_url: Annotated[
        str | None, typer.Option("--database-url", help="PostgreSQL URL of the ledger. Default: $DATABASE_URL.")
    ] = None,
    rpc_url: Annotated[
        str | None, typer.Option("--rpc-url", help="JSON-RPC endpoint. Default: $PROOFPOOL_RPC_URL.")
    ] = None,
    deployments_dir: Annotated[
        Path | None,
        typer.Option("--deployments-dir", help="Address books folder. Default: $PROOFPOOL_DEPLOYMENTS_DIR."),
    ] = None,
    batch_blocks: Annotated[
        int | None, typer.Option("--batch-blocks", min=1, help="Blocks per eth_getLogs range. Default: settings.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Differences listed per table (all are counted).")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON (exact values).")] = False,
) -> None:
    """Rebuild the ledger from chain events alone and diff it against PostgreSQL: the chain is
    indexed into a scratch database `<dbname>_verify_<random>` (always dropped) up to the block the
    database's indexer has reached, then the raw events and every projection (providers, nodes,
    pools, memberships, submissions, verdicts, slashes, rewards, checkpoints, validators) are
    compared row by row by key. Ids, wall-clock times, the outbox and off-chain tables are ignored.

    Exit codes: 0 the database matches the chain; 1 differences (listed per table, with counts);
    2 could not verify (chain or database unreachable, wrong chain, schema not at head).
    See docs/ledger.md, "Verifying the ledger against the chain".
    """
    from proofpool.backend.indexer.ledger_diff import render_text
    from proofpool.backend.indexer.verify import verify_ledger

    previous = signal.signal(signal.SIGTERM, _interrupt)  # a supervisor's stop still drops the scratch database
    try:
        diff = verify_ledger(
            database_url,
            rpc_url,
            deployments_dir,
            batch_blocks=batch_blocks,
            limit=limit,
            progress=_VerifyProgress(Console(stderr=True)),
        )
    except ProofpoolError as exc:
        Console(stderr=True).print(f"[red]error:[/red] cannot verify the ledger: {escape(str(exc))}")
        raise typer.Exit(VERIFY_FAILED) from exc
    finally:
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        typer.echo(json.dumps(diff.to_json(), indent=2))
    else:
        typer.echo(render_text(diff))
    raise typer.Exit(VERIFY_MATCH if diff.ok else VERIFY_MISMATCH)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


class _VerifyProgress:
    """'rebuilt N/M blocks' on stderr, at most once a second and once at the end."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.shown = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.shown < 1.0:
            return
        self.shown = now
        percent = f" ({100 * done // total}%)" if total else ""
        self.console.print(f"rebuilt {done}/{total} blocks{percent}", highlight=False)
