"""Pages as HTML (Jinja2 templates in `templates/`) or, for one table of a page, as CSV.

A page handler names its tables as sources: async functions from the table's cursor (its
`<name>_cursor` query parameter) to a `Table`. `render_page` builds them all, concurrently, for
the HTML; with `?format=csv&table=<name>` it builds only that one and serves its CSV, the same
rows and columns the page shows at that cursor.

Links inside a page are query-only (`?submissions_cursor=...`), so they hold wherever the app is
mounted; links to other pages start with the root path the app is served under (`root`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates
from proofpool.explorer.errors import BadInput
from proofpool.explorer.tables import Cell, Table

TEMPLATES = Path(__file__).resolve().parent / "templates"
STATIC = Path(__file__).resolve().parent / "static"
PAGE_PARAMETERS = frozenset({"format", "table"})
"""Query parameters that choose what a request serves, never carried into a page's links."""

TableSource = Callable[[str | None], Awaitable[Table]]


def root_path(request: Request) -> str:
    """The path the explorer is served under ('' at the root, '/explorer' when mounted there)."""
    return str(request.scope.get("root_path", "")).rstrip("/")


def make_templates() -> Jinja2Templates:
    """The templates, with `root` in every page's context (autoescaping on, as for any .html)."""
    return Jinja2Templates(directory=TEMPLATES, context_processors=[lambda request: {"root": root_path(request)}])


def query_href(request: Request, **changes: str | None) -> str:
    """A link to this page with some query parameters changed (None: removed)."""
    params = {key: value for key, value in request.query_params.items() if key not in PAGE_PARAMETERS}
    for key, value in changes.items():
        if value is None:
            params.pop(key, None)
        else:
            params[key] = value
    return "?" + urlencode(params) if params else "?"


def cursor_of(request: Request, table: str) -> str | None:
    return request.query_params.get(f"{table}_cursor") or None


@dataclass(frozen=True)
class RowView:
    cells: list[Cell]
    anchor: str | None
    position: str | None


@dataclass(frozen=True)
class TableView:
    """A table ready for the template: its cells, its next-page and CSV links."""

    table: Table
    rows: list[RowView]
    next_href: str | None
    csv_href: str


def row_view(table: Table, row: dict[str, Any]) -> RowView:
    return RowView(
        cells=table.cells(row),
        anchor=table.anchor(row) if table.anchor else None,
        position=table.position(row) if table.position else None,
    )


def table_view(request: Request, table: Table) -> TableView:
    cursor_key = f"{table.name}_cursor"
    return TableView(
        table=table,
        rows=[row_view(table, row) for row in table.rows],
        next_href=None if table.next_cursor is None else query_href(request, **{cursor_key: table.next_cursor}),
        csv_href=query_href(request, format="csv", table=table.name, **{cursor_key: cursor_of(request, table.name)}),
    )


def html(request: Request, template: str, context: Mapping[str, Any], status: int = 200) -> HTMLResponse:
    templates: Jinja2Templates = request.app.state.templates
    return templates.TemplateResponse(request, template, dict(context), status_code=status)


async def render_page(
    request: Request, template: str, context: Mapping[str, Any], sources: Mapping[str, TableSource]
) -> Response:
    """The page with its tables, or one table as CSV (`?format=csv&table=<name>`)."""
    shape = request.query_params.get("format", "html")
    if shape == "csv":
        name = request.query_params.get("table", "")
        if name not in sources:
            raise BadInput(f"this page has no table {name!r}; its tables are: {', '.join(sources) or 'none'}")
        table = await sources[name](cursor_of(request, name))
        filename = f"{context.get('slug', 'explorer')}-{name}.csv"
        return Response(
            table.csv(), media_type="text/csv", headers={"Content-Disposition": f'attachment; filename="{filename}"'}
        )
    if shape != "html":
        raise BadInput(f"format must be html or csv, not {shape!r}")
    built = await asyncio.gather(*(source(cursor_of(request, name)) for name, source in sources.items()))
    tables = {table.name: table_view(request, table) for table in built}
    return html(request, template, {**context, "tables": tables})
