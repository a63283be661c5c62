"""`proofpool worker run` on a training pool in the real market: anvil, PostgreSQL, Redis,
SeaweedFS, the indexer and the backend as processes, a `diloco://` pool whose spec, tiny Llama and
dataset are published in the store, and the worker as a child process (no vLLM: train mode).

In order, sharing one node and one journal directory: a worker joins and submits its update file
of round 0 (the file in the store under `update_key`, its sha256 the work key, its claims those
of the spec and the chain); a restarted worker does not train round 0 again but waits, heartbeating,
for checkpoint 1; once the round's checkpoint is published (the real outer step on the submitted
file) it trains round 1 from it and submits, and SIGTERM ends it cleanly.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from proofpool.devnet.market import PROVIDER_STAKE, devnet_pool_params
from proofpool.devnet.services import Service, wait_until
from proofpool.worker.journal import UPDATE_SUFFIX, BatchState, Journal, JournalEntry

from proofpool.core.diloco.spec import CodecSpec, DilocoModel, DilocoSpec, InnerSpec, OuterSpec, ReplaySpec, RoundSpec
from proofpool.core.diloco.update_file import Update, read_update
from proofpool.infra.chain.bindings import MemberState
from proofpool.infra.chain.events import ChainEvent
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.checkpoint import publish_checkpoint
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore, update_key
from proofpool.infra.storage.seaweed import SeaweedProcess
from proofpool.training.dataset import dataset_spec, write_dataset
from proofpool.training.inner import load_model, parameter_shapes
from proofpool.training.published import diloco_uri, publish_diloco_spec
from proofpool.training.rounds import outer_round, round_checkpoint, write_round_checkpoint
from tests.fixtures.market import Market
from tests.unit.test_training_inner import SEQ_LEN, VOCAB, tiny_llama

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STARTUP = 180.0
"""Seconds a worker may take to start, join and finish a round of the tiny model on 2 busy cores."""


@dataclasses.dataclass(frozen=True)
class TrainingPool:
    market: Market
    pool_id: int
    spec: DilocoSpec
    store: ObjectStore
    root: Path

    def spawn_worker(self, state_dir: Path, *args: str, name: str) -> Service:
        """`proofpool worker run` for alice's node on the training pool, journal in `state_dir`."""
        return self.market.stack.spawn(
            name,
            [
                "worker",
                "run",
                "--pool",
                str(self.pool_id),
                "--state-dir",
                str(state_dir),
                "--idle-interval",
                "0.5",
                *args,
            ],
            {
                "PROOFPOOL_NODE_KEY": self.market.node_key,
                "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(self.root / "checkpoints"),
                "OMP_NUM_THREADS": "1",
            },
        )


@pytest.fixture(scope="module")
def training_pool(
    market: Market, seaweed: SeaweedProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TrainingPool]:
    """A training pool on the market's chain, its spec published, alice's provider approving it."""
    root = tmp_path_factory.mktemp("training-pool")
    model = tiny_llama(root / "model", seed=5)
    rows = torch.randint(0, VOCAB, (40, SEQ_LEN), generator=torch.Generator().manual_seed(23), dtype=torch.int32)
    write_dataset(rows, root / "data.safetensors", name="worker-train")
    spec = DilocoSpec(
        model=DilocoModel("LlamaForCausalLM", VOCAB),
        dataset=dataset_spec(root / "data.safetensors", eval_sequences=8),
        inner=InnerSpec(steps=3, batch_size=2, lr=1e-3),
        outer=OuterSpec(),
        codec=CodecSpec(),
        round=RoundSpec(deadline_seconds=60, min_contributors=1),
        validation=ReplaySpec(),
    )
    store = ObjectStore.from_settings(seaweed.settings(get_settings()))
    stored = publish_diloco_spec(store, spec, model, root / "data.safetensors")
    admin, cast = market.stack.admin, market.stack.cast
    sha = stored.sha256()
    params = dataclasses.replace(devnet_pool_params(cast), model_uri=diloco_uri(sha), spec_sha256=bytes.fromhex(sha))
    pool_id, _ = admin.pool.create_pool(params)
    admin.token.approve(admin.pool.address, 100 * TOKEN)
    admin.pool.fund_pool(pool_id, 100 * TOKEN)
    admin.pool.start_pool(pool_id)
    admin.as_account(cast.alice).pool.approve_pool(pool_id, PROVIDER_STAKE)
    yield TrainingPool(market, pool_id, stored, store, root)


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node's state directory, kept across the tests like a provider's disk across restarts."""
    return tmp_path_factory.mktemp("worker-train-state")


def submissions(pool: TrainingPool) -> list[ChainEvent]:
    """Every WorkSubmitted of the pool, in chain order."""
    client = pool.market.stack.admin
    logs = client.w3.eth.get_logs(
        {"fromBlock": client.book.deploy_block, "toBlock": "latest", "address": client.pool.address}
    )
    return [
        e for e in client.decoder().decode_logs(logs) if e.name == "WorkSubmitted" and e.args["poolId"] == pool.pool_id
    ]


def journal_entries(journal_dir: Path, pool_id: int) -> list[JournalEntry]:
    journal = Journal(journal_dir)
    try:
        return journal.entries(pool_id)
    finally:
        journal.close()


def stored_update(pool: TrainingPool, event: ChainEvent) -> tuple[str, Update]:
    """The submitted file, checked against its work key and read with the model's shapes and codec."""
    key = event.args["workKey"]
    data = pool.store.get_object(update_key(pool.pool_id, pool.market.node, key.hex()))
    assert hashlib.sha256(data).digest() == key
    shapes = parameter_shapes(load_model(pool.root / "model"))
    return key.hex(), read_update(data, shapes, codec="int8", block_size=0)


def assert_round_submitted(pool: TrainingPool, event: ChainEvent, version: int, base_manifest: str) -> Update:
    """The submission of round `version` is the node's, and its file claims what the chain and spec say."""
    assert (event.args["node"], event.args["modelVersion"]) == (pool.market.node, version)
    assert event.args["workUnits"] == pool.spec.work_units == 3 * 2 * SEQ_LEN
    _, update = stored_update(pool, event)
    meta = update.meta
    assert (meta.pool_id, meta.node, meta.round) == (pool.pool_id, pool.market.node, version)
    assert (meta.spec_sha256, meta.base_manifest_sha256) == (pool.spec.sha256(), base_manifest)
    assert meta.tokens == pool.spec.work_units and len(meta.losses) == pool.spec.inner.steps
    return update


def test_a_worker_joins_a_training_pool_and_submits_its_round_0_update(
    training_pool: TrainingPool, journal_dir: Path
) -> None:
    pool, client = training_pool, training_pool.market.stack.admin
    worker = pool.spawn_worker(journal_dir, "--max-batches", "1", name="train-worker")
    worker.process.wait(timeout=STARTUP)
    assert worker.process.returncode == 0, worker.log_tail()

    assert client.pool.get_member(pool.pool_id, pool.market.node).state is MemberState.ACTIVE
    (event,) = submissions(pool)
    assert_round_submitted(pool, event, 0, str(pool.spec.model.manifest_sha256))
    (entry,) = journal_entries(journal_dir, pool.pool_id)
    assert (entry.version, entry.batch, entry.suffix) == (0, 0, UPDATE_SUFFIX)
    assert (entry.state, entry.work_key) == (BatchState.SUBMITTED, event.args["workKey"])
    assert not list((journal_dir / "files").iterdir()), "a submitted file was kept"
    log = worker.log_path.read_text()
    assert "joined pool" in log and "round 0: loss" in log and "round trained" in log


def test_a_restarted_worker_waits_for_the_next_checkpoint_then_trains_from_it(
    training_pool: TrainingPool, journal_dir: Path
) -> None:
    pool = training_pool
    worker = pool.spawn_worker(journal_dir, name="train-worker-waits")
    wait_until(
        lambda: "waiting for checkpoint 1" in worker.log_path.read_text(),
        timeout=STARTUP,
        what="the restarted worker waiting for checkpoint 1",
        service=worker,
    )
    assert len(submissions(pool)) == 1, "round 0 was trained twice"
    assert worker.alive

    # The round's outer step, as the aggregator takes it, on the one submitted file.
    (first,) = submissions(pool)
    base = str(pool.spec.model.manifest_sha256)
    v0 = round_checkpoint(None, pool.store, pool.spec, pool.pool_id, 0, pool.root / "aggregator")
    weights, momentum, record = outer_round(v0, [stored_update(pool, first)], pool.spec, pool.pool_id, 0, base)
    write_round_checkpoint(v0, weights, momentum, record, pool.root / "v1")
    manager = pool.market.stack.admin.as_account(pool.market.stack.cast.manager)
    published = publish_checkpoint(
        manager, pool.store, pool.pool_id, 1, pool.root / "v1", prefix=f"test/{uuid.uuid4().hex}/"
    )

    wait_until(lambda: len(submissions(pool)) == 2, timeout=STARTUP, what="the round 1 submission", service=worker)
    started = time.monotonic()
    assert worker.stop(timeout=30) == 0, worker.log_tail()  # SIGTERM: clean exit within 30 s
    assert time.monotonic() - started < 30

    second = submissions(pool)[1]
    assert_round_submitted(pool, second, 1, published.manifest_sha256.hex())
    entries = journal_entries(journal_dir, pool.pool_id)
    assert [(e.version, e.state) for e in entries] == [(0, BatchState.SUBMITTED), (1, BatchState.SUBMITTED)]
    assert "checkpoint 1" in worker.log_path.read_text()
