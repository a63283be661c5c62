"""What a validator does not judge, and leaves to others before claiming, fetching or checking
it: work of its own node or provider (the contract would refuse the verdict), and submissions of
pools outside its allowlist."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import psycopg
import pytest
from eth_account import Account
from proofpool.validator.pipeline import Outcome, validate
from proofpool.validator.resources import Resources
from psycopg_pool import ConnectionPool

from proofpool.infra.config import get_settings
from proofpool.infra.served import ServedPools
from tests.fixtures.postgres import migrated_database

NODE, PROVIDER = Account.create(), Account.create()
MANAGER = Account.create().address


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with migrated_database("proofpool_test_own_work") as database_url:
        with psycopg.connect(database_url, autocommit=True) as conn:
            for key in (b"\x01" * 32, b"\x02" * 32, b"\x03" * 32):
                conn.execute(
                    "INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status,"
                    " submitted_at, block_number, tx_hash, log_index)"
                    " VALUES (1, %s, %s, %s, 8, 0, 'pending', now(), 1, %s, 0)",
                    (key, NODE.address, PROVIDER.address, key),
                )
            conn.execute(
                "INSERT INTO pools (pool_id, creator, manager, treasury, status, model_uri, reward_per_unit,"
                " validator_fee, slash_amount, dispute_window, validator_slash_share_bps, budget, block_number,"
                " tx_hash) VALUES (1, %s, %s, %s, 'active', 'devnet://m', 1, 1, 1, 3600, 5000, 1000, 1, %s)",
                (MANAGER, MANAGER, MANAGER, b"\x22" * 32),
            )
        yield database_url


def _resources(url: str, account: Any, served: ServedPools | None = None) -> Resources:
    """Only the key and the database: refusals come before anything else is touched."""
    pool = ConnectionPool(url, min_size=1, max_size=1, open=True)
    none = cast(Any, None)
    return Resources(get_settings(), account, none, pool, none, none, served or ServedPools(everything=True))


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


@pytest.mark.parametrize(
    "served",
    [ServedPools(pool_ids=frozenset({2})), ServedPools(managers=frozenset({Account.create().address}))],
    ids=["other-pool-id", "other-manager"],
)
def test_submissions_of_pools_not_served_are_left_alone(url: str, served: ServedPools) -> None:
    res = _resources(url, Account.create(), served)
    try:
        assert validate(res, 1, b"\x03" * 32).outcome is Outcome.NOT_SERVED
    finally:
        res.close()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM validations WHERE work_key = %s", (b"\x03" * 32,)).fetchone() == (0,)
