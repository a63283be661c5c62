"""The worker's train mode without services: a round's update file (made by the honest strategy or
another one, read back with the claims validators check), the journal's update files and its
upgrade of older journals, the round's log line, the upload asking for an update URL, and the
heartbeats that keep going while a round trains. The chain and the store are not used here
(tests/integration/test_worker_train.py runs the loop on the real market); the backend API is a
fake that records what it is asked."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from eth_account import Account
from proofpool.worker.console import WorkerConsole
from proofpool.worker.journal import PENDING_STATES, ROLLOUT_SUFFIX, UPDATE_SUFFIX, BatchState, Journal
from proofpool.worker.node import WorkerConfig, WorkerNode
from proofpool.worker.retry import Backoff
from proofpool.worker.train import (
    HonestTraining,
    RoundTimes,
    TrainNode,
    base_manifest_sha256,
    make_round_file,
    round_line,
)
from rich.console import Console

from proofpool.core.diloco.compare import relative_l2
from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.spec import (
    CodecSpec,
    DilocoData,
    DilocoModel,
    DilocoSpec,
    InnerSpec,
    OuterSpec,
    ReplaySpec,
    RoundSpec,
)
from proofpool.core.diloco.update_file import UpdateFileError, read_update
from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.http.node_api import Heartbeat
from proofpool.infra.http.signed_client import ApiRefused
from proofpool.training.inner import InnerResult, TrainJob, load_model, parameter_shapes, run_inner
from tests.unit.test_training_inner import SEQ_LEN, VOCAB, tiny_llama

NODE = Account.from_key(ANVIL_KEYS[6])
BASE = "ab" * 32
SPEC = DilocoSpec(
    model=DilocoModel("LlamaForCausalLM", VOCAB, uri="s3://bucket/models/x/", manifest_sha256=BASE),
    dataset=DilocoData("ef" * 32, 64, SEQ_LEN, 8),
    inner=InnerSpec(steps=3, batch_size=2, lr=1e-3),
    outer=OuterSpec(),
    codec=CodecSpec(),
    round=RoundSpec(deadline_seconds=60, min_contributors=1),
    validation=ReplaySpec(),
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("llama") / "model")


@pytest.fixture(scope="module")
def job(model_dir: Path) -> TrainJob:
    tokens = torch.randint(0, VOCAB, (64, SEQ_LEN), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    rows = node_rows(SPEC, 4, 2, NODE.address)
    return TrainJob(4, 2, NODE.address, model_dir, tokens, rows, SPEC.inner)


@pytest.fixture(scope="module")
def honest(job: TrainJob) -> InnerResult:
    return run_inner(job)


class Scaled:
    """A strategy that submits ten times the honest pseudo-gradient (a devnet cheat's shape)."""

    def __init__(self) -> None:
        self.asked: list[TrainJob] = []

    def pseudo_gradient(self, job: TrainJob, honest: Any) -> InnerResult:
        self.asked.append(job)
        result = honest(job)
        return replace(result, pseudo_gradient={k: 10 * v for k, v in result.pseudo_gradient.items()})


# --------------------------------------------------------------------------- the round's file


def test_a_round_file_carries_the_claims_validators_check_and_the_honest_update(
    job: TrainJob, honest: InnerResult, model_dir: Path
) -> None:
    made = make_round_file(SPEC, job, BASE, HonestTraining())
    assert made.work_key == hashlib.sha256(made.data).digest()
    shapes = parameter_shapes(load_model(model_dir))
    update = read_update(made.data, shapes, codec="int8", block_size=0)
    meta = update.meta
    assert (meta.pool_id, meta.node, meta.round) == (4, NODE.address, 2)
    assert (meta.base_manifest_sha256, meta.spec_sha256) == (BASE, SPEC.sha256())
    assert (meta.codec, meta.block_size, meta.inner_steps) == ("int8", 0, 3)
    assert meta.tokens == SPEC.work_units == 3 * 2 * SEQ_LEN
    assert meta.losses == made.losses == tuple(honest.losses) and len(meta.losses) == 3
    assert relative_l2(update.dequantized(), honest.pseudo_gradient) < SPEC.validation.tolerance
    assert made.inner_seconds > 0 and made.encode_seconds > 0


def test_the_same_round_makes_the_same_file(job: TrainJob) -> None:
    """What a restarted node would make again (it never does: the journal holds the round)."""
    first, second = (make_round_file(SPEC, job, BASE, HonestTraining()) for _ in range(2))
    assert first.work_key == second.work_key


def test_the_strategy_makes_the_pseudo_gradient_from_the_honest_run(job: TrainJob, honest: InnerResult) -> None:
    scaled = Scaled()
    made = make_round_file(SPEC, job, BASE, scaled)
    assert scaled.asked == [job]
    values = read_update(made.data).dequantized()
    expected = {k: 10 * v for k, v in honest.pseudo_gradient.items()}
    assert relative_l2(values, expected) < 0.05
    assert relative_l2(values, honest.pseudo_gradient) > 5  # not the honest update


def test_the_devnet_train_cheater_plugs_in_as_a_strategy(job: TrainJob, honest: InnerResult) -> None:
    from proofpool.devnet.diloco.cheats import TrainCheat, TrainCheater

    made = make_round_file(SPEC, job, BASE, TrainCheater(TrainCheat.SCALED))
    expected = {k: 10 * v for k, v in honest.pseudo_gradient.items()}
    assert relative_l2(read_update(made.data).dequantized(), expected) < 0.05


def test_an_fp32_pool_gets_unquantized_values(job: TrainJob, honest: InnerResult) -> None:
    spec = replace(SPEC, codec=CodecSpec(name="fp32"))
    update = read_update(make_round_file(spec, job, BASE, HonestTraining()).data, codec="fp32")
    assert relative_l2(update.dequantized(), honest.pseudo_gradient) == 0.0


def test_a_diverged_round_is_not_encoded(job: TrainJob) -> None:
    class Diverged:
        def pseudo_gradient(self, job: TrainJob, honest: Any) -> InnerResult:
            shapes = {"w": torch.full((2, 2), float("nan"))}
            return InnerResult(shapes, [float("nan")] * job.inner.steps, SPEC.work_units, 0.1)

    with pytest.raises(UpdateFileError):
        make_round_file(SPEC, job, BASE, Diverged())


def test_the_base_manifest_is_the_specs_for_version_0_and_the_chains_after() -> None:
    on_chain = bytes.fromhex("cd" * 32)
    assert base_manifest_sha256(SPEC, 0, b"\x00" * 32) == BASE
    assert base_manifest_sha256(SPEC, 3, on_chain) == "cd" * 32
    unpublished = replace(SPEC, model=DilocoModel("LlamaForCausalLM", VOCAB))
    with pytest.raises(Exception, match="never published"):
        base_manifest_sha256(unpublished, 0, b"")


# --------------------------------------------------------------------------- the journal


def test_an_update_file_is_journaled_under_its_suffix_and_deleted_once_submitted(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    data = b"an update file"
    key = hashlib.sha256(data).digest()
    entry = journal.record_written(4, 2, 0, key, data, 192, 6, suffix=UPDATE_SUFFIX)
    assert entry.suffix == UPDATE_SUFFIX
    path = tmp_path / "files" / f"{key.hex()}.safetensors"
    assert path.read_bytes() == data and not (tmp_path / "files" / f"{key.hex()}.parquet").exists()
    journal.close()

    reopened = Journal(tmp_path)
    again = reopened.get(4, 2, 0)
    assert again == entry and reopened.read_file(again) == data
    assert reopened.remove_orphans() == 0  # pending: kept
    reopened.set_state(reopened.set_state(again, BatchState.UPLOADED), BatchState.SUBMITTED, tx_hash="0x1")
    assert not path.exists()


def test_orphaned_update_files_are_removed_like_rollout_files(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    data = b"pending update"
    pending = journal.record_written(4, 0, 0, hashlib.sha256(data).digest(), data, 1, 1, suffix=UPDATE_SUFFIX)
    orphan = journal.files_dir / ("ab" * 32 + ".safetensors")
    orphan.write_bytes(b"crashed before its row")
    assert journal.remove_orphans() == 1
    assert not orphan.exists() and journal.read_file(pending) == data


def test_an_unknown_suffix_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown file suffix"):
        Journal(tmp_path).record_written(4, 0, 0, b"\x01" * 32, b"x", 1, 1, suffix="exe")


OLD_SCHEMA = """
CREATE TABLE batches (
    pool_id INTEGER NOT NULL, version INTEGER NOT NULL, batch INTEGER NOT NULL, work_key TEXT NOT NULL UNIQUE,
    work_units INTEGER NOT NULL, samples INTEGER NOT NULL, state TEXT NOT NULL, reported INTEGER NOT NULL DEFAULT 0,
    tx_hash TEXT, error TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (pool_id, version, batch)
)"""


def test_a_journal_from_before_training_pools_reads_its_rollout_files_and_takes_updates(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    key = hashlib.sha256(b"old rollouts").digest()
    (tmp_path / "files" / f"{key.hex()}.parquet").write_bytes(b"old rollouts")
    old = sqlite3.connect(tmp_path / "journal.sqlite3")
    old.execute(OLD_SCHEMA)
    old.execute("INSERT INTO batches VALUES (1, 0, 5, ?, 10, 4, 'written', 0, NULL, NULL, 1.0, 1.0)", (key.hex(),))
    old.commit()
    old.close()

    journal = Journal(tmp_path)
    (entry,) = journal.in_state(1, *PENDING_STATES)
    assert (entry.batch, entry.suffix) == (5, ROLLOUT_SUFFIX)
    assert journal.read_file(entry) == b"old rollouts"
    update = journal.record_written(2, 0, 0, b"\x02" * 32, b"update", 1, 1, suffix=UPDATE_SUFFIX)
    assert journal.read_file(update) == b"update"
    journal.close()
    assert Journal(tmp_path).get(1, 0, 5) == entry  # reopening an upgraded journal changes nothing


# --------------------------------------------------------------------------- the round's line


def test_the_round_line_says_losses_phases_size_and_transaction(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    entry = journal.record_written(4, 3, 0, b"\x03" * 32, b"u", 1, 1, suffix=UPDATE_SUFFIX)
    sent = journal.set_state(entry, BatchState.SUBMITTED, tx_hash="0x" + "ee" * 32)
    times = RoundTimes(checkpoint=0.5, inner=12.25, quantize=0.125, upload=0.375, submit=1.0)
    line = round_line(3, (5.2104, 4.8699), times, 1_234_567, sent)
    assert line.startswith("round 3: loss 5.210 -> 4.870 · ")
    assert "checkpoint 0.50 s, inner 12.25 s, quantize 0.12 s, upload 0.38 s, submit 1.00 s" in line
    assert "1.23 MB" in line and "tx 0xeeeeeeeeee" in line and "0x0303030303" in line
    abandoned = journal.set_state(entry, BatchState.ABANDONED, error="version 3 is below 4")
    assert "abandoned[/red]: version 3 is below 4" in round_line(3, (), times, 10, abandoned)


# --------------------------------------------------------------------------- the node's API


class Backend:
    """The backend API as a node sees it: heartbeats answered (or refused), uploads recorded and refused."""

    def __init__(self, refuse_heartbeats: int = 0) -> None:
        self.beats = 0
        self.refuse_heartbeats = refuse_heartbeats
        self.uploads: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def heartbeat(self, pool_id: int, completed: object = None, unservable: object = None) -> Heartbeat:
        with self._lock:
            self.beats += 1
            if self.beats <= self.refuse_heartbeats:
                raise ApiRefused(400, "bad_request", "refused by the test")
        return Heartbeat(NODE.address, "healthy", pool_id, None, heartbeat_interval=0.01, server_time=0.0)

    def request_upload(self, pool_id: int, sha256: bytes, size: int, format: str = "rollouts") -> Any:
        self.uploads.append({"pool_id": pool_id, "sha256": sha256, "size": size, "format": format})
        raise ApiRefused(400, "stop_here", "the test only looks at the request")


class NoChain:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the chain ({name}) is not used here")


def node_with(tmp_path: Path, api: Backend) -> WorkerNode:
    config = WorkerConfig(
        pool_id=4,
        state_dir=tmp_path / "state",
        checkpoint_cache_dir=tmp_path / "cache",
        idle_interval=0.01,
        backoff=Backoff(initial=0.001, maximum=0.002),
    )
    console = WorkerConsole(NODE.address, "http://127.0.0.1:9", Console(file=open("/dev/null", "w")))  # noqa: SIM115
    return WorkerNode(config, NODE, NoChain(), api, lambda: NoChain(), console)  # type: ignore[arg-type]


def test_an_update_file_asks_for_an_update_upload_url_and_a_rollout_file_for_a_rollout_one(tmp_path: Path) -> None:
    api = Backend()
    node = node_with(tmp_path, api)
    update = node.journal.record_written(4, 1, 0, b"\x04" * 32, b"update bytes", 9, 6, suffix=UPDATE_SUFFIX)
    rollout = node.journal.record_written(4, 1, 1, b"\x05" * 32, b"rollout bytes", 9, 6)
    for entry in (update, rollout):
        with pytest.raises(ApiRefused, match="stop_here"):
            node.store_file(entry)
    assert [(u["sha256"], u["size"], u["format"]) for u in api.uploads] == [
        (b"\x04" * 32, 12, "update"),
        (b"\x05" * 32, 13, "rollouts"),
    ]
    assert node.journal.get(4, 1, 0).state is BatchState.WRITTEN  # type: ignore[union-attr]
    node.journal.close()


def test_heartbeats_keep_going_while_a_round_trains_and_stop_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = Backend(refuse_heartbeats=1)  # the first background heartbeat fails: logged, not fatal
    node = node_with(tmp_path, api)
    trainer = TrainNode(node)
    with caplog.at_level(logging.WARNING, logger="proofpool.worker.train"), trainer.pulse():
        deadline = time.monotonic() + 5.0
        while api.beats < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    after = api.beats
    assert after >= 4, "heartbeats stopped while the round ran"
    assert "background heartbeat failed" in caplog.text and "refused by the test" in caplog.text
    time.sleep(0.1)
    assert api.beats == after, "heartbeats went on after the round"
    node.journal.close()
