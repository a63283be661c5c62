"""The ledger's listings are declared once (proofpool.core.ledger_listings): the SQL, the API and the
CLI each serve exactly what the table says, so adding a column or a listing is one edit."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from functools import cache
from typing import Any

import pytest
import typer
from proofpool.backend.db import ledger as ledger_db
from proofpool.cli import ledger as ledger_cli
from typer.testing import CliRunner

from proofpool.core import ledger_listings
from proofpool.core.errors import ServiceUnavailable
from proofpool.core.ledger_listings import LISTINGS, PAGING_PARAMETERS, Column, Filter, Kind, Listing, Match
from proofpool.infra.config import Settings

UNREACHABLE = "http://127.0.0.1:9"


@cache
def openapi() -> dict[str, Any]:
    from proofpool.backend.app import create_app

    return create_app(Settings()).openapi()


def test_every_listing_declared_in_the_core_is_served():
    declared = {value for value in vars(ledger_listings).values() if isinstance(value, Listing)}
    assert declared == set(LISTINGS.values())
    assert all(name == listing.name for name, listing in LISTINGS.items())


@pytest.mark.parametrize("listing", LISTINGS.values(), ids=LISTINGS)
def test_sql_selects_every_column_and_filters_by_each_filter(listing):
    names = [column.name for column in listing.columns]
    assert [field.name for field in dataclasses.fields(ledger_db.row_type(listing))] == names
    sql = ledger_db.page_sql(listing, frozenset(f.name for f in listing.filters), True)
    select = sql.removeprefix("SELECT ").partition(f" FROM {listing.name}")[0]
    expressions = re.split(r",\s*(?![^()]*\))", select)  # commas outside parentheses
    assert [expression.split()[-1] for expression in expressions] == names  # psycopg fills the row by alias
    for filter_ in listing.filters:
        assert f"%({filter_.name})s" in sql
    assert sql.endswith(f"ORDER BY {', '.join(listing.key)} LIMIT %(limit)s")


@pytest.mark.parametrize("listing", LISTINGS.values(), ids=LISTINGS)
def test_the_api_serves_each_listing_with_its_columns_and_filters(listing):
    schema = openapi()
    operation = schema["paths"][f"/v1/ledger/{listing.name}"]["get"]
    assert operation["description"] == listing.doc
    parameters = {p["name"]: p for p in operation["parameters"]}
    assert set(parameters) == PAGING_PARAMETERS | {f.name for f in listing.filters}
    for filter_ in listing.filters:
        assert parameters[filter_.name]["description"] == filter_.doc
        column = listing.filter_column(filter_)
        if column.kind is Kind.ENUM:
            assert parameters[filter_.name]["schema"]["anyOf"][0]["enum"] == list(column.values)
    page = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    row = schema["components"]["schemas"][page]["properties"]["items"]["items"]["$ref"].rsplit("/", 1)[1]
    assert row == f"{listing.type_name}Row"
    assert schema["components"]["schemas"][row]["required"] == [column.name for column in listing.columns]
    properties = schema["components"]["schemas"][row]["properties"]
    assert {name: p["description"] for name, p in properties.items()} == {c.name: c.doc for c in listing.columns}


@pytest.mark.parametrize("listing", LISTINGS.values(), ids=LISTINGS)
def test_the_cli_has_a_command_per_listing_with_an_option_per_filter(listing):
    command = typer.main.get_command(ledger_cli.app).commands[listing.name]
    options = {param.name: param for param in command.params}
    paging = {field.name for field in dataclasses.fields(ledger_cli.Paging)}
    assert set(options) == paging | {f.name for f in listing.filters}
    for filter_ in listing.filters:
        option, column = options[filter_.name], listing.filter_column(filter_)
        assert option.help == filter_.doc
        if column.kind is Kind.BOOL:
            assert option.secondary_opts == [f"--{filter_.false_flag}"]
        if column.kind is Kind.ENUM:  # every value goes on to the backend, any other is a usage error
            flag = f"--{filter_.name.replace('_', '-')}"
            for value in column.values:
                result = CliRunner().invoke(ledger_cli.app, [listing.name, flag, value, "--backend-url", UNREACHABLE])
                assert isinstance(result.exception, ServiceUnavailable), result.output
            assert CliRunner().invoke(ledger_cli.app, [listing.name, flag, "bogus"]).exit_code == 2
    row = {column.name: None for column in listing.columns}
    assert [c.header for c in ledger_cli.render_table(listing.name, [row]).columns] == list(listing.shown)


def test_the_ledger_cli_does_not_need_the_backend():
    """Auditors install the base package: the ledger commands talk HTTP, the table is in the core."""
    code = "import sys, proofpool.cli.ledger; sys.exit(any(m.startswith('proofpool.backend') for m in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def _listing(**changes: Any) -> Listing:
    fields = {
        "name": "things",
        "item": "thing",
        "doc": "Things.",
        "columns": (Column("id", Kind.INT, "Id."), Column("when", Kind.TIMESTAMP, "Time.")),
        "key": ("id",),
        "shown": ("id",),
    }
    return Listing(**{**fields, **changes})


@pytest.mark.parametrize(
    "changes",
    [
        {"key": ("missing",)},
        {"shown": ("missing",)},
        {"key": ("when",)},  # a cursor cannot carry a time
        {"filters": (Filter("id", "Only this id.", match=Match.BEFORE),)},
        {"filters": (Filter("when", "From this time.", match=Match.AT_OR_AFTER),)},  # not in chain order
        {"filters": (Filter("limit", "Collides with paging.", column="id"),)},
        {"columns": (Column("id", Kind.INT, "Id."), Column("id", Kind.INT, "Again."))},
        {"columns": (Column("id", Kind.INT, "Id."), Column("state", Kind.ENUM, "No values."))},
        {"filters": (Filter("order", "Collides with paging.", column="id"),)},
        {"filters": (Filter("id", "A hash filter on an int.", match=Match.HOLDS),)},
        {  # a file filter matches a row's own work_key, which these rows lack
            "columns": (Column("id", Kind.INT, "Id."), Column("files", Kind.FILES, "Files.", nullable=True)),
            "filters": (Filter("file", "Holding this file.", column="files", match=Match.HOLDS),),
        },
    ],
)
def test_a_declaration_no_consumer_could_serve_is_refused_at_import(changes):
    with pytest.raises((ValueError, KeyError)):
        _listing(**changes)
