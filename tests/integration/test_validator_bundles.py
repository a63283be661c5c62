"""Validators judge bundles (`submitWorkBundle`): one verdict for many files, on the real services.

First against PostgreSQL alone: `get_submission` reads a bundle's files (revision 0010), and an
accepted bundle claims each file's batch under the bundle key, all or none. Then against the
market (anvil, the indexer dispatching one task per bundle, SeaweedFS, a `proofpool validator run`
process): a bundle of honest files is attested, a bundle with one tampered file is invalidated with
that file's key in the evidence, and a file of an accepted bundle sent again alone is
`duplicate_batch`. Honest files are a fresh node's batches made with PyTorch
(`tests/fixtures/pytorch_rows.py`), as in tests/integration/test_validator.py, whose bench this reuses.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import psycopg
import pytest
from eth_utils import to_checksum_address
from proofpool.validator import store
from proofpool.validator.checks import Verdict
from proofpool.validator.pipeline import first_of_its_batch
from proofpool.validator.submissions import get_submission
from proofpool_arithmetic.cache import ensure_devnet_model

from proofpool.core.rollout import RolloutFileMeta, RolloutSample, rollouts_bytes
from proofpool.inference.model import load_model
from proofpool.infra.chain.bundles import bundle_key, canonical
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore, evidence_key
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.market import Market
from tests.fixtures.postgres import migrated_database
from tests.integration.test_validator import Bench, spawn_validator, verdicts_on

POOL = 1
NODE = to_checksum_address("0x" + "ab" * 20)
VERSION = 2
TOPLOC_REASONS = {"toploc_exp_mismatch", "toploc_mantissa"}


def key(tag: str) -> bytes:
    return hashlib.sha256(tag.encode()).digest()


# --- PostgreSQL only ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with migrated_database("proofpool_test_vbundles") as database:
        yield database


@pytest.fixture
def conn(url: str) -> Iterator[psycopg.Connection]:
    """A connection in a transaction of its own per call site, as the pipeline's pooled ones are."""
    with psycopg.connect(url) as connection:
        connection.execute("TRUNCATE submissions, batch_claims")
        connection.commit()
        yield connection


def index(conn: psycopg.Connection, work_key: bytes, files: list[tuple[bytes, int]] | None) -> None:
    """A submission row as the indexer writes it (a bundle's with its files' arrays)."""
    conn.execute(
        """INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status,
                                    submitted_at, block_number, tx_hash, log_index, file_keys, file_units)
           VALUES (%s, %s, %s, %s, %s, %s, 'pending', %s, 7, %s, 0, %s, %s)""",
        (
            POOL,
            work_key,
            NODE,
            NODE,
            sum(u for _, u in files) if files else 20,
            VERSION,
            datetime.now(UTC),
            bytes(32),
            None if files is None else [k for k, _ in files],
            None if files is None else [u for _, u in files],
        ),
    )


def accepted_bundle(batches: list[int]) -> Verdict:
    """A bundle's accepted verdict as `judge_bundle` composes it: a summary per file with its batch."""
    files = [{"file_key": key(f"file-{b}").hex(), "rows": 8, "checked_rows": 8, "batch": b} for b in batches]
    return Verdict(
        accepted=True, reason=None, evidence={"bundle_files": len(files), "files": files}, rows=8 * len(files)
    )


def test_get_submission_reads_a_bundles_files_in_order(conn: psycopg.Connection) -> None:
    files = [(key("a"), 5), (key("b"), 7)]
    index(conn, key("bundle"), files)
    index(conn, key("single"), None)
    bundle = get_submission(conn, POOL, key("bundle"))
    assert (bundle.files, bundle.work_units) == (tuple(files), 12)
    assert get_submission(conn, POOL, key("single")).files is None


def test_an_accepted_bundle_claims_its_batches_and_a_taken_one_claims_none(conn: psycopg.Connection) -> None:
    index(conn, key("first"), [(key("f0"), 1), (key("f1"), 1)])
    index(conn, key("second"), [(key("f2"), 1), (key("f3"), 1)])
    index(conn, key("alone"), None)
    first = get_submission(conn, POOL, key("first"))
    verdict = accepted_bundle([0, 1])
    assert first_of_its_batch(conn, first, verdict) is verdict
    assert first_of_its_batch(conn, first, verdict) is verdict  # a redelivered task
    conn.commit()

    second = get_submission(conn, POOL, key("second"))
    duplicate = first_of_its_batch(conn, second, accepted_bundle([5, 1]))
    assert (duplicate.accepted, duplicate.reason) == (False, "duplicate_batch")
    assert (duplicate.evidence["file_index"], duplicate.evidence["first_work_key"]) == (1, key("first").hex())
    conn.commit()
    owners = dict(conn.execute("SELECT batch, work_key FROM batch_claims").fetchall())
    assert {b: bytes(k) for b, k in owners.items()} == {0: key("first"), 1: key("first")}  # batch 5 rolled back

    alone = get_submission(conn, POOL, key("alone"))
    single = Verdict(accepted=True, reason=None, evidence={"batch": 0}, rows=8)
    again = first_of_its_batch(conn, alone, single)
    assert (again.reason, again.evidence["first_work_key"]) == ("duplicate_batch", key("first").hex())
    assert store.claim_batch(conn, POOL, NODE, VERSION, 5, key("alone")) == key("alone")  # batch 5 is free


# --- the market ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bench(validated_market: Market, seaweed: SeaweedProcess) -> Iterator[Bench]:
    """The market with one validator process; files are made per test from fresh nodes' batches."""
    market = validated_market
    validator = spawn_validator(market, market.stack.cast.validator, "validator")
    object_store = ObjectStore.from_settings(seaweed.settings(get_settings()))
    version = market.stack.admin.pool.latest_checkpoint(market.pool_id).version
    model = load_model(ensure_devnet_model(progress=None), "bf16")
    yield Bench(market, validator, object_store, [], version, b"", model)
    validator.stop()


def submit_bundle(bench: Bench, node: str, as_node, files: list[tuple[bytes, list[RolloutSample]]]) -> bytes:
    """Upload each file where validators look for `node`'s files and send them as one bundle."""
    keyed = []
    for data, rows in files:
        keyed.append((bench.upload(node, data), sum(len(r.completion_tokens) for r in rows)))
    keys, units = canonical(keyed)
    as_node.pool.submit_work_bundle(bench.market.pool_id, node, keys, units, bench.honest_version)
    return bundle_key(keys, units)


def hand_out_batches(bench: Bench, node: str, last: int) -> None:
    """What the orchestrator records when it hands `node` batches 0..`last` (`issued_batches`)."""
    with psycopg.connect(bench.market.database_url) as db:
        db.execute(
            "INSERT INTO issued_batches (pool_id, node, model_version, last_batch) VALUES (%s, %s, %s, %s)",
            (bench.market.pool_id, to_checksum_address(node), bench.honest_version, last),
        )


def evidence_of(bench: Bench, work_key: bytes) -> dict:
    document = bench.store.get_object(
        evidence_key(bench.market.pool_id, work_key.hex(), bench.market.stack.cast.validator.address)
    )
    return json.loads(document)


@pytest.mark.slow
def test_a_bundle_of_honest_files_is_attested_and_a_file_sent_again_alone_is_a_duplicate(bench: Bench) -> None:
    node, as_node = bench.new_node()
    hand_out_batches(bench, node.address, 2)
    meta = RolloutFileMeta(bench.market.pool_id, node.address)
    batches = [bench.rows_for(node.address, batch) for batch in range(3)]
    files = [(rollouts_bytes(meta, rows), rows) for rows in batches]
    bundle = submit_bundle(bench, node.address, as_node, files)

    assert bench.verdict(bundle) == ("accepted", None)
    assert verdicts_on(bench.market, bundle) == 1
    document = evidence_of(bench, bundle)
    evidence = document["evidence"]
    assert (document["verdict"], evidence["bundle_files"], evidence["recomputed"]) == ("accepted", 3, True)
    assert evidence["checked_rows"] == evidence["rows"] == sum(len(rows) for rows in batches)
    keys = sorted(hashlib.sha256(data).hexdigest() for data, _ in files)
    assert [f["file_key"] for f in evidence["files"]] == keys
    assert sorted(f["batch"] for f in evidence["files"]) == [0, 1, 2]

    again = files[1][0]
    units = sum(len(r.completion_tokens) for r in batches[1])
    as_node.pool.submit_work(bench.market.pool_id, node.address, hashlib.sha256(again).digest(), units,
                             bench.honest_version)  # fmt: skip
    assert bench.verdict(hashlib.sha256(again).digest()) == ("invalid", "duplicate_batch")
    assert evidence_of(bench, hashlib.sha256(again).digest())["evidence"]["first_work_key"] == bundle.hex()
    assert bench.validator.alive


@pytest.mark.slow
def test_a_bundle_with_one_tampered_file_is_invalid_and_names_that_file(bench: Bench) -> None:
    node, as_node = bench.new_node()
    hand_out_batches(bench, node.address, 2)
    meta = RolloutFileMeta(bench.market.pool_id, node.address)
    batches = [bench.rows_for(node.address, batch) for batch in range(3)]
    tampered = list(batches[2])
    tampered[1] = replace(tampered[1], proofs=tampered[9].proofs)  # another row's proofs: TOPLOC fails
    batches[2] = tampered
    files = [(rollouts_bytes(meta, rows), rows) for rows in batches]
    bad_key = hashlib.sha256(files[2][0]).hexdigest()
    bundle = submit_bundle(bench, node.address, as_node, files)

    verdict, reason = bench.verdict(bundle)
    assert verdict == "invalid" and reason in TOPLOC_REASONS, reason
    assert verdicts_on(bench.market, bundle) == 1
    evidence = evidence_of(bench, bundle)["evidence"]
    assert (evidence["file_key"], evidence["bundle_files"], evidence["row"]) == (bad_key, 3, 1)
    assert evidence["file_index"] == sorted(hashlib.sha256(d).hexdigest() for d, _ in files).index(bad_key)
    with psycopg.connect(bench.market.database_url) as db:
        (claims,) = db.execute(
            "SELECT count(*) FROM batch_claims WHERE work_key = %s", (bundle,)
        ).fetchone()  # fmt: skip
    assert claims == 0  # an invalid bundle holds no batch
    assert bench.validator.alive
