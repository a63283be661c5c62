"""`proofpool validator run` as real Celery worker processes against the real market: anvil,
PostgreSQL, Redis (broker), SeaweedFS, the indexer dispatching one task per submission, and
the backend. A worker (vLLM) makes one honest file; every other file is a fresh node's own batch,
made with PyTorch (`tests/fixtures/pytorch_rows.py`), changed as each test needs.

Every bad file is submitted by its own fresh provider and node (an invalid verdict slashes the
provider and ejects the node for good), and every verdict is read back from the chain.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import psutil
import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from proofpool.devnet.adversary import reencode
from proofpool.devnet.market import devnet_pool_params, onboard_node
from proofpool.devnet.services import Service, wait_until
from proofpool_arithmetic.cache import ensure_devnet_model

from proofpool.core.rollout import RolloutFileMeta, RolloutSample, read_rollouts, rollouts_bytes
from proofpool.core.rollout.io import rollouts_table
from proofpool.inference.model import load_model
from proofpool.infra.chain.anvil import ANVIL_KEYS, free_port
from proofpool.infra.chain.bindings import NO_EVIDENCE, WorkStatus, reason_text
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import grant_validator, stake_validator_from_faucet
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore, evidence_key, rollout_key
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.market import Market
from tests.fixtures.pytorch_rows import assigned_rows

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

VERDICT_TIMEOUT = 120.0
SMALL_UPLOAD_CAP = 1 << 20
"""The validators' file size limit in these tests (PROOFPOOL_UPLOAD_MAX_BYTES), so `huge` is 2 MiB."""
SECOND_VALIDATOR = Account.from_key(ANVIL_KEYS[8])
CHALLENGE_WINDOW = 240
"""Seconds the contest test's pool gives a rejection (the review takes a few)."""
VISIBILITY_TIMEOUT = 10.0
"""The validators' PROOFPOOL_CELERY_VISIBILITY_TIMEOUT: seconds before Redis may redeliver the task of
a killed worker."""


def spawn_validator(market: Market, account: LocalAccount, name: str, metrics_port: int = 0) -> Service:
    port = metrics_port or free_port()
    return market.stack.spawn(
        name,
        ["validator", "run", "--key", account.key.hex(), "--concurrency", "1", "--metrics-port", str(port)],
        {
            "PROOFPOOL_CELERY_VISIBILITY_TIMEOUT": str(int(VISIBILITY_TIMEOUT)),
            "PROOFPOOL_VALIDATOR_MISSING_GRACE": "4",
            "PROOFPOOL_UPLOAD_MAX_BYTES": str(SMALL_UPLOAD_CAP),
            "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(market.stack.root / "validator-checkpoints"),
            "PROOFPOOL_VERDICT_MAX_WAIT": "1",
            "PROOFPOOL_VALIDATOR_REVIEW_INTERVAL": "1",
        },
    )


def children_of(service: Service) -> list[psutil.Process]:
    return psutil.Process(service.process.pid).children(recursive=True)


@dataclass
class Bench:
    """The validated market, its first validator, the store and an honest file to derive from."""

    market: Market
    validator: Service
    store: ObjectStore
    honest_rows: list[RolloutSample]
    honest_version: int
    first_key: bytes
    """The worker's own (honest) submission."""
    model: Any
    """The devnet model in bf16, to make honest files of fresh nodes (`rows_for`)."""

    @property
    def client(self) -> ChainClient:
        return self.market.stack.admin

    def new_node(self, pool_id: int | None = None) -> tuple[LocalAccount, ChainClient]:
        """A fresh provider (minted, staked) with a fresh node that joined the pool by itself."""
        admin, cast = self.client, self.market.stack.cast
        pool_id = pool_id or self.market.pool_id
        provider, node = Account.create(), Account.create()
        TxSender(admin.w3, cast.admin).transfer_eth(provider.address, 3 * 10**18)
        admin.token.mint(provider.address, 300 * TOKEN)
        onboard_node(admin, provider, node, 200 * TOKEN, compute_units=1, pools=(pool_id,))
        as_node = admin.as_account(node)
        expiry = admin.w3.eth.get_block("latest")["timestamp"] + 3600
        nonce = int.from_bytes(os.urandom(8), "big")
        as_node.pool.join_pool(
            sign_invite(cast.manager, pool_id, node.address, nonce, expiry, admin.chain_id, admin.pool.address)
        )
        return node, as_node

    def honest_file(self, node: str) -> bytes:
        return rollouts_bytes(RolloutFileMeta(self.market.pool_id, node), self.honest_rows)

    def submit(
        self, data: bytes, *, key: bytes | None = None, upload: bool = True, units: int | None = None, version=None
    ) -> bytes:
        node, as_node = self.new_node()
        key = key or hashlib.sha256(data).digest()
        if upload:
            self.store.put_object(rollout_key(self.market.pool_id, node.address, key.hex()), data)
        units = units if units is not None else sum(len(r.completion_tokens) for r in self.honest_rows)
        as_node.pool.submit_work(
            self.market.pool_id, node.address, key, units, self.honest_version if version is None else version
        )
        return key

    def rows_for(self, node: str, batch: int = 0, pool_id: int | None = None, version: int | None = None):
        """Honest rows of `node`'s batch `batch` (its own seed and problems, made with PyTorch):
        validators refuse rows of another node's batch."""
        version = self.honest_version if version is None else version
        return assigned_rows(self.model, pool_id or self.market.pool_id, node, version, batch)

    def submit_rows(
        self,
        change: Callable[[list[RolloutSample]], list[RolloutSample]] = list,
        version: int | None = None,
        batch: int = 0,
        pool_id: int | None = None,
    ) -> bytes:
        """Submit a fresh node's honest rows of its batch `batch` (the orchestrator handed it
        batch 0 only), passed through `change`, as its file (in the market's pool, or `pool_id`)."""
        pool_id = pool_id or self.market.pool_id
        version = self.honest_version if version is None else version
        node, as_node = self.new_node(pool_id)
        rows = change(self.rows_for(node.address, batch, pool_id, version))
        key = self.upload(node.address, rollouts_bytes(RolloutFileMeta(pool_id, node.address), rows), pool_id)
        units = sum(len(r.completion_tokens) for r in rows)
        as_node.pool.submit_work(pool_id, node.address, key, units, version)
        return key

    def upload(self, node: str, data: bytes, pool_id: int | None = None) -> bytes:
        """Put `data` where validators look for a file of `node`; returns its work key."""
        key = hashlib.sha256(data).digest()
        self.store.put_object(rollout_key(pool_id or self.market.pool_id, node, key.hex()), data)
        return key

    def verdict(self, key: bytes, timeout: float = VERDICT_TIMEOUT) -> tuple[str, str | None]:
        """("accepted", None) or ("invalid", reason) once the chain has a verdict on `key`."""
        pool = self.client.pool
        wait_until(
            lambda: pool.get_work(self.market.pool_id, key).status is not WorkStatus.PENDING,
            timeout=timeout,
            what=f"a verdict on 0x{key.hex()[:12]}",
            service=self.validator,
            poll=0.25,
        )
        status = pool.get_work(self.market.pool_id, key).status
        if status is WorkStatus.ACCEPTED:
            return "accepted", None
        events = [e for e in verdict_events(self.market) if e.args["workKey"] == key]
        return status.name.lower(), reason_text(events[-1].args["reason"]) if events else None


def verdict_events(market: Market) -> list:
    client = market.stack.admin
    logs = client.w3.eth.get_logs({"fromBlock": client.book.deploy_block, "address": client.pool.address})
    return [e for e in client.decoder().decode_logs(logs) if e.name in ("WorkAttested", "WorkInvalidated")]


def verdicts_on(market: Market, key: bytes) -> int:
    """How many verdict events name `key` (attestations count the key once per batch it is in)."""
    count = 0
    for event in verdict_events(market):
        keys = event.args.get("workKeys") or [event.args.get("workKey")]
        count += sum(1 for k in keys if k == key)
    return count


@pytest.fixture(scope="module")
def bench(
    validated_market: Market, seaweed: SeaweedProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Bench]:
    market = validated_market
    admin = market.stack.admin
    grant_validator(
        admin.w3, TxSender(admin.w3, market.stack.cast.admin), admin.book, market.stack.cast.validator.address
    )
    grant_validator(admin.w3, TxSender(admin.w3, market.stack.cast.admin), admin.book, SECOND_VALIDATOR.address)
    validator = spawn_validator(market, market.stack.cast.validator, "validator")
    store = ObjectStore.from_settings(seaweed.settings(get_settings()))

    worker = market.spawn_worker(tmp_path_factory.mktemp("validated-worker"), "--max-batches", "1")
    worker.process.wait(timeout=300)
    assert worker.process.returncode == 0, worker.log_tail()
    submitted = [
        e for e in admin.decoder().decode_logs(admin.w3.eth.get_logs({"fromBlock": admin.book.deploy_block,
                                                                      "address": admin.pool.address}))
        if e.name == "WorkSubmitted"
    ]  # fmt: skip
    assert len(submitted) == 1
    key = submitted[0].args["workKey"]
    _, rows = read_rollouts(store.get_object(rollout_key(market.pool_id, market.node, key.hex())))
    model = load_model(ensure_devnet_model(progress=None), "bf16")
    yield Bench(market, validator, store, rows, submitted[0].args["modelVersion"], key, model)


def test_an_honest_workers_file_is_attested(bench: Bench) -> None:
    assert bench.verdict(bench.first_key) == ("accepted", None)
    with psycopg.connect(bench.market.database_url) as conn:
        row = conn.execute(
            "SELECT validator, state, verdict, evidence->>'recomputed' FROM validations WHERE work_key = %s",
            (bench.first_key,),
        ).fetchone()
    assert row == (bench.market.stack.cast.validator.address, "sent", "accepted", "true")


def test_every_verdict_keeps_its_evidence_where_its_commitment_points(bench: Bench) -> None:
    """The evidence document is in the object store and hashes to the commitment the verdict sent."""
    bad = bench.submit(b"PAR1 not a parquet file either")
    assert bench.verdict(bad) == ("invalid", "not_parquet")
    validator = bench.market.stack.cast.validator.address
    for key, verdict in ((bench.first_key, "accepted"), (bad, "invalid")):
        with psycopg.connect(bench.market.database_url) as conn:
            (committed,) = conn.execute(
                "SELECT evidence_sha256 FROM validations WHERE work_key = %s", (key,)
            ).fetchone()
        document = bench.store.get_object(evidence_key(bench.market.pool_id, key.hex(), validator))
        assert hashlib.sha256(document).digest() == bytes(committed)
        parsed = json.loads(document)
        assert (parsed["file_sha256"], parsed["validator"], parsed["verdict"]) == (key.hex(), validator, verdict)
    client = bench.market.stack.admin
    logs = client.w3.eth.get_logs({"fromBlock": client.book.deploy_block, "address": client.pool.address})
    (event,) = [e for e in client.decoder().decode_logs(logs) if e.name == "WorkRejected" and e.args["workKey"] == bad]
    assert event.args["evidenceHash"] == bytes(committed)


def with_table(rows: list[RolloutSample], node: str, pool_id: int, change: Callable[[pa.Table], pa.Table]) -> bytes:
    """A Parquet file of `rows` whose Arrow table was changed by `change` before writing."""
    table = change(rollouts_table(RolloutFileMeta(pool_id, node), rows))
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


BAD_FILES: list[tuple[str, Callable[[Bench], bytes], str]] = [
    ("missing", lambda b: b.submit(b"never uploaded", upload=False), "missing"),
    ("sha256 differs from the work key",
     lambda b: b.submit(b.honest_file(Account.create().address), key=hashlib.sha256(b"other").digest()),
     "hash_mismatch"),
    ("not Parquet", lambda b: b.submit(b"PAR1 this is not a parquet file"), "not_parquet"),
    ("wrong schema: an extra column",
     lambda b: b.submit(with_table(b.honest_rows, Account.create().address, b.market.pool_id,
                                   lambda t: t.append_column("bonus", pa.array([1] * t.num_rows))),
                        ),
     "extra_column"),
    ("token ids out of range",
     lambda b: b.submit_rows(lambda rows: [replace(r, completion_tokens=(60_000,) * len(r.completion_tokens))
                                           for r in rows]),
     "token_out_of_range"),
    ("huge file", lambda b: b.submit(os.urandom(2 * SMALL_UPLOAD_CAP)), "file_too_large"),
    ("proofs cut short", lambda b: b.submit_rows(lambda rows: [replace(r, proofs=r.proofs[:7]) for r in rows]),
     "proof_count_mismatch"),
    ("hostile proofs of the right size",
     lambda b: b.submit_rows(lambda rows: [replace(r, proofs=bytes(len(r.proofs))) for r in rows]),
     "proof_malformed"),
    ("rows at a temperature other than the pool's",
     lambda b: b.submit_rows(lambda rows: [replace(r, temperature=0.5) for r in rows]), "temperature_mismatch"),
    ("the last group dropped", lambda b: b.submit_rows(lambda rows: rows[:-8]), "group_layout"),
    ("a batch the orchestrator has not handed out", lambda b: b.submit_rows(batch=3), "seed_not_assigned"),
    ("model version outside the async window",
     lambda b: b.submit_rows(lambda rows: [replace(r, model_version=9) for r in rows], version=9),
     "unknown_model_version"),
    ("rows of another node's batch", lambda b: b.submit_rows(lambda _: b.honest_rows), "seed_not_assigned"),
]  # fmt: skip


@pytest.mark.parametrize("case, make, reason", BAD_FILES, ids=[c for c, _, _ in BAD_FILES])
def test_bad_submission_gets_a_verdict_with_its_reason_and_the_validator_keeps_running(
    bench: Bench, case: str, make: Callable[[Bench], bytes], reason: str
) -> None:
    key = make(bench)
    assert bench.verdict(key) == ("invalid", reason), case
    assert verdicts_on(bench.market, key) == 1
    assert bench.validator.alive


def test_an_honest_file_of_another_node_is_accepted_by_the_same_validator(bench: Bench) -> None:
    key = bench.submit_rows()
    assert bench.verdict(key) == ("accepted", None)


def test_one_batch_in_two_files_is_paid_once(bench: Bench) -> None:
    """The same rows re-encoded (another work key) pass every per-file check; the batch is claimed
    by whichever file is accepted first and the other is `duplicate_batch`."""
    node, as_node = bench.new_node()
    rows = bench.rows_for(node.address)
    meta = RolloutFileMeta(bench.market.pool_id, node.address)
    files = [rollouts_bytes(meta, rows), reencode(meta, rows, 1).data]
    units = sum(len(r.completion_tokens) for r in rows)
    keys = []
    for data in files:
        keys.append(bench.upload(node.address, data))
        as_node.pool.submit_work(bench.market.pool_id, node.address, keys[-1], units, bench.honest_version)
    verdicts = sorted((bench.verdict(k) for k in keys), key=str)
    assert verdicts == [("accepted", None), ("invalid", "duplicate_batch")]
    assert [verdicts_on(bench.market, k) for k in keys] == [1, 1]


def test_sigkill_mid_task_redelivers_and_exactly_one_verdict_lands(bench: Bench, seaweed: SeaweedProcess) -> None:
    """The validator is SIGKILLed while its task downloads the file; the task goes back to the queue
    and the restarted validator judges the submission, once.

    Kombu's Redis transport puts back unacknowledged tasks older than the visibility timeout when a
    consumer starts, and after that only every 100 s (`unacked_restore_interval` 10 s times
    `unacked_restore_throttle` 10). So the restarted validator is started once the killed task is
    that old: started sooner, its first look would find the task too young and the next one would
    come 100 s later."""
    key = bench.submit_rows()
    os.kill(seaweed.pid, signal.SIGSTOP)  # the task hangs in its download: killed mid-task
    try:

        def claimed() -> bool:
            with psycopg.connect(bench.market.database_url) as conn:
                return conn.execute("SELECT 1 FROM validations WHERE work_key = %s", (key,)).fetchone() is not None

        wait_until(claimed, timeout=VERDICT_TIMEOUT, what="the task to claim the submission", service=bench.validator)
        claimed_at = time.monotonic()  # the task was delivered before it claimed
        for child in children_of(bench.validator):
            child.kill()
        bench.validator.kill()
    finally:
        os.kill(seaweed.pid, signal.SIGCONT)
    time.sleep(max(0.0, claimed_at + VISIBILITY_TIMEOUT + 0.5 - time.monotonic()))
    bench.validator = spawn_validator(bench.market, bench.market.stack.cast.validator, "validator-restarted")
    assert bench.verdict(key, timeout=VERDICT_TIMEOUT + 30) == ("accepted", None)
    time.sleep(2)  # a second verdict would follow within a flush interval
    assert verdicts_on(bench.market, key) == 1


def test_two_validators_never_both_judge_a_submission(bench: Bench) -> None:
    second = spawn_validator(bench.market, SECOND_VALIDATOR, "validator-second")
    try:
        keys = [bench.submit_rows() for _ in range(6)]
        assert [bench.verdict(k)[0] for k in keys] == ["accepted"] * 6
        time.sleep(2)
        assert [verdicts_on(bench.market, k) for k in keys] == [1] * 6
        with psycopg.connect(bench.market.database_url) as conn:
            owners = conn.execute(
                "SELECT work_key, validator FROM validations WHERE work_key = ANY(%s)", (keys,)
            ).fetchall()
        assert len(owners) == 6  # one row, one owner per key
        assert second.alive and bench.validator.alive
    finally:
        second.stop()


def test_a_rogue_rejection_is_contested_by_recomputation_and_overturned(bench: Bench) -> None:
    """The rogue-validator attack against the running market: in a pool with a challenge window, a
    second validator key rejects an honest file the first attested. The first validator sees the
    rejection indexed, recomputes the file, contests, and the quorum of one overturns it: the work
    is Accepted again, the provider keeps its stake and the rogue validator pays its slash."""
    admin, cast = bench.client, bench.market.stack.cast
    params = replace(devnet_pool_params(cast), challenge_window=CHALLENGE_WINDOW, contest_quorum=1)
    pool_id, _ = admin.pool.create_pool(params)
    admin.token.approve(admin.pool.address, 100 * TOKEN)
    admin.pool.fund_pool(pool_id, 100 * TOKEN)
    admin.pool.start_pool(pool_id)
    key = bench.submit_rows(pool_id=pool_id, version=0)  # no checkpoint: the base model
    pool = admin.pool
    wait_until(lambda: pool.get_work(pool_id, key).status is WorkStatus.ACCEPTED, timeout=VERDICT_TIMEOUT,
               what="the honest file attested", service=bench.validator, poll=0.25)  # fmt: skip
    provider = pool.get_work(pool_id, key).provider
    stake_before = admin.stake_manager.active_stake(provider)
    fee_before = pool.reward_balance(cast.validator.address)

    rogue = admin.as_account(SECOND_VALIDATOR)
    rogue.pool.invalidate_work(pool_id, key, "made_up", NO_EVIDENCE)
    assert pool.get_work(pool_id, key).status is WorkStatus.REJECTED

    wait_until(lambda: pool.get_work(pool_id, key).status is WorkStatus.ACCEPTED, timeout=CHALLENGE_WINDOW / 2,
               what="the rejection overturned", service=bench.validator, poll=0.5)  # fmt: skip
    logs = admin.w3.eth.get_logs({"fromBlock": admin.book.deploy_block, "address": pool.address})
    events = [e for e in admin.decoder().decode_logs(logs) if e.args.get("workKey") == key]
    (contest,) = [e for e in events if e.name == "RejectionContested"]
    assert contest.args["validator"] == cast.validator.address
    (slash,) = [e for e in events if e.name == "ValidatorSlashed"]
    assert (slash.args["validator"], slash.args["beneficiary"]) == (SECOND_VALIDATOR.address, cast.validator.address)
    assert admin.stake_manager.active_stake(provider) == stake_before
    assert pool.reward_balance(cast.validator.address) == fee_before + slash.args["amount"] > fee_before
    validator = cast.validator.address
    with psycopg.connect(bench.market.database_url) as conn:
        (state, committed) = conn.execute(
            "SELECT state, evidence_sha256 FROM reviews WHERE work_key = %s AND validator = %s", (key, validator)
        ).fetchone()
    assert state in ("sent", "settled") and bytes(committed) == contest.args["evidenceHash"]
    review_doc = [o for o in bench.store.list_objects(f"pools/{pool_id}/evidence/{key.hex()}/") if "review" in o.key]
    (doc,) = review_doc
    assert hashlib.sha256(bench.store.get_object(doc.key)).digest() == bytes(committed)
    # The slashed key is below the minimum now; the later tests run it as a validator again.
    stake_validator_from_faucet(admin.w3, TxSender(admin.w3, cast.admin), admin.book, SECOND_VALIDATOR.address)


def test_status_shows_verdicts_earnings_and_queues_and_metrics_are_served(bench: Bench) -> None:
    port = free_port()
    second = spawn_validator(bench.market, SECOND_VALIDATOR, "validator-metrics", metrics_port=port)
    try:
        key = bench.submit_rows()
        bench.verdict(key)
        reply = subprocess.run(
            [sys.executable, "-m", "proofpool.cli.main", "validator", "status",
             bench.market.stack.cast.validator.address, "--json"],
            env=bench.market.stack.env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert reply.returncode == 0, reply.stderr
        status = json.loads(reply.stdout)
        assert status["has_validator_role"] is True
        invalid = len(BAD_FILES) + 2  # and the duplicate batch, and the evidence test's file
        assert status["verdicts_sent"]["invalid"] == invalid
        assert status["verdicts_sent"]["accepted"] >= 3
        assert status["slashes_reported"] == invalid
        assert int(status["slash_shares_earned"]) > 0
        assert set(status["queue_depth"]) == {"validate", "verdicts", "reviews"}

        def served() -> bool:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
            except httpx.HTTPError:
                return False
            return "proofpool_validations_total" in text

        wait_until(served, timeout=60, what="the validator's metrics", service=second)
    finally:
        second.stop()
