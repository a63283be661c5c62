"""The indexer on a real anvil and a real PostgreSQL: the chain-loop scenario indexed into
projections that agree with the contracts' views, idempotent re-indexing, equality with a
rebuild from raw events, one outbox row per submission, and the CLI."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import psycopg
import pytest
from proofpool.backend.indexer.decode import FastDecoder
from proofpool.backend.indexer.rebuild import rebuild_projections
from typer.testing import CliRunner

from proofpool.infra import db
from proofpool.infra.chain.bindings import PoolParams
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.events import EventDecoder
from proofpool.infra.config import REPO_ROOT, get_settings
from proofpool.infra.served import ServedPools
from tests.fixtures.indexer import (
    PROJECTIONS,
    assert_projections_match_views,
    indexer_env,
    make_indexer,
    outbox_keys,
    query,
    snapshot,
    submitted_keys,
)
from tests.fixtures.postgres import truncate_all


def test_fast_decoder_gives_the_events_of_the_web3_decoder(loop_world):
    raw = loop_world.w3.provider.make_request(
        "eth_getLogs", [{"fromBlock": hex(loop_world.book.deploy_block), "toBlock": "latest"}]
    )["result"]
    fast = [FastDecoder(loop_world.book.addresses).decode(log) for log in raw]
    slow = EventDecoder(loop_world.w3, loop_world.book.addresses).decode_logs(
        loop_world.w3.eth.get_logs({"fromBlock": loop_world.book.deploy_block, "toBlock": "latest"})
    )
    assert len([e for e in fast if e is not None]) == len(slow) > 40
    for mine, theirs in zip([e for e in fast if e is not None], slow, strict=True):
        assert (mine.contract, mine.name, mine.address, mine.block_number, mine.tx_hash, mine.log_index) == (
            theirs.contract,
            theirs.name,
            theirs.address,
            theirs.block_number,
            bytes(theirs.tx_hash),
            theirs.log_index,
        )
        expected = {k: "0x" + v.hex() if isinstance(v, bytes) else v for k, v in theirs.args.items()}
        assert mine.args == expected, theirs.name
    assert {e.name for e in slow} >= {"PoolCreated", "WorkSubmitted", "SlashDistributed", "CheckpointPublished"}


def test_foreign_and_malformed_logs_are_skipped(loop_world):
    decoder = FastDecoder(loop_world.book.addresses)
    log = loop_world.w3.provider.make_request(
        "eth_getLogs", [{"fromBlock": hex(loop_world.book.deploy_block), "toBlock": "latest"}]
    )["result"][0]
    assert decoder.decode(log) is not None
    assert decoder.decode({**log, "address": "0x" + "11" * 20}) is None
    assert decoder.decode({**log, "topics": ["0x" + "22" * 32, *log["topics"][1:]]}) is None
    assert decoder.decode({**log, "topics": log["topics"][:1]}) is None
    assert decoder.decode({**log, "topics": []}) is None


def test_chain_loop_projections_match_the_contract_views(loop_world, clean_database):
    stats = make_indexer(loop_world.w3, loop_world.book, clean_database, batch_blocks=3).run(once=True)

    assert stats.ranges > 5 and stats.reorgs == 0
    assert_projections_match_views(clean_database, loop_world)
    head = loop_world.w3.eth.block_number
    assert query(clean_database, "SELECT chain_id, next_block FROM indexer_state") == [(31337, head + 1)]
    assert query(clean_database, "SELECT count(*) FROM chain_events")[0][0] == stats.new_events
    # one outbox row per WorkSubmitted, keyed and shaped as the validator expects
    assert sorted(outbox_keys(clean_database)) == sorted(submitted_keys(clean_database))
    task, args, key = query(clean_database, "SELECT task, args, dedupe_key FROM outbox ORDER BY id")[0]
    assert task == "validator.validate_submission" and key == f"{args[0]}:{args[1]}"
    assert args == [loop_world.loop.pool_id, "0x" + loop_world.loop.honest_key.hex()]
    # every projection row carries the block and transaction of its last change
    for table in PROJECTIONS:
        assert query(clean_database, f"SELECT count(*) FROM {table} WHERE tx_hash IS NULL OR block_number < 1") == [
            (0,)
        ]


def test_indexing_the_same_range_twice_gives_the_same_rows(loop_world, clean_database):
    make_indexer(loop_world.w3, loop_world.book, clean_database, batch_blocks=4).run(once=True)
    first = snapshot(clean_database)

    again = make_indexer(
        loop_world.w3, loop_world.book, clean_database, batch_blocks=7, from_block=loop_world.book.deploy_block
    ).run(once=True)

    assert again.events == len(first["chain_events"]) and again.new_events == 0
    second = snapshot(clean_database)
    # Block headers are kept for every block with a log and every range start and end (reorg
    # detection), so other range boundaries add headers; nothing else changes.
    assert set(first.pop("chain_blocks")) <= set(second.pop("chain_blocks"))
    assert second == first


def test_from_block_never_jumps_ahead_of_the_cursor(loop_world, clean_database):
    head = loop_world.w3.eth.block_number
    make_indexer(loop_world.w3, loop_world.book, clean_database, batch_blocks=1000).run(once=True)
    with psycopg.connect(clean_database, autocommit=True) as conn:
        conn.execute("UPDATE indexer_state SET next_block = %s", (loop_world.book.deploy_block + 3,))
    stats = make_indexer(loop_world.w3, loop_world.book, clean_database, from_block=head).run(once=True)
    assert stats.blocks == head + 1 - (loop_world.book.deploy_block + 3)  # resumed at the cursor, skipped nothing


def test_projections_equal_a_rebuild_from_chain_events(loop_world, clean_database):
    make_indexer(loop_world.w3, loop_world.book, clean_database, batch_blocks=1).run(once=True)
    incremental = snapshot(clean_database)

    with psycopg.connect(clean_database, autocommit=True) as conn, conn.transaction():
        replayed = rebuild_projections(conn)
    assert replayed == len(incremental["chain_events"])
    assert snapshot(clean_database) == incremental

    # and a fresh index of the whole chain in one range gives the same ledger
    truncate_all(clean_database)
    make_indexer(loop_world.w3, loop_world.book, clean_database, batch_blocks=10_000).run(once=True)
    fresh = snapshot(clean_database)
    assert {t: fresh[t] for t in PROJECTIONS} == {t: incremental[t] for t in PROJECTIONS}
    assert fresh["chain_events"] == incremental["chain_events"]


def test_cli_runs_once_reports_status_and_rebuilds(loop_world, clean_database, tmp_path):
    env = indexer_env(clean_database, loop_world.anvil, loop_world.book, tmp_path)
    cli = [sys.executable, "-m", "proofpool.cli.main", "indexer"]
    done = subprocess.run(
        [*cli, "run", "--once", "--no-dispatch", "--batch-blocks", "5", "--json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '"new_events"' in done.stdout and "range indexed" in done.stderr and "from_block=" in done.stderr
    assert_projections_match_views(clean_database, loop_world)

    status = subprocess.run(
        [*cli, "status", "--json"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0, status.stderr
    assert '"lag_blocks": 0' in status.stdout and '"pending_tasks": 2' in status.stdout

    before = snapshot(clean_database)
    rebuilt = subprocess.run([*cli, "rebuild"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert snapshot(clean_database) == before


def test_cli_help_and_db_commands(database_url):
    from proofpool.cli.main import app

    runner = CliRunner()
    for args in (["indexer", "--help"], ["indexer", "run", "--help"], ["db", "--help"], ["db", "upgrade", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Usage" in result.output
    current = runner.invoke(app, ["db", "current", "--json", "--database-url", database_url])
    assert current.exit_code == 0 and f'"revision": "{db.head_revision()}"' in current.output


@pytest.mark.parametrize("command", [["status"], ["rebuild"]])
def test_cli_names_a_missing_database(command):
    url = db.with_database(get_settings().database_url, "proofpool_test_missing")
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "indexer", *command, "--database-url", url],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    message = " ".join(done.stderr.split())  # rich wraps long lines
    assert done.returncode == 1
    assert "does not exist: run `proofpool db upgrade`" in message and "Traceback" not in message


@pytest.mark.parametrize(
    "served, dispatched",
    [
        (ServedPools(pool_ids=frozenset({999})), False),
        (ServedPools(managers=frozenset({"0x70997970C51812dc3A010C7d01b50e0d17dc79C8"})), True),
        (ServedPools(pool_ids=frozenset({1})), True),
    ],
    ids=["other-pool", "by-manager", "by-id"],
)
def test_only_served_pools_get_validation_tasks(loop_world, clean_database, served, dispatched):
    """Every submission is indexed; only those of served pools are queued for validators (the
    chain loop's pool 1 is managed by anvil account 1)."""
    assert loop_world.cast.manager.address == "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
    make_indexer(loop_world.w3, loop_world.book, clean_database, served=served).run(once=True)
    submitted = sorted(submitted_keys(clean_database))
    assert len(submitted) == 2 and loop_world.loop.pool_id == 1
    assert sorted(outbox_keys(clean_database)) == (submitted if dispatched else [])


def test_a_pool_spec_hash_is_projected_as_the_chain_stored_it(loop_world, clean_database):
    """PoolCreated's specSha256 (an indexed topic) lands in `pools.spec_sha256`; pools without a spec
    hold 32 zero bytes."""
    spec = hashlib.sha256(b"an indexed pool spec").digest()
    params = PoolParams(
        manager=loop_world.cast.manager.address,
        treasury=loop_world.cast.treasury.address,
        model_uri=f"spec://{spec.hex()}",
        reward_per_unit=1,
        validator_fee=1,
        slash_amount=1,
        dispute_window=60,
        validator_slash_share_bps=0,
        spec_sha256=spec,
    )
    admin = ChainClient.build(loop_world.w3, loop_world.book, loop_world.cast.admin)
    spec_pool, _ = admin.pool.create_pool(params)
    make_indexer(loop_world.w3, loop_world.book, clean_database, batch_blocks=50).run(once=True)

    rows = query(clean_database, "SELECT pool_id, model_uri, spec_sha256 FROM pools ORDER BY pool_id")
    chain = loop_world.client.pool
    assert [(p, uri, bytes(sha)) for p, uri, sha in rows] == [
        (p, chain.get_pool(p).model_uri, chain.get_pool(p).spec_sha256) for p in range(1, chain.pool_count() + 1)
    ]
    assert (rows[-1][0], bytes(rows[-1][2])) == (spec_pool, spec)
    assert {bytes(sha) for p, _, sha in rows if p != spec_pool} == {bytes(32)}
    [(event,)] = query(
        clean_database,
        "SELECT args FROM chain_events WHERE name = 'PoolCreated' AND args->>'poolId' = %s",
        (str(spec_pool),),
    )
    assert event["specSha256"] == "0x" + spec.hex()
