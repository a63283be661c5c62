"""Creating and migrating proofpool's PostgreSQL database.

Shared by `proofpool db ...`, the test fixtures and any service that wants the schema at
head before it starts. Migrations run through Alembic's Python API (not a subprocess) so the
errors stay Python errors; the schema itself lives in hand-written revisions in `migrations/`
(from a source checkout; an installed wheel ships them as `proofpool/infra/migrations/`, setup.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from proofpool.core.errors import ConfigError, ProofpoolError, ServiceUnavailable
from proofpool.infra.config import FROM_CHECKOUT, REPO_ROOT

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

ALEMBIC_INI = REPO_ROOT / "alembic.ini"
"""The checkout's Alembic configuration (logging of the plain `alembic` command); not shipped."""
MIGRATIONS_DIR = REPO_ROOT / "migrations" if FROM_CHECKOUT else Path(__file__).resolve().parent / "migrations"
"""The revisions: the checkout's `migrations/`, else the copy installed with the package."""
MAINTENANCE_DB = "postgres"
START_HINT = (
    "start PostgreSQL (e.g. `sudo service postgresql start` or `pg_ctlcluster 15 main start`) "
    "or point DATABASE_URL at a running server"
)


@dataclass(frozen=True)
class DatabaseStatus:
    """Where a database stands: its name and the Alembic revision it is at (None: not migrated)."""

    name: str
    revision: str | None
    head: str


def database_name(url: str) -> str:
    """The database a URL names; `ConfigError` when it names none."""
    try:
        name = conninfo_to_dict(url).get("dbname")
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"malformed database URL: {exc}") from exc
    if not name:
        raise ConfigError(f"database URL {redact(url)} names no database")
    return str(name)


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<malformed URL>"
    params.pop("password", None)
    host, port = params.get("host", "localhost"), params.get("port", 5432)
    return f"postgresql://{params.get('user', '')}@{host}:{port}/{params.get('dbname', '')}"


def with_database(url: str, name: str) -> str:
    """The same server and credentials, another database (a URL stays a URL, conninfo stays conninfo)."""
    if "://" in url:
        parts = urlsplit(url)
        return urlunsplit((parts.scheme, parts.netloc, "/" + quote(name), parts.query, parts.fragment))
    params = conninfo_to_dict(url)
    params["dbname"] = name
    return make_conninfo(**params)


def connect_maintenance(url: str, timeout: float = 5.0) -> psycopg.Connection:
    """An autocommit connection to the server's `postgres` database (CREATE/DROP DATABASE need one)."""
    try:
        return psycopg.connect(with_database(url, MAINTENANCE_DB), autocommit=True, connect_timeout=int(timeout))
    except psycopg.OperationalError as exc:
        raise connection_error(url, exc) from exc


def ensure_database(url: str) -> bool:
    """Create the database `url` names unless it exists; True when it was created."""
    name = database_name(url)
    with connect_maintenance(url) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            return False
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except psycopg.errors.DuplicateDatabase:
            return False  # created concurrently by another process: same outcome
    log.info("created database %s", name)
    return True


def drop_database(url: str) -> None:
    """Drop the database `url` names, closing its other sessions first (tests, `db reset`)."""
    name = database_name(url)
    with connect_maintenance(url) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def alembic_config(url: str) -> Config:
    """An Alembic config for `url`, with our `migrations/` scripts and no logging takeover.
    (Alembic is imported lazily: it pulls in SQLAlchemy, which only migrations need.)"""
    from alembic.config import Config

    config = Config(str(ALEMBIC_INI) if FROM_CHECKOUT else None)
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolates '%': escape it so passwords with '%' survive.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["embedded"] = True
    return config


def connection_error(url: str, exc: psycopg.Error) -> ProofpoolError:
    """The error to raise for a failed connection: a missing database is not a down server."""
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    if "does not exist" in first_line:
        return ConfigError(
            f"database {redact(url)} does not exist: run `proofpool db upgrade` to create and migrate it"
        )
    return ServiceUnavailable(f"PostgreSQL is not reachable at {redact(url)} ({first_line}); {START_HINT}")


def _run(url: str, action: str, revision: str) -> None:
    from alembic import command
    from alembic.util import CommandError
    from sqlalchemy.exc import OperationalError

    try:
        getattr(command, action)(alembic_config(url), revision)
    except OperationalError as exc:
        orig = exc.orig if isinstance(exc.orig, psycopg.OperationalError) else psycopg.OperationalError(str(exc))
        raise connection_error(url, orig) from exc
    except CommandError as exc:
        raise ConfigError(f"alembic {action} {revision}: {exc}") from exc


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database to `revision` (default: the newest)."""
    _run(url, "upgrade", revision)
    log.info("database %s upgraded to %s", database_name(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database back to `revision` ("base" drops every table of ours)."""
    _run(url, "downgrade", revision)
    log.info("database %s downgraded to %s", database_name(url), revision)


def head_revision() -> str:
    """The newest revision in `migrations/versions`."""
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config("postgresql:///unused")).get_heads()
    if len(heads) != 1:
        raise ConfigError(f"migrations have {len(heads)} heads ({', '.join(heads)}): merge them")
    return heads[0]


def current(url: str) -> DatabaseStatus:
    """The revision the database is at (reads `alembic_version` directly; no SQLAlchemy engine)."""
    name = database_name(url)
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            exists = conn.execute("SELECT to_regclass('alembic_version') IS NOT NULL").fetchone()
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone() if exists and exists[0] else None
    except psycopg.OperationalError as exc:
        raise connection_error(url, exc) from exc
    return DatabaseStatus(name=name, revision=row[0] if row else None, head=head_revision())
