"""Fixtures shared by every test folder: a real anvil chain started once per run, and the
service fixtures in `tests/fixtures/` (PostgreSQL, object store, backend), one module each."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from proofpool.infra.chain.anvil import AnvilProcess, start_anvil

_FIXTURES = Path(__file__).parent / "fixtures"
pytest_plugins = sorted(f"tests.fixtures.{p.stem}" for p in _FIXTURES.glob("*.py") if p.stem != "__init__")


@pytest.fixture(scope="session")
def anvil() -> Iterator[AnvilProcess]:
    """One anvil on a free loopback port for the whole run."""
    with start_anvil() as chain:
        yield chain
