"""Train mode: what `proofpool worker run` does for a training pool (DiLoCo, a `diloco://` pool).

Round r trains from checkpoint version r, the pool's latest on-chain (0: the spec's base model).
Per round the node

1. reads the latest version v from the chain; if its journal already holds its file of round v
   it makes sure that file is submitted and waits for v+1, heartbeating (a training pool's
   heartbeat carries no assignment: it is liveness only) and logging a waiting line at most once
   a minute;
2. fetches checkpoint v (`proofpool.training.rounds.round_checkpoint`: the manifest hash the chain
   recorded is the trust root) and derives its rows of the dataset from (pool, v, node);
3. runs the inner phase (`TrainStrategy`: honest = `proofpool.training.inner.run_inner`, in this
   process or, with `--train-processes N`, under `torchrun` on N processes with FSDP), encodes
   the update file in the spec's codec, journals it (durable first), uploads it and sends
   `submitWork(pool, node, sha256, spec.work_units, v)` with the RL path's upload, submit and
   retry steps (`WorkerNode.store_file`, `WorkerNode.send`; a file whose round closed meanwhile
   is abandoned, not sent), and logs one line: round, loss first -> last, seconds by phase, bytes.

A node that joins late starts at the latest version. The journal keys a round's file as batch
(pool, v, 0), so a restarted node never trains round v twice: it submits what it journaled, or
waits. Heartbeats keep going in the background while a round's checkpoint is fetched, trained
and sent (`TrainNode.pulse`): a round may take longer than the backend's liveness bound. SIGTERM
is checked between rounds and cuts waits short; the inner steps themselves are not interrupted
in this process (those under torchrun are ended, and the round is trained again at the next
start), and a round past them is journaled and sent if the services answer, else left in the
journal for the next start.

On several processes every rank trains on an equal share of each step's rows (the pool's batch
must split evenly: a node whose `--train-processes` does not divide it refuses to start), and
the result equals the one-process inner phase up to float summation order, far inside the
validators' replay tolerance (tests/integration/test_inner_torchrun.py).
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from proofpool.worker.journal import PENDING_STATES, UPDATE_SUFFIX, BatchState, JournalEntry
from proofpool.worker.models import Unservable
from proofpool.worker.node import NOT_MEMBER_STATES, NodeNotReady, WorkerNode
from proofpool.worker.retry import Stopped, retry, sleep_unless_stopped

from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.spec import DilocoSpec, InnerSpec
from proofpool.core.diloco.update_file import UpdateFileError, UpdateMeta, encode_update
from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint import CheckpointError
from proofpool.infra.config import get_settings
from proofpool.infra.storage.s3 import ObjectStore
from proofpool.training.dataset import load_dataset
from proofpool.training.inner import (
    InnerResult,
    TrainJob,
    check_processes,
    read_result,
    run_inner,
    write_job,
)
from proofpool.training.published import fetch_dataset, pool_diloco_spec
from proofpool.training.rounds import round_checkpoint

if TYPE_CHECKING:
    import torch

    from proofpool.infra.http.node_api import Heartbeat

log = logging.getLogger(__name__)

ROUND_BATCH = 0
"""The journal's batch number of a node's one update file per round."""
WAIT_LOG_INTERVAL = 60.0
"""Least seconds between two "waiting for checkpoint" lines."""
DEFAULT_HEARTBEAT_INTERVAL = 10.0
"""Seconds between heartbeats before the backend has told its interval (its default)."""
INNER_TIMEOUT = 6 * 3600.0
"""Seconds the inner steps on several processes may take before they are ended as hung."""
TAIL_LINES = 3
"""Last output lines of failed torchrun processes quoted in the error."""
POLL_SECONDS = 0.2
END_GRACE = 60.0
"""Seconds torchrun gets to end its ranks after SIGTERM (its own grace for them is 30 s)."""


class TrainStrategy(Protocol):
    """How a worker makes a round's pseudo-gradient: the one hook a devnet drill replaces
    (`proofpool worker run --train-cheat`, `proofpool.devnet.diloco.cheats.TrainCheater`)."""

    def pseudo_gradient(self, job: TrainJob, honest: Callable[[TrainJob], InnerResult]) -> InnerResult:
        """The inner phase's result submitted for `job`; `honest` computes the honest one."""
        ...


class HonestTraining:
    """The honest worker: the inner phase the pool's spec prescribes, nothing else.

    With `processes` > 1 (`worker run --train-processes N`) the inner steps run under torchrun on
    that many processes, the model sharded with FSDP (`run_torchrun`); `stop` ends them early and
    `timeout` bounds them."""

    def __init__(
        self, processes: int = 1, *, stop: threading.Event | None = None, timeout: float = INNER_TIMEOUT
    ) -> None:
        if processes < 1:
            raise ValueError(f"processes must be >= 1, not {processes}")
        self.processes = processes
        self.stop = stop
        self.timeout = timeout

    def check(self, inner: InnerSpec) -> None:
        """`ProofpoolError` unless every inner step's batch splits evenly among the processes."""
        try:
            check_processes(inner, self.processes)
        except ValueError as exc:
            raise ProofpoolError(f"--train-processes {self.processes}: {exc}") from exc

    def pseudo_gradient(self, job: TrainJob, honest: Callable[[TrainJob], InnerResult]) -> InnerResult:
        if self.processes == 1:
            return honest(job)
        self.check(job.inner)
        return run_torchrun(job, self.processes, stop=self.stop, timeout=self.timeout)


def run_torchrun(
    job: TrainJob, processes: int, *, stop: threading.Event | None = None, timeout: float = INNER_TIMEOUT
) -> InnerResult:
    """`job`'s inner phase as `torchrun --nproc-per-node N -m proofpool.cli.main training inner`
    (`proofpool.training.inner.run_inner` on N ranks with FSDP, gloo): the job is written to a
    scratch directory, each line the processes print is logged, and rank 0's result is read back.

    `ProofpoolError` when the processes fail or outlast `timeout` seconds (they are killed);
    `Stopped` when `stop` is set meanwhile (they are killed, nothing is kept: a restarted node
    trains the round again)."""
    with tempfile.TemporaryDirectory(prefix="proofpool-inner-") as scratch:
        path = write_job(job, Path(scratch))
        out = Path(scratch) / "result.safetensors"
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
            "-m", "proofpool.cli.main", "training", "inner", "--job", str(path), "--out", str(out),
        ]  # fmt: skip
        code, tail = _run_logged(command, stop, timeout, f"round {job.round} inner")
        if code != 0:
            raise ProofpoolError(
                f"round {job.round}: the inner steps on {processes} processes failed (exit {code}): " + " / ".join(tail)
            )
        return read_result(out)


def _run_logged(
    command: Sequence[str], stop: threading.Event | None, timeout: float, what: str
) -> tuple[int, list[str]]:
    """Run `command`, logging its output line by line; (exit code, its last lines). Killed (and
    `Stopped` or `ProofpoolError` raised) on `stop` or after `timeout` seconds."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    tail: deque[str] = deque(maxlen=TAIL_LINES)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            line = line.rstrip()
            if line:
                tail.append(line)
                log.info("%s: %s", what, line)

    reader = threading.Thread(target=read, name="torchrun-log", daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while process.poll() is None:
            if stop is not None and stop.is_set():
                raise Stopped(f"{what}: stopped, the processes were ended")
            if time.monotonic() > deadline:
                raise ProofpoolError(f"{what}: still running after {timeout:g} s; the processes were ended")
            time.sleep(POLL_SECONDS)
    finally:
        if process.poll() is None:
            _end(process)
        reader.join(5.0)
    return process.returncode, list(tail)


def _end(process: subprocess.Popen[str]) -> None:
    """SIGTERM torchrun (it ends its ranks), SIGKILL it after `END_GRACE` seconds."""
    process.terminate()
    try:
        process.wait(END_GRACE)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def base_manifest_sha256(spec: DilocoSpec, version: int, onchain_manifest: bytes) -> str:
    """Hex manifest hash of checkpoint `version`: the spec's base model for 0, else the hash the
    chain recorded (`onchain_manifest`, from `latestCheckpoint` or `CheckpointPublished`)."""
    if version == 0:
        if spec.model.manifest_sha256 is None:
            raise ProofpoolError("the pool's spec names no base model (model.manifest_sha256): it was never published")
        return spec.model.manifest_sha256
    return onchain_manifest.hex()


def update_meta(
    spec: DilocoSpec, pool_id: int, node: str, version: int, base_manifest: str, result: InnerResult
) -> UpdateMeta:
    """The metadata an update file of round `version` carries (the claims validators check)."""
    return UpdateMeta(
        pool_id=pool_id,
        node=node,
        round=version,
        base_manifest_sha256=base_manifest,
        spec_sha256=spec.sha256(),
        codec=spec.codec.name,
        block_size=spec.codec.block_size,
        inner_steps=spec.inner.steps,
        tokens=spec.work_units,
        losses=tuple(result.losses),
    )


def checkpoint_fetcher(
    client: ChainClient,
    store: ObjectStore,
    spec: DilocoSpec,
    pool_id: int,
    cache_dir: Path,
    relays: Sequence[str] | None = None,
) -> Callable[[int], Path]:
    """`fetch(version)` -> the verified local directory of the pool's checkpoint `version`
    (relays default to PROOFPOOL_CHECKPOINT_RELAYS, the store being the last resort)."""
    settings = get_settings()
    via = tuple(settings.checkpoint_relays if relays is None else relays)

    def fetch(version: int) -> Path:
        return round_checkpoint(
            client, store, spec, pool_id, version, cache_dir, via, max_bytes=settings.checkpoint_max_bytes
        )

    return fetch


@dataclass(frozen=True)
class RoundFile:
    """A round's update file, made and not yet journaled."""

    data: bytes
    work_key: bytes
    """sha256 of `data`: the `submitWork` key."""
    losses: tuple[float, ...]
    inner_seconds: float
    encode_seconds: float


def make_round_file(spec: DilocoSpec, job: TrainJob, base_manifest: str, strategy: TrainStrategy) -> RoundFile:
    """Run the inner phase of `job` as `strategy` does it and encode its update file (the codec the
    spec names); `UpdateFileError` when it cannot be encoded (a diverged run: NaN or infinity)."""
    started = time.perf_counter()
    result = strategy.pseudo_gradient(job, run_inner)
    trained = time.perf_counter()
    meta = update_meta(spec, job.pool_id, job.node, job.round, base_manifest, result)
    data = encode_update(result.pseudo_gradient, meta)
    return RoundFile(data, hashlib.sha256(data).digest(), meta.losses, trained - started, time.perf_counter() - trained)


@dataclass(frozen=True)
class RoundTimes:
    """Seconds by phase of one round (the round's log line; bench reads them)."""

    checkpoint: float
    inner: float
    quantize: float
    upload: float
    submit: float


def round_line(version: int, losses: Sequence[float], times: RoundTimes, size: int, entry: JournalEntry) -> str:
    """`round 3: loss 5.210 -> 4.870 · checkpoint 0.1 s, inner 12.3 s, ... · 1.2 MB · submitted`."""
    loss = f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "none"
    phases = ", ".join(f"{name} {getattr(times, name):.2f} s" for name in RoundTimes.__dataclass_fields__)
    if entry.state is BatchState.SUBMITTED:
        sent = f"tx {entry.tx_hash[:12]}…" if entry.tx_hash else "already on-chain"
        outcome = f"work 0x{entry.work_key.hex()[:10]}… {sent}"
    else:
        outcome = f"[red]{entry.state.value}[/red]: {entry.error}"
    return f"round {version}: loss {loss} · {phases} · {size / 1e6:.2f} MB · {outcome}"


class TrainNode:
    """The train-mode loop of one `WorkerNode` (its chain client, API, journal, heartbeat and
    upload/submit steps), for the pool whose on-chain model URI is a `diloco://` one."""

    def __init__(self, node: WorkerNode, strategy: TrainStrategy | None = None) -> None:
        self.node = node
        self.strategy = strategy or HonestTraining()
        self.pool_id = node.config.pool_id
        self.interval = node.config.idle_interval or DEFAULT_HEARTBEAT_INTERVAL
        self.rounds = 0
        """Rounds trained by this process (`WorkerConfig.max_batches` bounds them)."""
        self._store: ObjectStore | None = None
        self._spec: DilocoSpec | None = None
        self._tokens: torch.Tensor | None = None
        self._fetch: Callable[[int], Path] | None = None

    # --- start-up ---------------------------------------------------------------------------

    def prepare(self) -> DilocoSpec:
        """Read the pool's spec (checked against both on-chain commitments) and its dataset (checked
        against the spec), before the node joins: a node that cannot train for the pool says so."""
        node = self.node
        pool = self._retry(lambda: node.client.pool.get_pool(self.pool_id), "pool lookup")
        self._store = node.store()
        try:
            spec = self._retry(lambda: pool_diloco_spec(self.store, pool.model_uri, pool.spec_sha256), "spec")
            node.console.say(f"training pool {self.pool_id}: spec {spec.sha256()[:12]}…, fetching its dataset")
            cache = node.config.checkpoint_cache_dir
            path = self._retry(lambda: fetch_dataset(self.store, spec, cache), "dataset")
            tokens = load_dataset(path, spec.dataset.sha256, vocab_size=spec.model.vocab_size)
            base_manifest_sha256(spec, 0, b"")  # the base model was published with the spec
            if isinstance(self.strategy, HonestTraining):
                self.strategy.check(spec.inner)  # its batches split among the processes
        except (ProofpoolError, ValueError) as exc:
            if isinstance(exc, Stopped):
                raise
            raise NodeNotReady(f"pool {self.pool_id}: {exc}") from exc
        self._spec, self._tokens = spec, tokens
        self._fetch = checkpoint_fetcher(node.client, self.store, spec, self.pool_id, node.config.checkpoint_cache_dir)
        processes = self.strategy.processes if isinstance(self.strategy, HonestTraining) else 1
        node.console.say(
            f"training pool {self.pool_id}: {spec.inner.steps} inner steps x {spec.inner.batch_size} rows x "
            f"{spec.dataset.seq_len} tokens per round ({spec.work_units} work units), codec {spec.codec.name}"
            + (f", on {processes} processes (torchrun, FSDP)" if processes > 1 else "")
        )
        return spec

    @property
    def spec(self) -> DilocoSpec:
        assert self._spec is not None, "prepare() first"
        return self._spec

    @property
    def store(self) -> ObjectStore:
        assert self._store is not None, "prepare() first"
        return self._store

    # --- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Train round after round until stopped (or `max_batches` rounds trained here)."""
        node = self.node
        if self._spec is None:
            self.prepare()
        limit = node.config.max_batches
        while not node.stop.is_set():
            latest = self._retry(lambda: node.client.pool.latest_checkpoint(self.pool_id), "latest checkpoint")
            version = latest.version
            entry = node.journal.get(self.pool_id, version, ROUND_BATCH)
            if entry is None:
                self.beat()  # the backend sees the node alive (and a member) before the round starts
                self.train_round(version, latest.manifest_sha256)
                if limit is not None and self.rounds >= limit:
                    return
            elif entry.state in PENDING_STATES:
                node.console.say(f"round {version}: sending the file journaled before ({entry.state.value})")
                with self.pulse():
                    self._count(node.finish(entry))
            self.wait_for(version + 1)

    def train_round(self, version: int, onchain_manifest: bytes) -> JournalEntry | None:
        """Train round `version`, journal its file, upload and submit it; None when checkpoint
        `version` cannot be served (reported in the next heartbeat, as an RL node does)."""
        node, spec = self.node, self.spec
        with self.pulse():
            started = time.perf_counter()
            try:
                checkpoint = self._retry(lambda: self._checkpoint(version), "checkpoint", version=version)
            except Unservable as problem:
                node.skip(version, ROUND_BATCH, problem)
                return None
            node.console.checkpoint(version)
            fetched = time.perf_counter()
            job = TrainJob(
                pool_id=self.pool_id,
                round=version,
                node=node.node,
                checkpoint_dir=checkpoint,
                tokens=self._tokens,
                rows=node_rows(spec, self.pool_id, version, node.node),
                inner=spec.inner,
            )
            base = base_manifest_sha256(spec, version, onchain_manifest)
            try:
                made = make_round_file(spec, job, base, self.strategy)
            except UpdateFileError as exc:  # NaN or infinity: a diverged round, which nobody could check
                node.skip(version, ROUND_BATCH, Unservable("update_not_encodable", str(exc)))
                return None
            entry = node.journal.record_written(
                self.pool_id,
                version,
                ROUND_BATCH,
                made.work_key,
                made.data,
                spec.work_units,
                spec.inner.steps * spec.inner.batch_size,
                suffix=UPDATE_SUFFIX,
            )
            self.rounds += 1
            node.generated += 1
            journaled = time.perf_counter()
            entry = node.store_file(entry)
            uploaded = time.perf_counter()
            entry = self._count(node.send(entry, fresh=True))
            sent = time.perf_counter()
        times = RoundTimes(
            fetched - started, made.inner_seconds, made.encode_seconds, uploaded - journaled, sent - uploaded
        )
        losses, size = made.losses, len(made.data)
        log.info(
            "round trained",
            extra={
                **self._context(entry),
                "loss_first": round(losses[0], 4) if losses else None,
                "loss_last": round(losses[-1], 4) if losses else None,
                "size": size,
                **{f"{name}_seconds": round(getattr(times, name), 3) for name in RoundTimes.__dataclass_fields__},
            },
        )
        node.console.say(round_line(version, losses, times, size, entry))
        return entry

    def wait_for(self, version: int) -> None:
        """Heartbeat every interval until checkpoint `version` is on-chain (or the node stops)."""
        node = self.node
        logged: float | None = None
        while True:
            self.beat()
            latest = self._retry(lambda: node.client.pool.latest_checkpoint(self.pool_id), "latest checkpoint")
            if latest.version >= version:
                return
            now = time.monotonic()
            if logged is None or now - logged >= WAIT_LOG_INTERVAL:
                logged = now
                node.console.say(
                    f"waiting for checkpoint {version}: this node is done with round {version - 1} "
                    f"(heartbeat every {self.interval:g} s)"
                )
            sleep_unless_stopped(node.stop, self.interval)

    def beat(self) -> Heartbeat | None:
        """One heartbeat (no assignment in a training pool), joining again if the backend answers
        as for a non-member."""
        node = self.node
        beat = node.heartbeat_as_member(node.heartbeat)
        if beat is None:
            return None
        if node.config.idle_interval is None:
            self.interval = beat.heartbeat_interval
        if beat.state in NOT_MEMBER_STATES:
            node.rejoin(f"heartbeat state {beat.state}")
        return beat

    @contextmanager
    def pulse(self) -> Iterator[None]:
        """Heartbeats in the background while the body runs (a round may outlast the backend's
        liveness bound); a failed heartbeat is logged and the next one tried an interval later."""
        done = threading.Event()

        def run() -> None:
            while not done.wait(self.interval):
                try:
                    self.node.heartbeat(stop=done)
                except Stopped:
                    return
                except Exception as exc:  # noqa: BLE001 - the loop's own heartbeat handles what matters
                    log.warning("background heartbeat failed: %s", exc, extra=self._context())

        thread = threading.Thread(target=run, name="pulse", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join(5.0)

    # --- helpers ----------------------------------------------------------------------------

    def _checkpoint(self, version: int) -> Path:
        assert self._fetch is not None
        try:
            return self._fetch(version)
        except CheckpointError as exc:
            raise Unservable(exc.reason.value, exc.detail) from exc

    def _count(self, entry: JournalEntry) -> JournalEntry:
        if entry.state is BatchState.SUBMITTED:
            self.node.submitted += 1
        return entry

    def _retry(self, fn: Callable[[], Any], what: str, **context: Any) -> Any:
        node = self.node
        return retry(fn, what=what, stop=node.stop, backoff=node.config.backoff, context={**self._context(), **context})

    def _context(self, entry: JournalEntry | None = None) -> dict[str, Any]:
        context: dict[str, Any] = {"pool": self.pool_id, "node": self.node.node}
        if entry is not None:
            context.update(work_key="0x" + entry.work_key.hex(), version=entry.version, state=entry.state.value)
        return context


__all__ = [
    "HonestTraining",
    "RoundFile",
    "RoundTimes",
    "TrainNode",
    "TrainStrategy",
    "base_manifest_sha256",
    "checkpoint_fetcher",
    "make_round_file",
    "run_torchrun",
    "update_meta",
]
