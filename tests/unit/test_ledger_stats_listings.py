"""The statistics listings' public shape: the explorer and other dashboards read them by listing
and column name, so names, kinds (counts are JSON numbers, tokens decimal strings), keys and
filters are pinned here; a change to them is a change of the public API."""

from __future__ import annotations

import pytest
from proofpool.backend.api.ledger_models import QUERIES
from proofpool.backend.db.ledger import row_type

from proofpool.core.ledger_listings import (
    CONTRIBUTORS,
    LISTINGS,
    POOL_STATS,
    STATISTICS,
    VALIDATOR_STATS,
    Kind,
    Listing,
)

INT, AMOUNT, ADDRESS = Kind.INT, Kind.AMOUNT, Kind.ADDRESS
STATUS_COUNTS = ("pending", "accepted", "rejected", "invalid", "finalized", "forfeited", "expired")


@pytest.mark.parametrize(
    "listing, columns, key, filters",
    [
        (
            POOL_STATS,
            {
                "pool_id": INT,
                "submissions": INT,
                "files": INT,
                **dict.fromkeys(STATUS_COUNTS, INT),
                "work_units_accepted": INT,
                "slashed": AMOUNT,
                "rewards_paid": AMOUNT,
                "validator_fees": AMOUNT,
            },
            ("pool_id",),
            ("pool_id",),
        ),
        (
            CONTRIBUTORS,
            {
                "pool_id": INT,
                "node": ADDRESS,
                "provider": ADDRESS,
                "submissions": INT,
                "files": INT,
                "pending": INT,
                "accepted": INT,
                "invalid": INT,
                "work_units_accepted": INT,
                "rewards": AMOUNT,
                "slashed": AMOUNT,
            },
            ("pool_id", "node"),
            ("pool_id", "node", "provider"),
        ),
        (
            VALIDATOR_STATS,
            {
                "validator": ADDRESS,
                "verdicts_accepted": INT,
                "verdicts_invalid": INT,
                "fees": AMOUNT,
                "slash_shares": AMOUNT,
            },
            ("validator",),
            ("validator",),
        ),
    ],
    ids=lambda value: value.name if isinstance(value, Listing) else "",
)
def test_each_statistics_listing_has_exactly_its_published_shape(listing, columns, key, filters):
    assert LISTINGS[listing.name] is listing and listing in STATISTICS
    assert {column.name: column.kind for column in listing.columns} == columns
    assert [column.name for column in listing.columns] == list(columns)  # wire order: JSON fields, CSV header
    assert not any(column.nullable for column in listing.columns)
    assert listing.key == key
    assert tuple(f.name for f in listing.filters) == filters


@pytest.mark.parametrize(
    "listing, type_name",
    [(POOL_STATS, "PoolStats"), (CONTRIBUTORS, "Contributor"), (VALIDATOR_STATS, "ValidatorStats")],
)
def test_row_and_query_types_are_named_in_camel_case(listing, type_name):
    assert listing.type_name == type_name
    assert row_type(listing).__name__ == f"{type_name}Row"
    assert QUERIES[listing.name].__name__ == f"{type_name}Query"
    assert LISTINGS["memberships"].type_name == "Membership"  # single words as before
