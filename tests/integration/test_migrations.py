"""Migrations on a real PostgreSQL: upgrade head -> downgrade base -> upgrade head gives the same
schema, every revision steps down and up on its own, and `proofpool db` drives it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from typer.testing import CliRunner

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra import db
from proofpool.infra.config import get_settings

CHAIN_TABLES = {
    "chain_blocks",
    "indexer_state",
    "chain_events",
    "providers",
    "nodes",
    "pools",
    "memberships",
    "submissions",
    "verdicts",
    "slashes",
    "rewards",
    "checkpoints",
    "validators",
    "outbox",
}


@pytest.fixture
def scratch_url() -> Iterator[str]:
    """A database name nobody uses; dropped afterwards (the test creates it)."""
    url = db.with_database(get_settings().database_url, f"proofpool_test_mig_{uuid.uuid4().hex[:10]}")
    try:
        yield url
    finally:
        db.drop_database(url)


def schema(url: str) -> dict[str, list[tuple]]:
    """Tables -> (column, type, nullable, default) plus index definitions: what a migration defines."""
    with psycopg.connect(url) as conn:
        columns = conn.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY table_name, ordinal_position"
        ).fetchall()
        indexes = conn.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY tablename, indexname"
        ).fetchall()
    out: dict[str, list[tuple]] = {}
    for table, *column in columns:
        out.setdefault(table, []).append(tuple(column))
    for table, definition in indexes:
        out.setdefault(table, []).append(("index", definition))
    return out


def revisions() -> list[str]:
    """Every revision, oldest first."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(db.alembic_config("postgresql:///unused"))
    return [r.revision for r in reversed(list(script.walk_revisions()))]


def test_upgrade_downgrade_base_upgrade_gives_the_same_schema(scratch_url):
    assert db.ensure_database(scratch_url) is True
    assert db.ensure_database(scratch_url) is False  # idempotent

    db.upgrade(scratch_url)
    first = schema(scratch_url)
    assert set(first) >= CHAIN_TABLES
    assert db.current(scratch_url).revision == db.head_revision()

    db.downgrade(scratch_url, "base")
    assert set(schema(scratch_url)) == {"alembic_version"}
    assert db.current(scratch_url).revision is None

    db.upgrade(scratch_url)
    assert schema(scratch_url) == first


def test_every_revision_steps_down_and_up(scratch_url):
    db.ensure_database(scratch_url)
    chain = revisions()
    assert chain[0] == "0001"
    for revision in chain:
        db.upgrade(scratch_url, revision)
        assert db.current(scratch_url).revision == revision
    for previous in [*reversed(chain[:-1]), "base"]:
        db.downgrade(scratch_url, "-1")
        assert db.current(scratch_url).revision == (None if previous == "base" else previous)


def test_chain_schema_constraints(database_url):
    """The checks the projections rely on: states are closed sets, natural keys are unique."""
    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO submissions VALUES (1, '\\x01', 'n', 'p', 1, 0, 'weird', now(), 1, '\\x02', 0)")
        conn.rollback()
        conn.execute(
            "INSERT INTO chain_events (block_number, block_hash, tx_hash, log_index, contract, address, name, args) "
            "VALUES (1, '\\x01', '\\x02', 0, 'C', 'a', 'E', '{}')"
        )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO chain_events (block_number, block_hash, tx_hash, log_index, contract, address, name, "
                "args) VALUES (2, '\\x03', '\\x02', 0, 'C', 'a', 'E', '{}')"
            )
        conn.rollback()
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO indexer_state (id, chain_id, next_block) VALUES (2, 1, 0)")
        conn.rollback()


def test_db_cli_creates_migrates_and_reports(scratch_url):
    from proofpool.cli.main import app

    runner = CliRunner()
    result = runner.invoke(app, ["db", "upgrade", "--database-url", scratch_url])
    assert result.exit_code == 0, result.output
    assert "created database" in result.output
    result = runner.invoke(app, ["db", "current", "--database-url", scratch_url])
    assert "up to date" in result.output
    result = runner.invoke(app, ["db", "downgrade", "base", "--database-url", scratch_url])
    assert result.exit_code == 0 and "revision base" in result.output
    result = runner.invoke(app, ["db", "current", "--database-url", scratch_url])
    assert "behind" in " ".join(result.output.split())


def test_unreachable_server_says_how_to_start_postgres():
    with pytest.raises(ServiceUnavailable, match="start PostgreSQL"):
        db.ensure_database("postgresql://postgres@127.0.0.1:1/proofpool")
