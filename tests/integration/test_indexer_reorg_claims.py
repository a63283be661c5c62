"""A reorg that removes submissions also removes the validator state tied to them: the batch
claims (else the node's re-submitted file of that batch is a `duplicate_batch`) and the
validation rows (else a re-mined submission is never judged again). Real anvil (`anvil_reorg`),
real PostgreSQL, the validator's own store functions."""

from __future__ import annotations

import psycopg
from proofpool.validator.store import claim, claim_batch, record_decision

from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.client import ChainClient
from tests.fixtures.indexer import build_bulk_world, make_indexer, query

VERSION = 0
LEASE = 60.0


def accept(url: str, pool_id: int, node: str, validator: str, batches: dict[bytes, int]) -> None:
    """What a validator's accepting task writes per file: its validation row and its batch claim."""
    with psycopg.connect(url) as conn, conn.transaction():
        for work_key, batch in batches.items():
            assert claim(conn, pool_id, work_key, validator, lease_seconds=LEASE) is not None
            assert record_decision(conn, pool_id, work_key, validator, "accepted", None, {})
            assert claim_batch(conn, pool_id, node, VERSION, batch, work_key) == work_key


def claims(url: str) -> dict[int, bytes]:
    return {int(batch): bytes(key) for batch, key in query(url, "SELECT batch, work_key FROM batch_claims")}


def validated(url: str) -> set[bytes]:
    return {bytes(key) for (key,) in query(url, "SELECT work_key FROM validations")}


def test_a_reorg_removes_the_batch_claims_and_validations_of_the_submissions_it_removed(fresh_anvil, clean_database):
    world = build_bulk_world(fresh_anvil, 0)
    market = world.market
    node, validator = market.node.address, market.validator.address
    kept = market.submit("kept", 2, per_block=1)
    dropped = market.submit("dropped", 3, per_block=1)
    first = make_indexer(market.w3, world.book, clean_database, batch_blocks=3).run(once=True)
    assert first.reorgs == 0
    batch_of = {key: batch for batch, key in enumerate([*kept, *dropped])}
    accept(clean_database, market.pool_id, node, validator, batch_of)
    assert set(claims(clean_database).values()) == validated(clean_database) == set(batch_of)

    fresh_anvil.rpc("anvil_reorg", [3, []])  # the last 3 blocks (the "dropped" submissions) get new hashes
    pool = ChainClient.build(market.w3, world.book).pool
    removed = {k for k in dropped if pool.get_work(market.pool_id, k).status is WorkStatus.NONE}
    assert removed, "anvil_reorg left every dropped submission on the chain"
    stats = make_indexer(market.w3, world.book, clean_database, batch_blocks=3).run(once=True)

    assert stats.reorgs >= 1
    survivors = set(batch_of) - removed
    assert set(claims(clean_database).values()) == survivors
    assert validated(clean_database) == survivors
    # the node's file re-submitted for a rolled-back batch (new bytes, new key) claims it afresh
    batch = batch_of[min(removed)]
    resubmitted = bytes(32 - 1) + b"\x01"
    with psycopg.connect(clean_database) as conn:
        assert claim_batch(conn, market.pool_id, node, VERSION, batch, resubmitted) == resubmitted
        # while a batch whose submission survived is still held by its first file
        survivor = min(survivors)
        assert claim_batch(conn, market.pool_id, node, VERSION, batch_of[survivor], resubmitted) == survivor
