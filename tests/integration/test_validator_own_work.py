"""A validator never judges work of its own node or provider (the contract would refuse the
verdict): the pipeline leaves it to the others, before claiming it, fetching or checking it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import psycopg
import pytest
from eth_account import Account
from psycopg_pool import ConnectionPool

from proofpool.config import get_settings
from tests.fixtures.postgres import migrated_database
from validator.pipeline import Outcome, validate
from validator.resources import Resources

NODE, PROVIDER = Account.create(), Account.create()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with migrated_database("proofpool_test_own_work") as database_url:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for key in (b"\x01" * 32, b"\x02" * 32):
                conn.execute(
                    "INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status,"
                    " submitted_at, block_number, tx_hash, log_index)"
                    " VALUES (1, %s, %s, %s, 8, 0, 'pending', now(), 1, %s, 0)",
                    (key, NODE.address, PROVIDER.address, key),
                )
        yield database_url


def _resources(url: str, account: Any) -> Resources:
    """Only the key and the database: own work is refused before anything else is touched."""
    pool = ConnectionPool(url, min_size=1, max_size=1, open=True)
    return Resources(get_settings(), account, cast(Any, None), pool, cast(Any, None), cast(Any, None))


@pytest.mark.parametrize("who", [NODE, PROVIDER], ids=["node", "provider"])
def test_own_work_is_left_to_other_validators(url: str, who: Any) -> None:
    res = _resources(url, who)
    try:
        assert validate(res, 1, b"\x01" * 32).outcome is Outcome.OWN_WORK
    finally:
        res.close()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM validations").fetchone() == (0,)


def test_another_validator_claims_it(url: str) -> None:
    """The same submission is claimed by an unrelated validator (which then needs the store: the
    missing one stops it right after the claim, which is what this test looks for)."""
    res = _resources(url, Account.create())
    try:
        with pytest.raises(AttributeError):
            validate(res, 1, b"\x02" * 32)
    finally:
        res.close()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM validations WHERE work_key = %s", (b"\x02" * 32,)).fetchone() == (1,)
