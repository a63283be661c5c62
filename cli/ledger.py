"""`proofpool ledger`: the public contribution ledger for auditors, over the backend's HTTP API.

Reads only, no key needed. Tables for people (long hashes shortened, amounts in POOL, as many
columns as fit the terminal, "0 rows" for none), exact values and every column with `--json` or
`--csv`; `--all` follows cursors to the last page; `--newest-first` walks the list backwards.

One list command per listing of `proofpool.core.ledger_listings`, made from its declaration: its
filters become options, its `shown` columns the table. Only the core is imported for that: an
auditor installs the base package, without the backend.
"""

from __future__ import annotations

import inspect
import json
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from proofpool.cli.common import needs_extra
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table

from proofpool.core.errors import ProofpoolError
from proofpool.core.ledger_listings import (
    DEFAULT_PAGE_ROWS,
    LISTINGS,
    MAX_PAGE_ROWS,
    Column,
    Filter,
    Kind,
    Listing,
    Order,
)
from proofpool.infra.chain.units import DECIMALS
from proofpool.infra.config import get_settings
from proofpool.infra.http.ledger_client import LedgerClient, LedgerRefused

# LedgerClient and LedgerRefused live in proofpool.infra.http.ledger_client (provider status reads the ledger
# too); they stay importable from here, where auditors' scripts and tests have always found them.
__all__ = ["LedgerClient", "LedgerRefused", "app", "fit_table", "format_tokens", "print_table", "render_table"]

app = typer.Typer(no_args_is_help=True)

BackendOption = Annotated[
    str | None,
    typer.Option("--backend-url", help="Backend base URL. Default: $PROOFPOOL_BACKEND_URL or http://127.0.0.1:8000."),
]
LimitOption = Annotated[
    int, typer.Option("--limit", min=1, max=MAX_PAGE_ROWS, help=f"Rows per page (1..{MAX_PAGE_ROWS}).")
]
AllOption = Annotated[bool, typer.Option("--all", help="Follow cursors and print every page.")]
CursorOption = Annotated[str | None, typer.Option("--cursor", help="Start after this cursor (from a previous page).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the page(s) as JSON (exact values).")]
CsvOption = Annotated[bool, typer.Option("--csv", help="Print CSV with one header row (exact values).")]
NewestFirstOption = Annotated[
    bool,
    typer.Option(
        "--newest-first", help="Walk the list backwards, newest first (a cursor continues the order it came from)."
    ),
]


@dataclass(frozen=True)
class Paging:
    """The options every list command shares."""

    limit: int
    all_pages: bool
    cursor: str | None
    as_json: bool
    as_csv: bool
    newest_first: bool
    backend_url: str | None


def _parameter(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


PAGING_OPTIONS = (
    _parameter("limit", LimitOption, DEFAULT_PAGE_ROWS),
    _parameter("all_pages", AllOption, False),
    _parameter("cursor", CursorOption, None),
    _parameter("as_json", JsonOption, False),
    _parameter("as_csv", CsvOption, False),
    _parameter("newest_first", NewestFirstOption, False),
    _parameter("backend_url", BackendOption, None),
)
"""The options of every list command after its filters, named as the fields of `Paging`."""


def run_listing(resource: str, filters: dict[str, Any], paging: Paging) -> None:
    """Fetch and render one listing (the body of every list command)."""
    if paging.as_json and paging.as_csv:
        raise ProofpoolError("choose one of --json and --csv")
    client = LedgerClient(paging.backend_url or get_settings().backend_url)
    order = Order.DESC.value if paging.newest_first else None  # None: the API's default, oldest first
    params = {**filters, "limit": paging.limit, "cursor": paging.cursor, "order": order}
    try:
        if paging.as_csv:
            _print_csv(client.csv_pages(resource, params, paging.all_pages), paging.all_pages)
            return
        items: list[dict[str, Any]] = []
        next_cursor = None
        for page in client.pages(resource, params, paging.all_pages):
            items += page["items"]
            next_cursor = page["next_cursor"]
    finally:
        client.close()
    if paging.as_json:
        typer.echo(json.dumps({"items": items, "next_cursor": next_cursor}, indent=2))
        return
    print_table(Console(), resource, items)
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


WRAPPING_KINDS = frozenset({Kind.TEXT, Kind.TIMESTAMP})
"""Kinds whose cells may wrap onto more lines (at spaces); every other cell is one token kept whole."""


def print_table(console: Console, resource: str, items: list[dict[str, Any]]) -> None:
    """The rows as a table that fits the console's width, or "<resource> (0 rows)" for none.

    Columns that do not fit are left out from the right of the listing's `shown` and named on
    stderr, rather than cropped: an auditor must never read a cut hash, amount or header."""
    if not items:
        console.print(f"{resource} (0 rows)", highlight=False)
        return
    table, left_out = fit_table(console, resource, items)
    console.print(table)
    if left_out:
        Console(stderr=True).print(
            f"left out to fit {console.width} columns: {', '.join(left_out)} (a wider terminal shows them; "
            "--json and --csv have every column)",
            highlight=False,
            soft_wrap=True,
        )


def fit_table(console: Console, resource: str, items: list[dict[str, Any]]) -> tuple[Table, list[str]]:
    """`render_table` of as many leading shown columns as fit `console.width` (at least one), and
    the names of the columns left out."""
    columns = shown_columns(resource, items)
    left_out: list[str] = []
    while True:
        table = render_table(resource, items, columns)
        if len(columns) <= 1 or _narrowest(console, table) <= console.width:
            return table, left_out
        left_out.insert(0, columns.pop())


def _narrowest(console: Console, table: Table) -> int:
    """The fewest characters `table` fits in with every header and token whole (measured without
    the console's own width as a cap, which rich would otherwise clamp the answer to)."""
    return Measurement.get(console, console.options.update_width(10_000), table).minimum


def shown_columns(resource: str, items: list[dict[str, Any]]) -> list[str]:
    """The listing's `shown` columns that the rows hold, in order."""
    return [name for name in LISTINGS[resource].shown if name in items[0]] if items else []


def render_table(resource: str, items: list[dict[str, Any]], columns: list[str] | None = None) -> Table:
    """A rich table of the listing's shown columns (or of `columns`): hashes and addresses
    shortened, amounts in POOL, times as UTC date and time.

    A column is never narrower than its header (never cut), a cell of one token is never wrapped:
    whether the table fits a width is `fit_table`'s question."""
    listing = LISTINGS[resource]
    if columns is None:
        columns = shown_columns(resource, items)
    table = Table(
        title=f"{resource} ({len(items)} rows)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    declared = [listing.column(name) for name in columns]
    for column in declared:
        table.add_column(
            column.name,
            justify="right" if column.kind is Kind.AMOUNT else "left",
            min_width=len(column.name),
            no_wrap=column.kind not in WRAPPING_KINDS,
            overflow="fold",
        )
    for item in items:
        table.add_row(*(_cell(column, item[column.name]) for column in declared))
    return table


def _cell(column: Column, value: Any) -> str:
    if column.kind is Kind.FILES:  # the file count: a bundle's files, or the one file of a submitWork
        return str(len(value)) if value is not None else "1"
    if value is None:
        return ""
    if column.kind is Kind.AMOUNT:
        return format_tokens(int(value))
    if column.kind in (Kind.ADDRESS, Kind.HASH):
        return f"{value[:8]}…{value[-4:]}"
    if column.kind is Kind.TIMESTAMP:
        return _utc_time(value)
    if column.kind is Kind.FLOAT:  # a trainer's figure: six significant digits (--json/--csv give all)
        return f"{value:.6g}"
    return str(value)


def _utc_time(value: str) -> str:
    """An ISO 8601 time as `YYYY-MM-DD HH:MM:SS` in UTC: two words, so the column may wrap it."""
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def format_tokens(units: int) -> str:
    """Base units -> POOL, exactly (no floating point, any uint256)."""
    whole, fraction = divmod(units, 10**DECIMALS)
    digits = f"{fraction:0{DECIMALS}d}".rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def _filter_option(listing: Listing, filter_: Filter) -> inspect.Parameter:
    """The option of one filter; its value goes to the API as typed, which parses and checks it."""
    column = listing.filter_column(filter_)
    if column.kind is Kind.BOOL:
        flags = f"--{filter_.name.replace('_', '-')}/--{filter_.false_flag}"
        annotation: Any = Annotated[bool | None, typer.Option(flags, help=filter_.doc)]
    elif column.kind is Kind.ENUM:
        choices = StrEnum(filter_.name, [(value, value) for value in column.values])
        annotation = Annotated[choices | None, typer.Option(help=filter_.doc)]
    elif column.kind is Kind.INT:
        annotation = Annotated[int | None, typer.Option(min=0, help=filter_.doc)]
    else:  # addresses, hashes and times
        annotation = Annotated[str | None, typer.Option(help=filter_.doc)]
    return _parameter(filter_.name, annotation, None)


def _add_list_command(listing: Listing) -> None:
    """`proofpool ledger <name>`: one option per filter, then the paging options."""

    def command(**options: Any) -> None:
        paging = Paging(**{option.name: options.pop(option.name) for option in PAGING_OPTIONS})
        run_listing(listing.name, options, paging)

    # typer reads the options from the signature.
    command.__signature__ = inspect.Signature(
        [*(_filter_option(listing, filter_) for filter_ in listing.filters), *PAGING_OPTIONS]
    )
    app.command(name=listing.name, help=listing.doc)(command)


for _listing in LISTINGS.values():
    _add_list_command(_listing)


@app.command()
def submission(
    pool_id: int = typer.Argument(..., min=0, help="Pool id."),
    work_key: str = typer.Argument(..., help="Work key: sha256 of the rollout file or a bundle's key, 0x-hex."),
    as_json: JsonOption = False,
    backend_url: BackendOption = None,
) -> None:
    """One submission with its verdicts (reason codes), slash and the credits paid for it, and a
    bundle's files."""
    client = LedgerClient(backend_url or get_settings().backend_url)
    try:
        detail = client.get(f"submissions/{pool_id}/{work_key}", {}).json()
    finally:
        client.close()
    if as_json:
        typer.echo(json.dumps(detail, indent=2))
        return
    console = Console()
    print_table(console, "submissions", [detail["submission"]])
    files = detail["submission"].get("files")
    if files:
        print_files(console, files)
    for part in ("verdicts", "slashes", "rewards"):
        if detail[part]:
            print_table(console, part, detail[part])


def _submission_check(path: str, backend_url: str | None) -> dict[str, Any]:
    """GET one of a submission's check routes; a backend that cannot reach the chain or the store
    (503) exits 2, like `ledger verify` when it could not verify; any other refusal is an error."""
    client = LedgerClient(backend_url or get_settings().backend_url)
    try:
        return client.get(path, {}).json()
    except LedgerRefused as exc:
        if exc.status == 503:
            Console(stderr=True).print(f"[red]error:[/red] could not check: {escape(str(exc.detail))}")
            raise typer.Exit(2) from None
        raise
    finally:
        client.close()


@app.command("verify-submission")
def verify_submission(
    pool_id: int = typer.Argument(..., min=0, help="Pool id."),
    work_key: str = typer.Argument(..., help="Work key: sha256 of the rollout file or a bundle's key, 0x-hex."),
    as_json: JsonOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Check one submission's ledger rows against the chain, as the explorer's "Verify against the
    chain" button does: its logs and the contract's status up to the block the indexer reached
    (`/v1/ledger/submissions/{pool}/{key}/verify`, docs/ledger.md). Exit 0 when every check
    passes, 1 when one fails, 2 when the backend could not read the chain."""
    result = _submission_check(f"submissions/{pool_id}/{work_key}/verify", backend_url)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        console = Console(soft_wrap=True)  # a long work key or detail wraps in the terminal, not mid-line here
        console.print(
            f"submission {escape(work_key)} of pool {pool_id}: {'OK' if result['ok'] else 'FAILED'} "
            f"(chain {result['chain_id']}, blocks {result['from_block']}..{result['to_block']}, "
            f"{result['logs']} logs)"
        )
        for check in result["checks"]:
            mark = "[green]ok[/green]  " if check["ok"] else "[red]FAIL[/red]"
            console.print(f"  {mark} {check['name']}: {escape(check['detail'])}")
    if not result["ok"]:
        raise typer.Exit(1)


@app.command()
def evidence(
    pool_id: int = typer.Argument(..., min=0, help="Pool id."),
    work_key: str = typer.Argument(..., help="Work key: sha256 of the rollout file or a bundle's key, 0x-hex."),
    as_json: JsonOption = False,
    backend_url: BackendOption = None,
) -> None:
    """Each verdict on one submission with its evidence document, checked against the commitment
    its transaction carries (`/v1/ledger/submissions/{pool}/{key}/evidence`, docs/ledger.md).
    --json prints the documents too. Exit 0 unless a document does not match its commitment (1)
    or the backend could not read the chain or the store (2)."""
    result = _submission_check(f"submissions/{pool_id}/{work_key}/evidence", backend_url)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
    else:
        console = Console(soft_wrap=True)  # a long work key or detail wraps in the terminal, not mid-line here
        if not result["verdicts"]:
            console.print("no verdict yet")
        for row in result["verdicts"]:
            reason = f" ({row['reason']})" if row["reason"] else ""
            console.print(
                f"{row['verdict']}{escape(reason)} by {row['validator']} in block {row['block_number']}: "
                f"[bold]{row['status']}[/bold] - {escape(row['detail'])}"
            )
    if any(row["matches"] is False for row in result["verdicts"]):
        raise typer.Exit(1)


def print_files(console: Console, files: list[dict[str, Any]]) -> None:
    """A bundle's files, in bundle order, with their full work keys (the keys the files are stored
    under, which an auditor fetches them by: not shortened)."""
    table = Table(
        title=f"files of the bundle ({len(files)})",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column("#", justify="right")
    table.add_column("work_key", no_wrap=True, overflow="fold")
    table.add_column("work_units", justify="right")
    for index, file in enumerate(files):
        table.add_row(str(index), file["work_key"], str(file["work_units"]))
    console.print(table)


VERIFY_MATCH, VERIFY_MISMATCH, VERIFY_FAILED = 0, 1, 2


@app.command()
@needs_extra("backend")
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


@app.command("verify-round")
@needs_extra("trainer", "proofpool ledger verify-round")
def verify_round_command(
    pool_id: Annotated[int, typer.Argument(min=1, metavar="POOL", help="Training pool id.")],
    version: Annotated[
        int, typer.Argument(min=1, metavar="VERSION", help="Checkpoint version to recompute (made by round VERSION-1).")
    ],
    rpc_url: Annotated[
        str | None, typer.Option("--rpc-url", help="JSON-RPC endpoint. Default: $PROOFPOOL_RPC_URL.")
    ] = None,
    cache_dir: Annotated[
        Path | None,
        typer.Option("--cache-dir", help="Verified checkpoints. Default: $PROOFPOOL_CHECKPOINT_CACHE_DIR."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Recompute checkpoint VERSION of a training pool from the chain and the object store alone.

    The checkpoint's manifest must be the one anchored on-chain; its round record lists the work
    keys averaged. Each must be an attested on-chain submission of the pool for model version
    VERSION-1 by the node the record names, and its file in the store must hash to it. The outer
    step is then recomputed from checkpoint VERSION-1 and those files (the aggregator's own
    code) and compared with the published weights and momentum, bit for bit.

    Exit codes: 0 recomputed bitwise; 1 a mismatch (max abs difference per tensor) or a check of
    the round that fails; 2 could not verify (chain or store unreachable, checkpoint not fetched).
    """
    from proofpool.infra.chain.client import ChainClient
    from proofpool.infra.storage import ObjectStore
    from proofpool.training.verify_round import RoundRefuted, verify_round

    settings = get_settings()
    err = Console(stderr=True)
    try:
        result = verify_round(
            ChainClient.from_settings(None, rpc_url=rpc_url),
            ObjectStore.from_settings(settings),
            pool_id,
            version,
            (cache_dir or settings.checkpoint_cache_dir).expanduser(),
            relays=settings.checkpoint_relays,
            max_file_bytes=settings.upload_max_bytes,
            max_checkpoint_bytes=settings.checkpoint_max_bytes,
        )
    except RoundRefuted as exc:
        err.print(f"[red]REFUTED:[/red] checkpoint {version} of pool {pool_id}: {escape(str(exc))}")
        raise typer.Exit(VERIFY_MISMATCH) from exc
    except ProofpoolError as exc:
        err.print(f"[red]error:[/red] cannot verify the round: {escape(str(exc))}")
        raise typer.Exit(VERIFY_FAILED) from exc
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
    else:
        typer.echo(result.line())
        for diff in result.diffs:
            typer.echo(f"  {diff.kind} {diff.name}: max abs diff {diff.max_abs_diff:.6g}")
        if result.record_diff is not None:
            typer.echo(f"  round record: {result.record_diff}")
    raise typer.Exit(VERIFY_MATCH if result.ok else VERIFY_MISMATCH)


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
