"""Fixtures shared by every test folder: a real anvil chain started once per run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from proofpool.chain.anvil import AnvilProcess, start_anvil


@pytest.fixture(scope="session")
def anvil() -> Iterator[AnvilProcess]:
    """One anvil on a free loopback port for the whole run."""
    with start_anvil() as chain:
        yield chain
