"""`proofpool ledger verify` on a real anvil and a real PostgreSQL: the chain-loop scenario indexed
by the indexer verifies clean (also while the indexer is behind the head); a tampered and a
deleted row are reported exactly and fail the verification; unreachable services exit 2; the
scratch database never outlives a run."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from proofpool.backend.indexer.reorg import Rollback, roll_back
from proofpool.backend.indexer.verify import COMPARED_TABLES, NOT_COMPARED, verify_ledger
from proofpool.cli.main import app
from typer.testing import CliRunner

from proofpool.core.spec import NO_SPEC
from proofpool.infra import db
from proofpool.infra.chain.bindings import PoolParams
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import write_address_book
from proofpool.infra.config import REPO_ROOT
from tests.fixtures.indexer import LoopWorld, make_indexer, query


def scratch_databases(url: str) -> list[str]:
    """Databases named like the scratch databases of `url`'s database."""
    pattern = db.database_name(url).replace("_", r"\_") + r"\_verify\_%"
    with db.connect_maintenance(url) as conn:
        return [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (pattern,))]


def index(world: LoopWorld, url: str) -> int:
    """Index the whole chain into `url` as the indexer service would; returns the last block indexed."""
    make_indexer(world.w3, world.book, url, batch_blocks=7).run(once=True)
    return query(url, "SELECT next_block FROM indexer_state")[0][0] - 1


def run_verify(world: LoopWorld, url: str, deployments: Path, *args: str, rpc_url: str | None = None):
    write_address_book(world.book, deployments)
    options = ["--database-url", url, "--rpc-url", rpc_url or world.anvil.url, "--deployments-dir", str(deployments)]
    return CliRunner().invoke(app, ["ledger", "verify", *options, *args])


def test_an_indexed_ledger_matches_even_while_the_indexer_is_behind(loop_world, clean_database, tmp_path):
    last = index(loop_world, clean_database)
    create_pool(loop_world, "devnet://not-indexed-yet")
    assert loop_world.w3.eth.block_number > last  # the chain has an event the database has not seen

    diff = verify_ledger(clean_database, loop_world.anvil.url, book=loop_world.book, batch_blocks=5)

    assert diff.ok, diff.to_json()
    assert (diff.from_block, diff.to_block) == (loop_world.book.deploy_block, last)
    counts = {t.table: (t.chain_rows, t.database_rows) for t in diff.tables}
    assert set(counts) == set(COMPARED_TABLES)
    events = query(clean_database, "SELECT count(*) FROM chain_events")[0][0]
    assert counts["chain_events"] == (events, events) and events > 40
    assert counts["submissions"] == (2, 2) and counts["slashes"] == (1, 1)
    assert counts["pools"] == (2, 2)  # the third pool is beyond the cursor
    assert scratch_databases(clean_database) == []

    result = run_verify(loop_world, clean_database, tmp_path)
    assert result.exit_code == 0, result.output
    assert "OK: the database matches the chain" in result.stdout
    assert f"blocks {loop_world.book.deploy_block}..{last}" in result.stdout
    assert "rebuilt" in result.stderr and "blocks (100%)" in result.stderr
    assert scratch_databases(clean_database) == []


def create_pool(world: LoopWorld, model_uri: str, spec_sha256: bytes = NO_SPEC) -> int:
    """One more PoolCreated on the chain (the database has not indexed it); returns its pool id."""
    admin = ChainClient.build(world.w3, world.book, world.cast.admin)
    pool_id, _ = admin.pool.create_pool(
        PoolParams(
            manager=world.cast.manager.address,
            treasury=world.cast.treasury.address,
            model_uri=model_uri,
            reward_per_unit=1,
            validator_fee=1,
            slash_amount=1,
            dispute_window=60,
            validator_slash_share_bps=0,
            spec_sha256=spec_sha256,
        )
    )
    return pool_id


def test_the_rebuild_follows_an_indexer_that_went_on_while_it_ran(loop_world, clean_database):
    index(loop_world, clean_database)

    def indexer_moves_on(done: int, total: int) -> None:
        if done == total and not moved:
            create_pool(loop_world, "devnet://indexed-during-verify")
            moved.append(index(loop_world, clean_database))

    moved: list[int] = []
    diff = verify_ledger(clean_database, loop_world.anvil.url, book=loop_world.book, progress=indexer_moves_on)

    assert moved and diff.ok, diff.to_json()
    assert diff.to_block == moved[0]  # compared at the cursor of the database's snapshot
    pools = next(t for t in diff.tables if t.table == "pools")
    assert pools.chain_rows == pools.database_rows == query(clean_database, "SELECT count(*) FROM pools")[0][0]


def test_the_rebuild_follows_an_indexer_that_rolled_back_a_reorg_while_it_ran(loop_world, clean_database):
    last = index(loop_world, clean_database)
    fork = last - 10

    def indexer_rolls_back(done: int, total: int) -> None:
        if done == total and not rolled:
            with psycopg.connect(clean_database, autocommit=True) as conn, conn.transaction():
                rolled.append(roll_back(conn, fork))

    rolled: list[Rollback] = []
    diff = verify_ledger(clean_database, loop_world.anvil.url, book=loop_world.book, progress=indexer_rolls_back)

    assert rolled and rolled[0].events_removed > 0
    assert diff.ok, diff.to_json()
    assert diff.to_block == fork - 1


def test_tampered_and_deleted_rows_are_reported_exactly(loop_world, clean_database, tmp_path):
    index(loop_world, clean_database)
    pool_id, work_key, status = query(
        clean_database,
        "SELECT pool_id, work_key, status FROM submissions WHERE status <> 'pending' ORDER BY block_number LIMIT 1",
    )[0]
    bob = loop_world.cast.bob.address
    with psycopg.connect(clean_database, autocommit=True) as conn:
        conn.execute(
            "UPDATE submissions SET status = 'pending' WHERE pool_id = %s AND work_key = %s", (pool_id, work_key)
        )
        assert conn.execute("DELETE FROM providers WHERE address = %s", (bob,)).rowcount == 1

    result = run_verify(loop_world, clean_database, tmp_path, "--json")

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["ok"] is False and out["differences"] == 2 and out["problems"] == []
    listed = [d for table in out["tables"].values() for d in table["differences"]]
    assert [(d["table"], d["kind"], d["key"]) for d in listed] == [
        ("providers", "missing", {"address": bob}),
        ("submissions", "changed", {"pool_id": pool_id, "work_key": "0x" + bytes(work_key).hex()}),
    ]
    missing, changed = listed
    assert missing["chain"]["address"] == bob and missing["database"] is None
    assert (changed["column"], changed["chain"], changed["database"]) == ("status", status, "pending")
    # alice and bob, and the two validators the faucet staked for (a staker is a `providers` row)
    assert (out["tables"]["providers"]["chain_rows"], out["tables"]["providers"]["database_rows"]) == (4, 3)

    text = run_verify(loop_world, clean_database, tmp_path)
    assert text.exit_code == 1, text.output
    assert "MISMATCH: 2 differences in 2 of" in text.stdout
    assert f"missing  providers [address='{bob}']: on the chain, not in the database" in text.stdout
    assert (
        f"changed  submissions [pool_id={pool_id}, work_key=0x{bytes(work_key).hex()}] status: "
        f"chain '{status}' != database 'pending'"
    ) in text.stdout
    assert scratch_databases(clean_database) == []


def test_an_interrupted_verification_drops_its_scratch_database(loop_world, clean_database):
    index(loop_world, clean_database)
    seen: list[str] = []

    def interrupt(done: int, total: int) -> None:
        seen.extend(scratch_databases(clean_database))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        verify_ledger(clean_database, loop_world.anvil.url, book=loop_world.book, batch_blocks=2, progress=interrupt)
    assert len(seen) == 1  # it existed while rebuilding
    assert scratch_databases(clean_database) == []


def test_unreachable_chain_or_database_exits_2(loop_world, clean_database, tmp_path):
    no_chain = run_verify(loop_world, clean_database, tmp_path, rpc_url="http://127.0.0.1:9")
    assert no_chain.exit_code == 2, no_chain.output
    assert "cannot verify the ledger" in no_chain.stderr and "http://127.0.0.1:9" in no_chain.stderr

    nowhere = "postgresql://postgres@127.0.0.1:9/proofpool"
    no_database = run_verify(loop_world, nowhere, tmp_path)
    assert no_database.exit_code == 2, no_database.output
    assert "PostgreSQL is not reachable" in " ".join(no_database.stderr.split())

    # through the real entry point, as a script would run it
    write_address_book(loop_world.book, tmp_path)
    options = ["--database-url", nowhere, "--rpc-url", loop_world.anvil.url, "--deployments-dir", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "ledger", "verify", *options],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "127.0.0.1:9" in done.stderr


def test_every_table_is_either_compared_or_left_out_for_a_stated_reason(database_url):
    with psycopg.connect(database_url) as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        chain_derived = {
            r[0]
            for r in conn.execute(
                "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t "
                "USING (table_schema, table_name) WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' "
                "AND c.column_name IN ('block_number', 'tx_hash') GROUP BY c.table_name HAVING count(*) = 2"
            )
        }
    assert chain_derived <= set(COMPARED_TABLES)  # the schema's convention for chain-derived rows
    assert tables == set(COMPARED_TABLES) | set(NOT_COMPARED)


def test_a_pool_spec_hash_the_database_changed_is_reported(loop_world, clean_database, tmp_path):
    spec = hashlib.sha256(b"a verified pool spec").digest()
    pool_id = create_pool(loop_world, f"spec://{spec.hex()}", spec)
    index(loop_world, clean_database)
    assert query(clean_database, "SELECT spec_sha256 FROM pools WHERE pool_id = %s", (pool_id,)) == [(spec,)]
    with psycopg.connect(clean_database, autocommit=True) as conn:
        conn.execute("UPDATE pools SET spec_sha256 = %s WHERE pool_id = %s", (NO_SPEC, pool_id))

    result = run_verify(loop_world, clean_database, tmp_path, "--json")

    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["ok"] is False and out["differences"] == 1
    [difference] = out["tables"]["pools"]["differences"]
    assert (difference["kind"], difference["key"], difference["column"]) == (
        "changed",
        {"pool_id": pool_id},
        "spec_sha256",
    )
    assert (difference["chain"], difference["database"]) == ("0x" + spec.hex(), "0x" + "00" * 32)
    assert scratch_databases(clean_database) == []
