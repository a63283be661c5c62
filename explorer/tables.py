"""A table of ledger rows as a page shows it and as its CSV download serves it, from one value.

A `Table` is rows the API returned plus the columns shown. Each cell carries the raw JSON value
(`data-value`, what the CSV holds), the text people read and its link, so the HTML and the CSV of a
table cannot disagree on rows or columns.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from proofpool.explorer import format as fmt
from proofpool.explorer.links import Href

from proofpool.core.ledger_listings import csv_cell

Row = dict[str, Any]

PAGE_ROWS = 50
"""Rows of a list a page shows at once (one API page); "next page" links continue it."""


class Show(StrEnum):
    """How a column's values are written for people."""

    TEXT = "text"
    COUNT = "count"
    """An integer count, with thousands separators, right-aligned."""
    NUMBER = "number"
    """An id or block number: as is, right-aligned."""
    AMOUNT = "amount"
    """Token base units, in POOL."""
    HASH = "hash"
    """0x-hex, shortened (full in the title)."""
    ADDRESS = "address"
    """An account, shortened (full in the title)."""
    TIME = "time"
    BOOL = "bool"
    FILES = "files"
    """A submission's files: the count (1 for a single-file submission)."""
    FIGURE = "figure"
    """A trainer's figure (a float): six significant digits, the API's value in the title."""


NUMERIC = frozenset({Show.COUNT, Show.NUMBER, Show.AMOUNT, Show.FILES, Show.FIGURE})


@dataclass(frozen=True)
class Col:
    """One shown column: the API field `name`, its header, how it is written and where it links."""

    name: str
    label: str
    show: Show = Show.TEXT
    href: Href | None = None


@dataclass(frozen=True)
class Cell:
    column: str
    value: str
    """The raw JSON value as text, as the API's CSV writes it (`csv_cell`)."""
    text: str
    title: str | None
    href: str | None
    numeric: bool


def cell(column: Col, row: Row) -> Cell:
    value = row.get(column.name)
    text, title = _written(column.show, value)
    href = column.href(row) if column.href is not None and value is not None else None
    return Cell(column.name, csv_cell(value), text, title, href, column.show in NUMERIC)


def _written(show: Show, value: Any) -> tuple[str, str | None]:
    """(text, title) of one value."""
    if show is Show.FILES:
        return ("1" if value is None else str(len(value))), None
    if value is None:
        return "—", None
    if show in (Show.HASH, Show.ADDRESS):
        return fmt.short_hex(value), value
    if show is Show.AMOUNT:
        return fmt.tokens(value), f"{value} base units"
    if show is Show.COUNT:
        return fmt.count(value), None
    if show is Show.TIME:
        return fmt.utc_time(value), value
    if show is Show.BOOL:
        return ("yes" if value else "no"), None
    if show is Show.FIGURE:
        return f"{value:.6g}", str(value)
    return str(value), None


@dataclass(frozen=True)
class Table:
    """Rows of one list as a page shows them (one page of the API's, or a ranked whole list)."""

    name: str
    """Its id on the page: `<name>_cursor` pages it, `?format=csv&table=<name>` downloads it."""
    caption: str
    columns: tuple[Col, ...]
    rows: list[Row]
    next_cursor: str | None = None
    """The API's cursor of the rows after these (None: no more)."""
    empty: str = "No rows."
    anchor: Callable[[Row], str] | None = None
    """A row's element id, for links to the row."""
    position: Callable[[Row], str] | None = None
    """A row's chain position `<block>-<log>` (the live feed orders and resumes by it)."""
    notes: tuple[str, ...] = field(default=())
    """Sentences under the table (what it leaves out, where its numbers come from)."""
    record: bool = False
    """One row shown as a list of label and value (a pool's terms, a provider's stake)."""

    def cells(self, row: Row) -> list[Cell]:
        return [cell(column, row) for column in self.columns]

    def csv(self) -> str:
        """The table as CSV: a header of the API field names, then each row's raw values."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([column.name for column in self.columns])
        for row in self.rows:
            writer.writerow([csv_cell(row.get(column.name)) for column in self.columns])
        return out.getvalue()
