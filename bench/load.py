"""A bounded load test of the market's front half: 1,000 simulated nodes against the real backend,
object store, anvil and indexer, at rising file rates until a stage saturates.

Set-up (`bench.load_setup`): the bench market (`bench.market.bench_market`: a throw-away
database, Redis db, SeaweedFS, anvil with the contracts, the indexer dispatching to the Celery
broker, the backend), then 1,000 node keys derived from a seed, registered under a few staked
providers, added, joined to the pool and announced. A second backend, `proofpool backend serve
--workers N`, takes the load (the stack's own runs one worker).

Load: steps of rising offered file rates (`--rates`), each `--step-seconds` long. Every file is
one node's work as `proofpool worker run` does it: a signed heartbeat, a signed upload request
(`POST /v1/uploads`: a presigned URL), the PUT of a small synthetic file to SeaweedFS, and its
`submitWork` signed by the node key and sent raw. On top, every node heartbeats every
`--heartbeat-interval` seconds. Files and heartbeats are scheduled open-loop (a stalled stage
cannot slow the schedule down and hide its queueing); every request is signed before its step
starts. After the sends, the step drains: it waits until every submission it sent was mined,
indexed and dispatched (or `--drain-seconds` pass).

Stages, with their latencies: heartbeat, presign, put, tx_send (the `eth_sendRawTransaction`
round trip), mined (send -> first seen in a block), indexed (mined -> the indexer's outbox row),
dispatched (indexed -> the task handed to the broker), end_to_end (scheduled -> dispatched). A
stage is saturated in a step when it completes less than `--min-ratio` of the offered rate or
its p99 passes its bound (`--http-p99-ms` for the HTTP stages and tx_send, `--chain-p99-s` for
the chain and indexer stages). The run stops at the first saturated step, or before a step that
would pass `--max-seconds`. CPU seconds of every process group are sampled from /proc per step.

Prints JSON lines and writes `bench/results/load.jsonl`. Run:
`.venv/bin/python -m bench.load` (about 8 minutes; docs/load-test.md). Needs PostgreSQL and
Redis (uses Redis db 4, which it flushes).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from proofpool.devnet.services import http_ok, wait_until

from bench.load_client import (
    ChainFollower,
    CpuMeter,
    HttpPool,
    OutboxPoller,
    http_request,
    postgres_pids,
    redis_pid,
    rpc_request,
    signed_request,
)
from bench.load_setup import FEES, Fleet, onboard_fleet
from bench.market import BenchMarket, bench_market, emit
from proofpool.core.auth.signed_request import Audience, Deployment
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.chain.calls import AbiFunction

REDIS_DB = 4
SUBMIT_GAS = 150_000
"""Gas limit of one `submitWork` (it uses about 82,000)."""
WORK_UNITS = 64
HTTP_STAGES = ("heartbeat", "presign", "put", "tx_send")
CHAIN_STAGES = ("mined", "indexed", "dispatched")
STAGES = (*HTTP_STAGES, *CHAIN_STAGES, "end_to_end")
"""In pipeline order: the first saturated one is the one that saturated first."""


@dataclass
class LoadConfig:
    """What one run does; the defaults are the documented 1,000-node run."""

    nodes: int = 1_000
    providers: int = 4
    rates: Sequence[float] = (5, 10, 20, 40, 80, 160, 320)
    step_seconds: float = 20.0
    drain_seconds: float = 20.0
    max_seconds: float = 360.0
    """Hard cap on the load phase (set-up not counted): no step starts that could end after it."""
    heartbeat_interval: float = 10.0
    file_bytes: tuple[int, int] = (4_096, 16_384)
    backend_workers: int = 2
    connections: int = 64
    http_p99_ms: float = 250.0
    chain_p99_s: float = 2.0
    min_ratio: float = 0.9
    block_time: int = 0
    """0: anvil mines one block per transaction (the devnet); N: a block every N seconds."""
    seed: str = "load"
    redis_db: int = REDIS_DB
    backend_env: dict[str, str] = field(default_factory=dict)
    """Extra environment of the load backend (the test forces a saturated stage with it)."""


@dataclass
class FileJob:
    """One file's requests, prepared before its step, and what happened to them."""

    node: int
    scheduled: float
    work_key: str
    heartbeat: bytes
    upload: bytes
    body: bytes
    tx: bytes
    tx_hash: str
    times: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    """stage -> (start, end, ok), wall-clock seconds."""
    sent: bool = False


@dataclass
class Context:
    """Everything a step needs: the fleet, connections to each service, the observers."""

    config: LoadConfig
    fleet: Fleet
    audience: Audience
    backend: HttpPool
    s3: HttpPool
    rpc: HttpPool
    follower: ChainFollower
    poller: OutboxPoller
    submit: AbiFunction
    nonces: list[int]
    next_node: int = 0
    locks: list[asyncio.Lock] = field(default_factory=list)


def prepare_step(ctx: Context, rate: float) -> tuple[list[FileJob], list[bytes]]:
    """The step's files (each with its signed heartbeat, upload request and transaction, scheduled
    `1 / rate` apart from 0) and its background heartbeats, node after node."""
    config, fleet = ctx.config, ctx.fleet
    count = max(1, round(rate * config.step_seconds))
    rng = random.Random(f"{config.seed}/{rate}/{ctx.next_node}")
    files = []
    for k in range(count):
        i = ctx.next_node
        ctx.next_node = (ctx.next_node + 1) % len(fleet.nodes)
        node = fleet.nodes[i]
        body = rng.randbytes(rng.randint(*config.file_bytes))
        sha = hashlib.sha256(body).hexdigest()
        upload = json.dumps({"pool_id": fleet.pool_id, "sha256": sha, "size": len(body)}).encode()
        data = ctx.submit.encode(fleet.pool_id, node.address, bytes.fromhex(sha), WORK_UNITS, 0)
        tx = {"to": fleet.pool_contract, "data": data, "value": 0, "gas": SUBMIT_GAS, "chainId": fleet.chain_id}
        signed = node.sign_transaction({**tx, **FEES, "nonce": ctx.nonces[i]})
        ctx.nonces[i] += 1
        files.append(
            FileJob(
                node=i,
                scheduled=k / rate,
                work_key="0x" + sha,
                heartbeat=signed_request(node, ctx.audience, "POST", "/v1/heartbeat", b"{}"),
                upload=signed_request(node, ctx.audience, "POST", "/v1/uploads", upload),
                body=body,
                tx=rpc_request(ctx.rpc.authority, "eth_sendRawTransaction", ["0x" + signed.raw_transaction.hex()]),
                tx_hash="0x" + bytes(signed.hash).hex(),
            )
        )
    beat_rate = len(fleet.nodes) / config.heartbeat_interval
    beats = [
        signed_request(fleet.nodes[j % len(fleet.nodes)], ctx.audience, "POST", "/v1/heartbeat", b"{}")
        for j in range(round(beat_rate * config.step_seconds))
    ]
    return files, beats


async def sleep_until(at: float) -> None:
    delay = at - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


def put_request(ticket: dict[str, Any], body: bytes) -> tuple[str, bytes]:
    """The raw PUT of a presigned upload ticket; returns (authority, request)."""
    url = urlsplit(ticket["url"])
    target = url.path + (f"?{url.query}" if url.query else "")
    return url.netloc, http_request("PUT", url.netloc, target, body, dict(ticket["headers"]))


async def run_file(ctx: Context, job: FileJob) -> None:
    """One node's file: heartbeat, presign, PUT, submitWork; stops at the first refusal."""
    await sleep_until(job.scheduled)
    async with ctx.locks[job.node]:  # a node works on one file at a time, so its nonces go out in order
        t0 = time.time()
        status, _ = await ctx.backend.send(job.heartbeat)
        t1 = time.time()
        job.times["heartbeat"] = (t0, t1, status == 200)
        status, reply = await ctx.backend.send(job.upload)
        t2 = time.time()
        job.times["presign"] = (t1, t2, status == 200)
        if status != 200:
            return
        _, request = put_request(json.loads(reply), job.body)
        status, _ = await ctx.s3.send(request)
        t3 = time.time()
        job.times["put"] = (t2, t3, 200 <= status < 300)
        if not 200 <= status < 300:
            return
        status, reply = await ctx.rpc.send(job.tx)
        t4 = time.time()
        job.sent = status == 200 and b'"result"' in reply
        job.times["tx_send"] = (t3, t4, job.sent)


async def run_beat(ctx: Context, at: float, request: bytes, out: list[tuple[float, float, bool]]) -> None:
    await sleep_until(at)
    t0 = time.time()
    status, _ = await ctx.backend.send(request)
    out.append((t0, time.time(), status == 200))


def chain_times(ctx: Context, job: FileJob) -> None:
    """Fill in the mined, indexed and dispatched stages from what the observers saw."""
    if not job.sent:
        return
    sent_at = job.times["tx_send"][0]
    indexed = ctx.poller.indexed.get(job.work_key)
    mined = ctx.follower.mined.get(job.tx_hash)
    if mined is not None and indexed is not None:
        mined = min(mined, indexed)  # the follower polls: it may see the block after the indexer did
    dispatched = ctx.poller.dispatched.get(job.work_key)
    job.times["mined"] = (sent_at, mined or 0.0, mined is not None)
    if mined is not None:
        job.times["indexed"] = (mined, indexed or 0.0, indexed is not None)
    if indexed is not None:
        job.times["dispatched"] = (indexed, dispatched or 0.0, dispatched is not None)
    if dispatched is not None:
        job.times["end_to_end"] = (job.scheduled, dispatched, True)


def percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stage_row(name: str, samples: list[tuple[float, float, bool]], offered: int, config: LoadConfig) -> dict[str, Any]:
    """Achieved rate and latencies of one stage in one step, and whether it kept up."""
    ok = [(s, e) for s, e, good in samples if good]
    latencies = sorted(e - s for s, e in ok)
    offered_rate = offered / config.step_seconds
    # The rate a stage served: its completions over the time they spread across (plus one arrival
    # interval, so a stage that keeps up spans exactly the step). A constant latency shifts every
    # completion alike and costs nothing here (the p99 bound judges it); a backlog stretches the
    # spread to n / service rate.
    span = config.step_seconds
    if ok:
        ends = [e for _, e in ok]
        span = max(span, max(ends) - min(ends) + 1 / offered_rate)
    achieved = len(ok) / span
    bound = config.http_p99_ms / 1000 if name in HTTP_STAGES else config.chain_p99_s
    row: dict[str, Any] = {
        "stage": name,
        "offered": offered,
        "completed": len(ok),
        "failed": len(samples) - len(ok),
        "offered_per_s": round(offered_rate, 2),
        "achieved_per_s": round(achieved, 2),
        "p50_ms": round(percentile(latencies, 0.5) * 1000, 1) if latencies else None,
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 1) if latencies else None,
        "max_ms": round(latencies[-1] * 1000, 1) if latencies else None,
        "p99_bound_ms": None if name == "end_to_end" else round(bound * 1000),
    }
    reasons = []
    if achieved < config.min_ratio * offered_rate:
        reasons.append(f"achieved {achieved:.1f}/s of {offered_rate:.1f}/s offered")
    if name != "end_to_end" and latencies and percentile(latencies, 0.99) > bound:
        reasons.append(f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms over {bound * 1000:.0f} ms")
    row["saturated"] = bool(reasons)
    row["why"] = "; ".join(reasons) or None
    return row


async def run_step(ctx: Context, rate: float, meter: CpuMeter) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One step at `rate` files/s: sends, drain, per-stage rows and the step's summary row."""
    config = ctx.config
    signed_at = time.monotonic()
    files, beats = prepare_step(ctx, rate)
    sign_s = time.monotonic() - signed_at
    gc.collect()
    start = time.time() + 0.2
    for job in files:
        job.scheduled += start
    beat_rate = len(ctx.fleet.nodes) / config.heartbeat_interval
    cpu_before, load_before, wall_before = meter.sample(), os.getloadavg()[0], time.time()
    beat_times: list[tuple[float, float, bool]] = []
    await asyncio.gather(
        *(run_file(ctx, job) for job in files),
        *(run_beat(ctx, start + j / beat_rate, request, beat_times) for j, request in enumerate(beats)),
    )
    sent_s = time.time() - start
    drain_until = time.time() + config.drain_seconds
    while time.time() < drain_until:
        if all(j.work_key in ctx.poller.dispatched for j in files if j.sent):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.2)  # the follower's last poll
    wall = time.time() - wall_before
    cpu = CpuMeter.delta(cpu_before, meter.sample())
    for job in files:
        chain_times(ctx, job)
    rows = []
    for name in STAGES:
        samples = [job.times[name] for job in files if name in job.times]
        offered = len(files)
        if name == "heartbeat":
            samples += beat_times
            offered += len(beats)
        row = stage_row(name, samples, offered, config)
        # a stage nobody reached (its predecessor refused everything) failed every file
        row["failed"] += offered - len(samples)
        rows.append({"bench": "load", "kind": "stage", "rate": rate, **row})
    saturated = [r["stage"] for r in rows if r["saturated"]]
    summary = {
        "bench": "load",
        "kind": "step",
        "rate": rate,
        "files": len(files),
        "heartbeats": len(files) + len(beats),
        "sign_s": round(sign_s, 2),
        "send_s": round(sent_s, 2),
        "wall_s": round(wall, 2),
        "saturated": saturated,
        "first_saturated": saturated[0] if saturated else None,
        "cpu_s": cpu,
        "cpu_cores": {k: round(v / wall, 2) for k, v in cpu.items()},
        "cores_used": round(sum(cpu.values()) / wall, 2),
        "cpu_ms_per_file": {k: round(1000 * v / len(files), 2) for k, v in cpu.items()},
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }
    return rows, summary


def start_load_backend(market: BenchMarket, config: LoadConfig) -> tuple[str, int]:
    """`proofpool backend serve --workers N` on its own port, on the stack's database and Redis;
    returns its URL and pid."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        "PROOFPOOL_BACKEND_PORT": str(port),
        "PROOFPOOL_BACKEND_URL": url,
        "PROOFPOOL_API_HOSTS": f"127.0.0.1:{port}",
        "PROOFPOOL_METRICS_ADDRESS": "",
        "PROOFPOOL_HEARTBEAT_INTERVAL": str(config.heartbeat_interval),
        **config.backend_env,
    }
    args = ["backend", "serve", "--workers", str(config.backend_workers), "--no-access-log", "--log-level", "warning"]
    service = market.stack.spawn("load-backend", args, env)
    wait_until(lambda: http_ok(url + "/healthz"), timeout=60, what="the load backend", service=service)
    time.sleep(1.0 if config.backend_workers > 1 else 0)  # every worker through its start-up
    return url, service.process.pid


async def run_steps(
    market: BenchMarket, fleet: Fleet, backend: tuple[str, int], config: LoadConfig, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Every step until one saturates or the time cap; the rows of each."""
    stack = market.stack
    w3 = stack.admin.w3
    backend_url, backend_pid = backend
    http = HttpPool.for_url(backend_url, config.connections)
    ctx = Context(
        config=config,
        fleet=fleet,
        audience=Audience(Deployment(fleet.chain_id, fleet.pool_contract), http.authority),
        backend=http,
        s3=HttpPool.for_url(market.s3.endpoint_url, config.connections),
        rpc=HttpPool.for_url(stack.anvil.url, 16),
        follower=ChainFollower(HttpPool.for_url(stack.anvil.url, 1)),
        poller=OutboxPoller(stack.env["DATABASE_URL"]),
        submit=AbiFunction.of(stack.admin.pool.contract.abi, "submitWork"),
        nonces=[int(w3.eth.get_transaction_count(n.address, "pending")) for n in fleet.nodes],
        locks=[asyncio.Lock() for _ in fleet.nodes],
    )
    indexer = next(s for s in stack.services if s.name == "indexer")
    groups = {
        "generator": [os.getpid()],
        "backend": [backend_pid],
        "anvil": [stack.anvil.process.pid],
        "indexer": [indexer.process.pid],
        "seaweed": [market.s3.pid],
        "postgres": postgres_pids(stack.env["DATABASE_URL"]),
    }
    rpid = redis_pid(stack.env["REDIS_URL"])
    if rpid is not None:
        groups["redis"] = [rpid]
    meter = CpuMeter(groups)
    stop = asyncio.Event()
    observers = [asyncio.create_task(ctx.follower.run(stop)), asyncio.create_task(ctx.poller.run(stop))]
    rows: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        await asyncio.sleep(0.5)  # the follower has found the head
        for rate in config.rates:
            step_cap = config.step_seconds + config.drain_seconds + rate * config.step_seconds * 0.002 + 5
            if time.monotonic() - started + step_cap > config.max_seconds:
                rows.append(
                    {"bench": "load", "kind": "stop", "reason": f"time cap {config.max_seconds:.0f} s", "rate": rate}
                )
                break
            stage_rows, summary = await run_step(ctx, rate, meter)
            rows += stage_rows
            rows.append(summary)
            say(
                f"{time.monotonic() - started:6.1f}s rate {rate:g}/s: "
                + ", ".join(f"{r['stage']} {r['achieved_per_s']}/s p99 {r['p99_ms']} ms" for r in stage_rows)
                + (f" -> saturated: {', '.join(summary['saturated'])}" if summary["saturated"] else "")
            )
            if summary["saturated"]:
                rows.append({"bench": "load", "kind": "stop", "reason": "saturated", "rate": rate})
                break
        else:
            rows.append({"bench": "load", "kind": "stop", "reason": "every rate kept up", "rate": config.rates[-1]})
    finally:
        stop.set()
        await asyncio.gather(*observers, return_exceptions=True)
        for pool in (ctx.backend, ctx.s3, ctx.rpc, ctx.follower.rpc):
            await pool.close()
    rows.append(summarize(rows, config, time.monotonic() - started))
    return rows


def summarize(rows: list[dict[str, Any]], config: LoadConfig, seconds: float) -> dict[str, Any]:
    """The headline: the highest step every stage kept up with, and the first stage that did not."""
    steps = [r for r in rows if r["kind"] == "step"]
    kept = [s for s in steps if not s["saturated"]]
    sustained = None
    if kept:
        best = kept[-1]["rate"]
        e2e = next(r for r in rows if r["kind"] == "stage" and r["rate"] == best and r["stage"] == "dispatched")
        sustained = {"offered_files_per_s": best, "submissions_per_s": e2e["achieved_per_s"]}
    saturated = next((s for s in steps if s["saturated"]), None)
    why = None
    if saturated is not None:
        why = next(
            r["why"]
            for r in rows
            if r["kind"] == "stage" and r["rate"] == saturated["rate"] and r["stage"] == saturated["first_saturated"]
        )
    return {
        "bench": "load",
        "kind": "summary",
        "nodes": config.nodes,
        "backend_workers": config.backend_workers,
        "block_time": config.block_time,
        "heartbeat_interval": config.heartbeat_interval,
        "step_seconds": config.step_seconds,
        "sustained": sustained,
        "first_saturated": None
        if saturated is None
        else {
            "rate": saturated["rate"],
            "stage": saturated["first_saturated"],
            "why": why,
            "cpu_cores": saturated["cpu_cores"],
            "cores_used": saturated["cores_used"],
        },
        "load_seconds": round(seconds, 1),
        "cores": os.cpu_count(),
    }


def run_load(config: LoadConfig, say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The whole bench: market, fleet, load backend, steps; returns every row (nothing written)."""
    with bench_market("load", config.redis_db, dispatch=True) as market:
        setup_started = time.monotonic()
        fleet, timings = onboard_fleet(market, config.nodes, config.providers, config.seed, say)
        say(f"fleet of {config.nodes} nodes ready in {timings['total_s']} s: {timings}")
        if config.block_time:
            market.stack.anvil.rpc("evm_setIntervalMining", [config.block_time])
        backend = start_load_backend(market, config)
        setup = {
            "bench": "load",
            "kind": "setup",
            "nodes": config.nodes,
            "providers": config.providers,
            **timings,
            "with_backend_s": round(time.monotonic() - setup_started, 2),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }
        gc.collect()
        gc.freeze()  # as bench/heartbeat.py: a full collection of web3's heap would stall the event loop
        return [setup, *asyncio.run(run_steps(market, fleet, backend, config, say))]


def main(argv: list[str] | None = None) -> int:
    defaults = LoadConfig()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--providers", type=int, default=defaults.providers)
    parser.add_argument("--rates", default=",".join(f"{r:g}" for r in defaults.rates), help="Files/s per step.")
    parser.add_argument("--step-seconds", type=float, default=defaults.step_seconds)
    parser.add_argument("--drain-seconds", type=float, default=defaults.drain_seconds)
    parser.add_argument("--max-seconds", type=float, default=defaults.max_seconds, help="Cap on the load phase.")
    parser.add_argument("--heartbeat-interval", type=float, default=defaults.heartbeat_interval)
    parser.add_argument("--backend-workers", type=int, default=defaults.backend_workers)
    parser.add_argument("--connections", type=int, default=defaults.connections, help="Per HTTP service.")
    parser.add_argument("--http-p99-ms", type=float, default=defaults.http_p99_ms)
    parser.add_argument("--chain-p99-s", type=float, default=defaults.chain_p99_s)
    parser.add_argument("--block-time", type=int, default=defaults.block_time, help="0: a block per transaction.")
    parser.add_argument("--redis-db", type=int, default=defaults.redis_db, help="Redis db to use (flushed).")
    parser.add_argument("--results", default="load", help="Name under bench/results/ (without .jsonl).")
    args = parser.parse_args(argv)
    config = LoadConfig(
        nodes=args.nodes,
        providers=args.providers,
        rates=[float(r) for r in args.rates.split(",") if r.strip()],
        step_seconds=args.step_seconds,
        drain_seconds=args.drain_seconds,
        max_seconds=args.max_seconds,
        heartbeat_interval=args.heartbeat_interval,
        backend_workers=args.backend_workers,
        connections=args.connections,
        http_p99_ms=args.http_p99_ms,
        chain_p99_s=args.chain_p99_s,
        block_time=args.block_time,
        redis_db=args.redis_db,
    )
    rows = run_load(config)
    emit(args.results, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
