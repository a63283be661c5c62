"""The verdict of `proofpool ledger verify` as data: two key-ordered row streams merged into
differences (`diff_rows`, pure), per table and in total, and rendered for people and as JSON.

Kept apart from the rebuild (`proofpool.backend.indexer.verify`), which needs a chain and two databases:
everything here is tested without either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal

DEFAULT_LIMIT = 20
"""Differences listed per table (all are counted)."""

Kind = Literal["missing", "extra", "changed"]


# --- the result ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One disagreement. `missing`: the chain implies the row, the database lacks it (`chain` is
    the row). `extra`: the database has a row the chain does not imply (`database` is the row).
    `changed`: both have the row and `column` differs."""

    table: str
    key: dict[str, Any]
    kind: Kind
    column: str | None = None
    chain: Any = None
    database: Any = None

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "kind": self.kind,
            "key": json_value(self.key),
            "column": self.column,
            "chain": json_value(self.chain),
            "database": json_value(self.database),
        }


@dataclass
class TableDiff:
    """One table compared: row counts on both sides, counts of each kind of difference, and the
    first `limit` differences (the counts are always complete)."""

    table: str
    key_columns: tuple[str, ...]
    chain_rows: int = 0
    database_rows: int = 0
    missing: int = 0
    extra: int = 0
    changed_rows: int = 0
    changed_cells: int = 0
    differences: list[Difference] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Differences in this table (a changed row counts once per differing column)."""
        return self.missing + self.extra + self.changed_cells

    @property
    def ok(self) -> bool:
        return self.total == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "key": list(self.key_columns),
            "chain_rows": self.chain_rows,
            "database_rows": self.database_rows,
            "missing": self.missing,
            "extra": self.extra,
            "changed_rows": self.changed_rows,
            "changed_cells": self.changed_cells,
            "listed": len(self.differences),
            "differences": [d.to_json() for d in self.differences],
        }


@dataclass
class LedgerDiff:
    """The verdict of one verification: the ledger matches the chain when `ok`."""

    chain_id: int
    database: str
    from_block: int
    to_block: int
    chain_head: int
    tables: list[TableDiff] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Disagreements that are not about one row (e.g. a cursor beyond the chain's head)."""
    seconds: float = 0.0

    @property
    def differences(self) -> int:
        return sum(t.total for t in self.tables)

    @property
    def ok(self) -> bool:
        return not self.problems and self.differences == 0

    @property
    def events(self) -> int:
        """Raw events of the rebuild: the chain's logs of our contracts in the range."""
        return next((t.chain_rows for t in self.tables if t.table == "chain_events"), 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "chain_id": self.chain_id,
            "database": self.database,
            "from_block": self.from_block,
            "to_block": self.to_block,
            "chain_head": self.chain_head,
            "events": self.events,
            "differences": self.differences,
            "problems": list(self.problems),
            "seconds": round(self.seconds, 3),
            "tables": {t.table: t.to_json() for t in self.tables},
        }


# --- the pure part: merging two key-ordered row streams -----------------------------------------


def _order(key: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    """Python order of a key as PostgreSQL sorts it (ASC, NULLS LAST; text in the "C" collation)."""
    return tuple((value is None, 0 if value is None else value) for value in key)


def _ordered(rows: Iterable[Sequence[Any]], key_index: Sequence[int], side: str) -> Iterator[tuple[Any, ...]]:
    """The rows, checked to come in strictly ascending key order (the merge relies on it)."""
    previous: tuple[Any, ...] | None = None
    for row in rows:
        current = _order(tuple(row[i] for i in key_index))
        if previous is not None and current <= previous:
            raise ValueError(f"{side} rows are not in strictly ascending key order at {current}")
        previous = current
        yield tuple(row)


def diff_rows(
    table: str,
    key_columns: Sequence[str],
    columns: Sequence[str],
    chain_rows: Iterable[Sequence[Any]],
    db_rows: Iterable[Sequence[Any]],
    limit: int = DEFAULT_LIMIT,
) -> TableDiff:
    """Compare the rows the chain implies with the rows the database holds, both given as tuples
    in `columns` order and sorted by `key_columns` (strictly ascending, as `_order` sorts).

    A merge of two sorted streams: memory stays flat however large the ledger. Keeps the first
    `limit` differences; counts all of them."""
    key_index = [columns.index(c) for c in key_columns]
    result = TableDiff(table=table, key_columns=tuple(key_columns))
    chain_iter, db_iter = _ordered(chain_rows, key_index, "chain"), _ordered(db_rows, key_index, "database")
    chain_row, db_row = next(chain_iter, None), next(db_iter, None)
    while chain_row is not None or db_row is not None:
        chain_key = _order(tuple(chain_row[i] for i in key_index)) if chain_row is not None else None
        db_key = _order(tuple(db_row[i] for i in key_index)) if db_row is not None else None
        if db_key is None or (chain_key is not None and chain_key < db_key):
            assert chain_row is not None
            _missing(result, columns, key_index, chain_row, limit)
            chain_row = next(chain_iter, None)
        elif chain_key is None or db_key < chain_key:
            assert db_row is not None
            _extra(result, columns, key_index, db_row, limit)
            db_row = next(db_iter, None)
        else:
            assert chain_row is not None and db_row is not None
            _changed(result, columns, key_index, chain_row, db_row, limit)
            chain_row, db_row = next(chain_iter, None), next(db_iter, None)
    return result


def _key(columns: Sequence[str], key_index: Sequence[int], row: tuple[Any, ...]) -> dict[str, Any]:
    return {columns[i]: row[i] for i in key_index}


def _note(result: TableDiff, difference: Difference, limit: int) -> None:
    if len(result.differences) < limit:
        result.differences.append(difference)


def _missing(
    result: TableDiff, columns: Sequence[str], key_index: Sequence[int], row: tuple[Any, ...], limit: int
) -> None:
    result.chain_rows += 1
    result.missing += 1
    full = dict(zip(columns, row, strict=True))
    _note(result, Difference(result.table, _key(columns, key_index, row), "missing", chain=full), limit)


def _extra(
    result: TableDiff, columns: Sequence[str], key_index: Sequence[int], row: tuple[Any, ...], limit: int
) -> None:
    result.database_rows += 1
    result.extra += 1
    full = dict(zip(columns, row, strict=True))
    _note(result, Difference(result.table, _key(columns, key_index, row), "extra", database=full), limit)


def _changed(
    result: TableDiff,
    columns: Sequence[str],
    key_index: Sequence[int],
    chain_row: tuple[Any, ...],
    db_row: tuple[Any, ...],
    limit: int,
) -> None:
    result.chain_rows += 1
    result.database_rows += 1
    cells = [(c, a, b) for c, a, b in zip(columns, chain_row, db_row, strict=True) if a != b]
    if not cells:
        return
    result.changed_rows += 1
    result.changed_cells += len(cells)
    key = _key(columns, key_index, chain_row)
    for column, chain_value, db_value in cells:
        _note(result, Difference(result.table, key, "changed", column, chain_value, db_value), limit)


# --- rendering ----------------------------------------------------------------------------------


def json_value(value: Any) -> Any:
    """A database value as exact JSON: bytes as 0x-hex, NUMERIC as a decimal string, times ISO."""
    if isinstance(value, bytes | bytearray | memoryview):
        return "0x" + bytes(value).hex()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    return value


def show(value: Any) -> str:
    """A value for people, exact: NULL, quoted text, 0x-hex bytes, compact JSON for jsonb."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict | list):
        return json.dumps(json_value(value), separators=(",", ":"), sort_keys=True)
    return str(json_value(value))


def _show_key(key: Mapping[str, Any]) -> str:
    return ", ".join(f"{column}={show(value)}" for column, value in key.items())


def _line(d: Difference) -> str:
    if d.kind == "missing":
        return f"  missing  {d.table} [{_show_key(d.key)}]: on the chain, not in the database"
    if d.kind == "extra":
        return f"  extra    {d.table} [{_show_key(d.key)}]: in the database, not on the chain"
    return f"  changed  {d.table} [{_show_key(d.key)}] {d.column}: chain {show(d.chain)} != database {show(d.database)}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _table_summary(t: TableDiff) -> str:
    parts = [f"{n} {what}" for n, what in ((t.missing, "missing"), (t.extra, "extra")) if n]
    if t.changed_rows:
        parts.append(f"{_count(t.changed_rows, 'changed row')} ({_count(t.changed_cells, 'column')})")
    return f"{t.table}: {t.chain_rows} rows from the chain, {t.database_rows} in the database; " + ", ".join(parts)


def render_text(diff: LedgerDiff) -> str:
    """The report for people: what was rebuilt, the verdict, and per table its counts and the
    listed differences (table, key, column, chain value vs database value)."""
    lines = [
        f"ledger of {diff.database} (chain {diff.chain_id}) rebuilt from the chain: blocks "
        f"{diff.from_block}..{diff.to_block} (chain head {diff.chain_head}), {diff.events} events, "
        f"{len(diff.tables)} tables compared in {diff.seconds:.1f} s"
    ]
    if diff.ok:
        rows = sum(t.chain_rows for t in diff.tables)
        lines.append(f"OK: the database matches the chain ({rows} rows)")
        return "\n".join(lines)
    bad = [t for t in diff.tables if not t.ok]
    lines.append(
        f"MISMATCH: {diff.differences} differences in {len(bad)} of {len(diff.tables)} tables"
        + (f", {len(diff.problems)} other problems" if diff.problems else "")
    )
    lines += [f"problem: {p}" for p in diff.problems]
    for t in bad:
        lines.append(_table_summary(t))
        lines += [_line(d) for d in t.differences]
        if t.total > len(t.differences):
            lines.append(f"  ... {t.total - len(t.differences)} more in {t.table} (raise --limit to list them)")
    return "\n".join(lines)
