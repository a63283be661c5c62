"""Fixtures shared by every test folder: a real anvil chain started once per run, and the
service fixtures in `tests/fixtures/` (PostgreSQL, object store, backend), one module each.

A run never touches the user's data directory (`proofpool.infra.config.user_data_dir`): before
anything reads a setting, the state and address-book folders and XDG_DATA_HOME point into a
temporary folder of the run, removed at its end. Tests and fixtures that start services still name
their own folders; these are the defaults for everything else (nonce locks of in-process senders,
child processes that inherit this environment)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from proofpool.infra.chain.anvil import AnvilProcess, start_anvil

_FIXTURES = Path(__file__).parent / "fixtures"
pytest_plugins = sorted(f"tests.fixtures.{p.stem}" for p in _FIXTURES.glob("*.py") if p.stem != "__init__")

_RUN_DATA = pytest.StashKey[Path]()
"""The run's stand-in for the user's data directory."""


def pytest_configure(config: pytest.Config) -> None:
    """Point every default that would land in the user's data directory into a folder of the run."""
    data = config.stash[_RUN_DATA] = Path(tempfile.mkdtemp(prefix="proofpool-tests-"))
    os.environ["XDG_DATA_HOME"] = str(data)
    os.environ["PROOFPOOL_STATE_DIR"] = str(data / "proofpool" / "state")
    os.environ["PROOFPOOL_DEPLOYMENTS_DIR"] = str(data / "proofpool" / "deployments")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _RUN_DATA in config.stash:
        shutil.rmtree(config.stash[_RUN_DATA], ignore_errors=True)


@pytest.fixture(scope="session")
def anvil() -> Iterator[AnvilProcess]:
    """One anvil on a free loopback port for the whole run."""
    with start_anvil() as chain:
        yield chain
