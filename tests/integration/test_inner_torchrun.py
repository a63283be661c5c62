"""A training pool's inner phase on several processes: what `proofpool worker run
--train-processes 2` runs (`HonestTraining(2)`: `torchrun --nproc-per-node 2 -m proofpool.cli.main
training inner`, gloo on CPU, the model sharded with FSDP per decoder layer) on a tiny Llama with
tied embeddings and a gradient clip that binds.

Each rank trains on half of every step's rows, so the pseudo-gradient equals the one-process
`run_inner` only if FSDP's averaged gradient is the whole batch's and the clip sees the global
norm: measured at relative L2 ~2e-6 (float summation order) where a run on one rank's half of the
rows is 0.9 away; a validator replaying in one process accepts its int8 file. A batch that does
not split evenly is refused before any process starts; stopping the worker ends torchrun and its
ranks, and its timeout (every torchrun call has one: `HonestTraining(timeout=...)`) ends torchrun
the same way; pytest-timeout ends each test.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch
from proofpool.cli.main import app
from proofpool.worker.retry import Stopped
from proofpool.worker.train import HonestTraining
from typer.testing import CliRunner

from proofpool.core.diloco.compare import compare_update, relative_l2
from proofpool.core.diloco.spec import InnerSpec, ReplaySpec
from proofpool.core.diloco.update_file import UpdateMeta, encode_update, read_update
from proofpool.core.errors import ProofpoolError
from proofpool.training.distributed import World
from proofpool.training.inner import (
    InnerFileError,
    InnerResult,
    TrainJob,
    load_model,
    parameter_shapes,
    read_job,
    read_result,
    run_inner,
    write_job,
)
from tests.unit.test_training_inner import NODES, SEQ_LEN, VOCAB, tiny_llama

pytestmark = pytest.mark.slow

TORCHRUN_TIMEOUT = 120.0
"""Seconds a torchrun of the tiny model gets (it takes about 20 s on 2 busy cores)."""
INNER = InnerSpec(steps=4, batch_size=4, lr=1e-3, warmup_steps=1, weight_decay=0.01, grad_clip=0.5)
"""grad_clip 0.5 is below the first step's gradient norm (0.76): the clip acts on the global norm."""
SHARDED_BOUND = 1e-5
"""Relative L2 between 2 ranks and one process; measured 1.8e-6."""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> TrainJob:
    model = tiny_llama(tmp_path_factory.mktemp("llama") / "model")
    tokens = torch.randint(0, VOCAB, (64, SEQ_LEN), generator=torch.Generator().manual_seed(7), dtype=torch.int32)
    rows = torch.randint(0, 64, (INNER.steps * INNER.batch_size,), generator=torch.Generator().manual_seed(3))
    return TrainJob(
        pool_id=1, round=0, node=NODES[0], checkpoint_dir=model, tokens=tokens, rows=rows.tolist(), inner=INNER
    )


@pytest.fixture(scope="module")
def single(job: TrainJob) -> InnerResult:
    return run_inner(job)


def not_in_one_process(job: TrainJob) -> InnerResult:
    pytest.fail("HonestTraining(2) ran the inner phase in the worker's process")


@pytest.mark.timeout(300)
def test_two_processes_make_the_one_process_pseudo_gradient_and_a_validator_accepts_it(
    job: TrainJob, single: InnerResult, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="proofpool.worker.train"):
        sharded = HonestTraining(2, timeout=TORCHRUN_TIMEOUT).pseudo_gradient(job, not_in_one_process)
    assert "round 0 inner: round 0: 4 inner steps on 2 processes" in caplog.text  # rank 0's line, logged

    assert sharded.pseudo_gradient.keys() == single.pseudo_gradient.keys()
    for name, tensor in single.pseudo_gradient.items():
        assert (
            sharded.pseudo_gradient[name].shape == tensor.shape and sharded.pseudo_gradient[name].dtype == torch.float32
        )
    distance = relative_l2(sharded.pseudo_gradient, single.pseudo_gradient)
    assert distance <= SHARDED_BOUND, distance
    assert sharded.losses == pytest.approx(single.losses, rel=1e-6)  # each step's loss: the mean over both ranks
    assert sharded.tokens == single.tokens == INNER.steps * INNER.batch_size * SEQ_LEN

    # Control: one rank's half of the rows, trained alone, is nowhere near: the bound above only
    # holds when both halves reached every step's gradient.
    half = [row for step in range(INNER.steps) for row in job.rows[step * 4 : (step + 1) * 4 : 2]]
    alone = run_inner(dataclasses.replace(job, rows=half, inner=dataclasses.replace(INNER, batch_size=2)))
    assert relative_l2(alone.pseudo_gradient, single.pseudo_gradient) > 1000 * SHARDED_BOUND

    # What a validator does with the worker's int8 file: compare it with its one-process replay.
    meta = UpdateMeta(
        1, NODES[0], 0, "ab" * 32, "cd" * 32, "int8", 0, INNER.steps, sharded.tokens, tuple(sharded.losses)
    )
    update = read_update(
        encode_update(sharded.pseudo_gradient, meta), parameter_shapes(load_model(job.checkpoint_dir)), codec="int8"
    )
    comparison = compare_update(update, single.pseudo_gradient, ReplaySpec().tolerance)
    assert comparison.within, comparison
    honest = compare_update(read_update(encode_update(single.pseudo_gradient, meta)), single.pseudo_gradient, 1.0)
    assert comparison.relative_l2 == pytest.approx(honest.relative_l2, rel=0.05)  # int8's own error, nothing more


@pytest.mark.timeout(120)
def test_the_inner_command_in_one_process_is_run_inner_bitwise(
    job: TrainJob, single: InnerResult, tmp_path: Path
) -> None:
    """The job file carries only the job's rows (renumbered) and the result file every value
    exactly: without torchrun the command's result is `run_inner`'s, bit for bit."""
    path = write_job(job, tmp_path / "job")
    assert read_job(path).tokens.shape == (INNER.steps * INNER.batch_size, SEQ_LEN)
    out = tmp_path / "result.safetensors"
    done = CliRunner().invoke(app, ["training", "inner", "--job", str(path), "--out", str(out)])
    assert done.exit_code == 0, done.output
    result = read_result(out)
    assert result.losses == single.losses and result.tokens == single.tokens
    for name, tensor in single.pseudo_gradient.items():
        assert torch.equal(result.pseudo_gradient[name], tensor), name

    (tmp_path / "job" / "job.json").write_text('{"kind": "rollouts"}')
    with pytest.raises(InnerFileError) as raised:
        read_job(tmp_path / "job" / "job.json")
    assert raised.value.reason == "bad_job"
    with pytest.raises(InnerFileError) as raised:
        read_result(path)
    assert raised.value.reason == "bad_result"


@pytest.mark.timeout(60)
def test_a_batch_that_does_not_split_evenly_is_refused_before_any_process_starts(
    job: TrainJob, monkeypatch: pytest.MonkeyPatch
) -> None:
    odd = dataclasses.replace(job, rows=job.rows[:6], inner=dataclasses.replace(INNER, steps=2, batch_size=3))
    monkeypatch.setattr("proofpool.worker.train.subprocess.Popen", lambda *a, **k: pytest.fail("a process started"))
    training = HonestTraining(2, timeout=TORCHRUN_TIMEOUT)
    with pytest.raises(ProofpoolError, match="--train-processes 2: batch_size 3 does not divide among 2 processes"):
        training.pseudo_gradient(odd, not_in_one_process)
    with pytest.raises(ProofpoolError, match="batch_size 3 does not divide"):
        training.check(odd.inner)  # what a node checks against its pool's spec before it joins
    training.check(INNER)
    # Each rank refuses alike before its first collective (none is set up here: it would hang or raise otherwise).
    with pytest.raises(ValueError, match="batch_size 3 does not divide among 2 processes"):
        run_inner(odd, World(0, 2))


@pytest.mark.timeout(180)
def test_stopping_the_worker_ends_torchrun_and_its_ranks(job: TrainJob) -> None:
    stop = threading.Event()
    raised: list[BaseException] = []

    def train() -> None:
        try:
            HonestTraining(2, stop=stop, timeout=TORCHRUN_TIMEOUT).pseudo_gradient(job, not_in_one_process)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            raised.append(exc)

    worker = threading.Thread(target=train)
    worker.start()
    ranks: list[psutil.Process] = []
    deadline = time.monotonic() + 60
    while len(ranks) < 2 and time.monotonic() < deadline and worker.is_alive():
        time.sleep(0.2)
        ranks = [p for p in psutil.Process().children(recursive=True) if _is_rank(p)]
    assert len(ranks) == 2, "torchrun did not start 2 ranks within 60 s"
    torchrun = ranks[0].parent()
    stop.set()
    worker.join(90)
    assert not worker.is_alive()
    assert len(raised) == 1 and isinstance(raised[0], Stopped), raised
    for process in [*ranks, torchrun]:
        assert not _alive(process), process


@pytest.mark.timeout(120)
def test_torchrun_outlasting_its_timeout_is_ended_with_an_error(job: TrainJob) -> None:
    started = time.monotonic()
    with pytest.raises(ProofpoolError, match=r"round 0 inner: still running after 0\.5 s; the processes were ended"):
        HonestTraining(2, timeout=0.5).pseudo_gradient(job, not_in_one_process)
    assert time.monotonic() - started < 60  # ended, not waited for (the whole run takes ~20 s)
    assert not [p for p in psutil.Process().children(recursive=True) if "torch.distributed.run" in _command(p)]


def _command(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _is_rank(process: psutil.Process) -> bool:
    command = _command(process)
    return "proofpool.cli.main" in command and "torch.distributed.run" not in command


def _alive(process: psutil.Process | None) -> bool:
    if process is None:
        return False
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
