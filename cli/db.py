"""`proofpool db`: create and migrate the PostgreSQL schema (operators)."""

from __future__ import annotations

from typing import Annotated

import typer
from proofpool.cli.common import JsonOption, console, needs_extra, print_json

from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=True)

UrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url", help="PostgreSQL URL. Default: $DATABASE_URL or postgresql://postgres@127.0.0.1/proofpool."
    ),
]


def _url(url: str | None) -> str:
    return url or get_settings().database_url


@app.command()
@needs_extra("backend")
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: UrlOption = None,
) -> None:
    """Create the database if it is missing, then migrate it to REVISION (default: head)."""
    from proofpool.infra import db

    url = _url(database_url)
    if db.ensure_database(url):
        console.print(f"created database {db.database_name(url)}")
    db.upgrade(url, revision)
    console.print(f"database {db.database_name(url)} at revision {db.current(url).revision}")


@app.command()
@needs_extra("backend")
def downgrade(
    revision: Annotated[str, typer.Argument(help="Revision to go back to; `base` drops every proofpool table.")],
    database_url: UrlOption = None,
) -> None:
    """Migrate the database back to REVISION."""
    from proofpool.infra import db

    url = _url(database_url)
    db.downgrade(url, revision)
    console.print(f"database {db.database_name(url)} at revision {db.current(url).revision or 'base'}")


@app.command()
@needs_extra("backend")
def current(database_url: UrlOption = None, json_out: JsonOption = False) -> None:
    """Show the revision the database is at and the newest one available."""
    from proofpool.infra import db

    status = db.current(_url(database_url))
    if json_out:
        print_json({"database": status.name, "revision": status.revision, "head": status.head})
        return
    state = "up to date" if status.revision == status.head else "behind: run `proofpool db upgrade`"
    console.print(f"database {status.name}: revision {status.revision or 'base'} (head {status.head}, {state})")
