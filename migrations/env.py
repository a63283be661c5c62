"""Alembic environment of proofpool: one PostgreSQL URL from the same settings as the services.

`proofpool.infra.db.upgrade(url)` passes its URL as `sqlalchemy.url`; the plain `alembic` command falls
back to `get_settings().database_url` (DATABASE_URL). SQLAlchemy is used here only because Alembic
needs it: revisions are hand-written SQL through `op.execute`, and the services talk psycopg.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool

from proofpool.infra.config import get_settings

config = context.config

# Configure logging only for the `alembic` command; an embedding process keeps its own logging.
if config.config_file_name is not None and not config.attributes.get("embedded", False):
    fileConfig(config.config_file_name)


def sqlalchemy_url(url: str) -> str:
    """`postgresql://...` -> `postgresql+psycopg://...` (psycopg 3 is the project's only driver)."""
    for prefix in ("postgresql+psycopg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def database_url() -> str:
    """The URL given by the caller, else the settings'."""
    return sqlalchemy_url(config.get_main_option("sqlalchemy.url") or get_settings().database_url)


def run_migrations_offline() -> None:
    """Emit the SQL instead of running it (`alembic upgrade head --sql`)."""
    context.configure(url=database_url(), literal_binds=True, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the revisions on a live connection, each in its own transaction."""
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, transaction_per_migration=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
