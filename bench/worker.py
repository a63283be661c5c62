"""A worker's end-to-end tokens/s against the bare engine's on the same batches.

The market runs for real: anvil, PostgreSQL (a fresh `proofpool_bench_worker_<random>`
database), Redis db 9, SeaweedFS, the indexer and the backend as processes. One node works
in this process (`WorkerNode`, the code behind `proofpool worker run`) for `--batches` + 1
batches; the first one absorbs start-up (join, engine load) and is not counted. End to end is
every completion token of batches 2.. divided by the wall time from the first heartbeat after
batch 1 was generated to the moment the last batch's `submitWork` was mined: heartbeats,
generation, proofs, rewards, Parquet, journal fsync, upload URL, PUT and `submitWork` all
included. (Measuring from batch 1's submission instead, as before, started the clock late by
however long that submission overlapped batch 2.)

A fresh engine, in a fresh process pinned like the worker, warms up on the worker's first batch
and generates exactly the same requests (the assignment is a pure function of pool, node,
version and batch), timed alone ("bare"), and once more with the proof and file step ("generate
+ prove + file"), so the overhead splits into the local part and the network part. It does so
right before the worker runs and right after, and the figures use the mean of the two: this
machine's speed drifts by several percent over minutes, and timing the bare engine on one side
only moved the overhead by as much (the row shows both).

The host's speed also dips for seconds at a time: a few consecutive batches then take 30-70 %
more CPU time to generate, in the worker's run or in a bare run, whichever it hits. So besides
the totals, each batch is compared with itself: the wall time of the worker's turn that made it
(generation, heartbeat, proofs, file, journal, and the submitter thread's work on the same core
meanwhile) against its bare generation, and the median of those per-batch overheads is what the
target is judged on. Target: end-to-end overhead <= 10%.

Each file costs about 25 ms of the worker's core whatever its size (a signed upload request, the
PUT, four JSON-RPC requests, a signature and a receipt for `submitWork`, the heartbeat, journal
writes) on top of its proofs and Parquet, which grow with it. The default file is 128 problems x 8
samples, about a second of generation here: a file per quarter second (`--batch-size 32`) would
mean an on-chain transaction per node four times a second, which no pool would configure
(README, "Provider node" figures, has both sizes).

Prints JSON lines and writes `bench/results/worker.jsonl`.
Run: `.venv/bin/python -m bench.worker [--batch-size 128] [--batches 16]` (as a module: run as a
script, this file would shadow the `worker` package).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import torch
from proofpool.worker.console import WorkerConsole
from proofpool.worker.engine import InferenceEngine
from proofpool.worker.node import WorkerConfig, WorkerNode
from proofpool.worker.retry import Backoff
from proofpool.worker.rollout import generate_rollout_file, plan_batch
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.cache import ensure_devnet_model

from bench.market import bench_market, emit
from proofpool.core.assignment import sampling_seed, task_ids
from proofpool.core.rollout import RolloutFileMeta
from proofpool.infra.config import get_settings
from proofpool.infra.http.node_api import Heartbeat, NodeApi
from proofpool.infra.storage.s3 import ObjectStore

TASKS = ENVIRONMENT.taskset

TARGET_OVERHEAD = 0.10
REDIS_DB = 9
GROUP_SIZE = 8
MAX_TOKENS = 8
TEMPERATURE = 1.0


class TimedConsole(WorkerConsole):
    """The worker's console, also noting when each batch ended and how many tokens it had."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.ends: list[tuple[float, int, int]] = []  # (monotonic end, batch, submitted tokens)

    def batch_done(self, pool_id, batch, samples, tokens, seconds, work_key, tx) -> None:  # type: ignore[override]
        self.ends.append((time.monotonic(), batch, tokens))
        super().batch_done(pool_id, batch, samples, tokens, seconds, work_key, tx)


class TimedWorkerNode(WorkerNode):
    """`WorkerNode`, noting when the first heartbeat after batch 1 was generated started: from
    there on, every step of batches 2.. (heartbeat to `submitWork`) happens inside the window.
    (That heartbeat goes out in the background at the end of batch 1's turn, while batch 2 is
    generated ahead: `proofpool.worker.lookahead`.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.window_start: float | None = None
        self.turns: list[float] = []
        """Wall seconds of each turn that generated a batch: turn k made batch k (in order)."""

    def turn(self) -> None:
        generated, started = self.generated, time.monotonic()
        super().turn()
        if self.generated > generated:
            self.turns.append(time.monotonic() - started)

    def heartbeat(self) -> Heartbeat:
        if self.generated == 1 and self.window_start is None:
            self.window_start = time.monotonic()
        return super().heartbeat()


def run_worker(stack, node, batch_size: int, batches: int, state_dir: Path) -> tuple[TimedConsole, TimedWorkerNode]:
    """Run the worker for `batches` + 1 batches; its console and the node (window start, turns)."""
    with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pool_assignment_config (pool_id, batch_size, group_size, max_tokens, temperature)"
            " VALUES (%s, %s, %s, %s, %s)",
            (stack.pool_id, batch_size, GROUP_SIZE, MAX_TOKENS, TEMPERATURE),
        )
    settings = get_settings().model_copy(
        update={
            "s3_endpoint_url": stack.env["S3_ENDPOINT_URL"],
            "s3_bucket": stack.env["PROOFPOOL_S3_BUCKET"],
            "s3_access_key": stack.env["AWS_ACCESS_KEY_ID"],
            "s3_secret_key": stack.env["AWS_SECRET_ACCESS_KEY"],
        }
    )
    config = WorkerConfig(
        pool_id=stack.pool_id,
        state_dir=state_dir / "journal",
        checkpoint_cache_dir=state_dir / "checkpoints",
        max_batches=batches + 1,
        idle_interval=0.2,
        backoff=Backoff(initial=0.2),
    )
    console = TimedConsole(node.address, stack.backend_url, ledger_every=3600)
    with NodeApi(
        stack.backend_url, node, chain_id=stack.admin.chain_id, pool_contract=stack.admin.book.compute_pool
    ) as api:
        client = stack.admin.as_account(node)
        worker = TimedWorkerNode(config, node, client, api, lambda: ObjectStore.from_settings(settings), console)
        worker.run()
    return console, worker


def time_engine_fresh(node: str, pool_id: int, warm_up: int, batch_ids: list[int], batch_size: int) -> dict[str, Any]:
    """`time_engine` in a fresh process, spawned with this one's core pinning: its engine is the
    process's first, as the worker's is. (A second engine in a process that ran one is about 6 %
    faster over its first batches, without the page faults, which flattered the bare figure.)"""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(time_engine, (node, pool_id, warm_up, batch_ids, batch_size))


def time_engine(node: str, pool_id: int, warm_up: int, batch_ids: list[int], batch_size: int) -> dict[str, Any]:
    """Seconds of bare generation and of generation + proofs + file of each of the worker's
    batches, after the worker's own first batch `warm_up` (which the worker's figure does not
    count either), and their tokens.

    Each batch is timed bare, then with proofs and file, in turn: an engine speeds up over its
    first batches (page faults), so timing all bare runs first would hand the later ones a
    warmer engine."""
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    meta = RolloutFileMeta(pool_id, node)

    def plan(batch: int) -> tuple[list[str], int]:
        return task_ids(TASKS, pool_id, node, 0, batch, batch_size), sampling_seed(pool_id, node, 0, batch)

    def rollout_file(tasks: list[str], seed: int) -> None:
        generate_rollout_file(
            engine,
            TASKS,
            meta,
            tasks,
            group_size=GROUP_SIZE,
            sampling_seed=seed,
            temperature=TEMPERATURE,
            max_tokens=MAX_TOKENS,
            stop_ids=ENVIRONMENT.tokens.stop_ids,
            model_version=0,
        )

    with InferenceEngine(ensure_devnet_model(progress=None)) as engine:
        rollout_file(*plan(warm_up))  # loads the proof kernel too, as the worker's first batch did
        tokens, bare, local = 0, [], []
        for batch in batch_ids:
            tasks, seed = plan(batch)
            requests = plan_batch(
                TASKS,
                tasks,
                group_size=GROUP_SIZE,
                sampling_seed=seed,
                temperature=TEMPERATURE,
                max_tokens=MAX_TOKENS,
                stop_ids=ENVIRONMENT.tokens.stop_ids,
            ).requests
            started = time.perf_counter()
            generations = engine.generate(requests)
            bare.append(time.perf_counter() - started)
            tokens += sum(len(g.completion_tokens) for g in generations)
            started = time.perf_counter()
            rollout_file(tasks, seed)
            local.append(time.perf_counter() - started)
    return {"tokens": tokens, "bare_seconds": bare, "local_seconds": local}


MARKET_SERVICES = ("postgres", "redis-server")
"""The machine's own services that the market's processes talk to: they are moved off the worker's
core during the run too (and back afterwards), or every heartbeat and indexed event would wake a
PostgreSQL backend or Redis on the worker's core, in the middle of its generation."""


def pin_threads(process: psutil.Process, cores: list[int]) -> dict[int, set[int]]:
    """Pin every thread of `process` to `cores` (threads it starts later inherit the pinning);
    returns each moved thread's former cores.

    Affinity belongs to a thread, not a process: `sched_setaffinity(pid)` (and psutil's
    `cpu_affinity`) moves only the thread whose id is the pid, which left anvil's, SeaweedFS's
    and the backend's other threads free to run on the worker's core."""
    former: dict[int, set[int]] = {}
    with contextlib.suppress(psutil.Error):
        for thread in process.threads():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile, or not ours to move
                before = os.sched_getaffinity(thread.id)
                os.sched_setaffinity(thread.id, cores)
                former[thread.id] = before
    return former


@contextlib.contextmanager
def split_cores() -> Iterator[None]:
    """Core 0 for this process (the worker; the bare engine's process inherits it), the other
    cores for every process the market started (anvil, SeaweedFS, indexer, backend) and for the
    PostgreSQL and Redis it uses, so that "overhead" means the worker's own work and not the
    co-located services' (in production they run elsewhere). The services get their cores back
    on exit.

    With PostgreSQL and Redis left on core 0, the worker's generation took 266 ms a batch where
    the bare engine took 230 (its heartbeats and submissions wake them mid-generation), even with
    uploads and submissions made no-ops; moved, 234 against 234."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        yield
        return
    for child in psutil.Process().children(recursive=True):
        pin_threads(child, cores[1:])
    services: dict[int, set[int]] = {}
    for process in psutil.process_iter(["name"]):
        if process.info["name"] in MARKET_SERVICES:
            services.update(pin_threads(process, cores[1:]))
    pin_threads(psutil.Process(), cores[:1])
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[0])  # one OpenMP thread on the worker's core
    torch.set_num_threads(1)
    try:
        yield
    finally:
        for tid, before in services.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch-size",
        type=int,
        default=128,
        help="Problems per batch (x8 samples; 128: 1,024 samples, about 1 s here).",
    )
    parser.add_argument("--batches", type=int, default=16, help="Batches measured (after one warm-up batch).")
    parser.add_argument(
        "--shared-cores",
        action="store_true",
        help="Let the market's processes share the worker's cores (default: the worker gets core 0, "
        "the market the others, as if they ran on other machines).",
    )
    args = parser.parse_args()

    with bench_market("worker", REDIS_DB, dispatch=False) as market:
        stack, node = market.stack, market.stack.cast.alice_node
        batches = list(range(1, args.batches + 1))  # a fresh node's batches of version 0, after batch 0

        def bare() -> dict[str, float]:
            return time_engine_fresh(node.address, stack.pool_id, 0, batches, args.batch_size)

        with contextlib.nullcontext() if args.shared_cores else split_cores():
            before = bare()
            console, worker = run_worker(stack, node, args.batch_size, args.batches, market.root)
            after = bare()
    (_, first, _), *measured = console.ends
    assert first == 0 and [b for _, b, _ in measured] == batches, "the worker did other batches than the bare engine"
    assert worker.window_start is not None, "the worker never sent a heartbeat after its first batch"
    e2e_tokens = sum(tokens for _, _, tokens in measured)
    e2e_seconds = measured[-1][0] - worker.window_start
    assert before["tokens"] == after["tokens"] == e2e_tokens, "the bare engine must make exactly the worker's tokens"
    bare_seconds = [(b + a) / 2 for b, a in zip(before["bare_seconds"], after["bare_seconds"], strict=True)]
    local_seconds = [(b + a) / 2 for b, a in zip(before["local_seconds"], after["local_seconds"], strict=True)]
    bare_tps = e2e_tokens / sum(bare_seconds)
    local_tps = e2e_tokens / sum(local_seconds)
    e2e_tps = e2e_tokens / e2e_seconds
    per_batch = statistics.median(1 - b / t for b, t in zip(bare_seconds, worker.turns[1:], strict=True))
    common = {
        "cores": "shared" if args.shared_cores else "worker on core 0, market on the others",
        "batch_size": args.batch_size,
        "group_size": GROUP_SIZE,
        "samples_per_batch": args.batch_size * GROUP_SIZE,
        "batches": len(measured),
        "tokens": e2e_tokens,
    }
    rows = [
        {
            "bench": "worker",
            "figure": "bare_engine_tokens_per_s",
            "value": round(bare_tps, 1),
            "before": round(e2e_tokens / sum(before["bare_seconds"]), 1),
            "after": round(e2e_tokens / sum(after["bare_seconds"]), 1),
            **common,
        },
        {
            "bench": "worker",
            "figure": "generate_prove_file_tokens_per_s",
            "value": round(local_tps, 1),
            "overhead": round(1 - local_tps / bare_tps, 4),
            **common,
        },
        {
            "bench": "worker",
            "figure": "end_to_end_tokens_per_s",
            "value": round(e2e_tps, 1),
            "overhead": round(1 - e2e_tps / bare_tps, 4),
            "overhead_median_batch": round(per_batch, 4),
            "target_overhead": TARGET_OVERHEAD,
            "met": per_batch <= TARGET_OVERHEAD,
            **common,
        },
    ]
    emit("worker", rows)


if __name__ == "__main__":
    main()
