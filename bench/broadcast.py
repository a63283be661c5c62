"""Checkpoint broadcast: a fleet of clients through relays against one client straight from S3.

A SeaweedFS started here holds one checkpoint of `--size-mb` random bytes in `--shard-mb`
safetensors shards (a manifest over them, uploaded as the trainer would; not a loadable model:
the fetch path never looks inside the files). Then:

  single  one client process fetches it straight from S3 (no relays), timed;
  direct  `--clients` client processes fetch it straight from S3 at once (the same machine's
          CPU and disk, without relays: what the relays are up against locally);
  fleet   `--relays` relays (`proofpool relay serve`, separate processes, cold caches, each
          mirroring from S3, or with `--chain` each from the previous relay) serve `--clients`
          client processes, each with its own cache, started together; timed until the last
          one has the verified checkpoint. With `--rounds 2` a second fleet round runs against
          the now warm relays.

Every client runs `fetch_checkpoint` (what `ensure_checkpoint(..., relays=...)` runs), checking
every file's sha256 and the manifest's hash. Reported: both times, the effective speed-up
(clients x single time / fleet time: how much faster than fetching N copies one after another
from S3) and fleet time / single time, plus S3 egress in each case (bytes the store sent to
clients and to relays, from the clients' pickers and the relays' /healthz counters).

Prints JSON lines and writes `bench/results/broadcast.jsonl`; everything on disk lives in one
temporary directory, removed at the end.
Run: `.venv/bin/python -m bench.broadcast [--size-mb 1024] [--clients 8] [--relays 2]`
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
from proofpool.devnet.services import Service, http_ok, spawn_cli, wait_until
from safetensors.numpy import save_file

from bench.market import emit
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.checkpoint import (
    MANIFEST_NAME,
    build_picker,
    fetch_checkpoint,
    parse_checkpoint_uri,
    upload_checkpoint,
)
from proofpool.infra.checkpoint.manifest import manifest_of_files
from proofpool.infra.checkpoint.sources import relay_client
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore
from proofpool.infra.storage.seaweed import SeaweedProcess, start_seaweed

POOL, VERSION = 1, 1
MB = 1 << 20


def say(message: str) -> None:
    print(f"[broadcast] {message}", file=sys.stderr, flush=True)


def write_random_checkpoint(out_dir: Path, size_mb: int, shard_mb: int, seed: int = 0) -> list[Path]:
    """Shards of random uint8 tensors (`size_mb` in all) and a config.json: what the manifest lists."""
    out_dir.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    count = max(1, -(-size_mb // shard_mb))
    paths = []
    for index in range(count):
        mb = min(shard_mb, size_mb - index * shard_mb)
        path = out_dir / f"model-{index + 1:05d}-of-{count:05d}.safetensors"
        tensor = np.frombuffer(rng.bytes(mb * MB), dtype=np.uint8)
        save_file({f"layers.{index}.weight": tensor}, str(path))
        paths.append(path)
    config = out_dir / "config.json"
    config.write_text(json.dumps({"model_type": "bench", "shards": count}))
    return [*paths, config]


@dataclass
class RelayProcess:
    url: str
    service: Service

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.service.process

    def health(self) -> dict[str, Any]:
        return httpx.get(f"{self.url}/healthz", timeout=10).json()


@contextmanager
def relay_process(root: Path, env: dict[str, str], upstream: str, index: int):
    """`proofpool relay serve` on a free port with its own cache; stopped on exit."""
    port = free_port()
    args = ["relay", "serve", "--port", str(port), "--upstream", upstream, "--cache-dir", str(root / f"relay-{index}")]
    relay = RelayProcess(
        f"http://127.0.0.1:{port}", spawn_cli(f"relay-{index}", args, env, root / f"relay-{index}.log")
    )
    try:
        wait_until(lambda: http_ok(f"{relay.url}/healthz"), timeout=60, what=f"relay {index}", service=relay.service)
        yield relay
    finally:
        relay.service.stop(timeout=15)


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system) used so far by these processes (the store, the relays)."""
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def run_clients(
    caches: list[Path], uri: str, sha256: str, relays: list[str], env: dict[str, str], services: list[int]
) -> dict[str, Any]:
    """Start one client process per cache, let them all go at once, wait for all; their reports,
    with the CPU seconds the clients and the `services` (pids) spent meanwhile."""
    command = [sys.executable, "-m", "bench.broadcast", "client", "--uri", uri, "--sha256", sha256]
    procs = []
    for cache in caches:
        args = [*command, "--cache", str(cache), *[a for url in relays for a in ("--relay", url)]]
        procs.append(subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for proc in procs:  # imports done, store client built: nothing left but the fetch
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError("a client failed to start")
    started, services_before = time.time(), cpu_seconds(services)
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports = []
    for proc in procs:
        line = proc.stdout.readline()
        if proc.wait(timeout=3600) != 0 or not line:
            raise RuntimeError("a client failed")
        reports.append(json.loads(line))
    return {
        "seconds": max(r["finished"] for r in reports) - started,
        "clients": reports,
        "client_cpu_s": sum(r["cpu_s"] for r in reports),
        "service_cpu_s": cpu_seconds(services) - services_before,
    }


def client_main(args: argparse.Namespace) -> None:
    """One client: wait for `go`, fetch with the verified fetch path, report per-source bytes."""
    store = ObjectStore.from_settings(get_settings())
    location = parse_checkpoint_uri(args.uri)
    expected = bytes.fromhex(args.sha256)
    print("ready", flush=True)
    sys.stdin.readline()
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before = before.ru_utime + before.ru_stime
    started = time.time()
    with relay_client(args.parallel) as client:
        picker = build_picker(store, location, args.relay or [], client, manifest_sha256=expected)
        fetch_checkpoint(picker, expected, Path(args.cache), parallel=args.parallel)
        stats = picker.snapshot()
    finished = time.time()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    by_source = {s.name: {"bytes": s.bytes_fetched, "corrupt": s.corrupt, "failures": s.failures} for s in stats}
    store_bytes = stats[-1].bytes_fetched
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    report = {"seconds": finished - started, "finished": finished, "cpu_s": cpu, "store_bytes": store_bytes}
    print(json.dumps({**report, **by_source}))


def cpu_figures(run: dict[str, Any], total: int) -> dict[str, float]:
    """CPU seconds per GB delivered to clients: theirs, and the store's + relays' together."""
    delivered_gb = len(run["clients"]) * total / (1 << 30)
    return {
        "client_cpu_s_per_gb": round(run["client_cpu_s"] / delivered_gb, 2),
        "service_cpu_s_per_gb": round(run["service_cpu_s"] / delivered_gb, 2),
    }


def _bad_transfers(report: dict[str, Any]) -> int:
    """Corrupt or failed transfers a client saw, over all its sources."""
    return sum(v["corrupt"] + v["failures"] for v in report.values() if isinstance(v, dict))


def bench(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    root = Path(tempfile.mkdtemp(prefix="proofpool-bench-broadcast-"))
    try:
        with ExitStack() as stack:
            s3: SeaweedProcess = stack.enter_context(
                start_seaweed(root / "s3", access_key="bench", secret_key="bench-secret", bucket="bench")
            )
            env = {**os.environ, **s3.env(), "PROOFPOOL_STATE_DIR": str(root / "state")}
            store = ObjectStore.from_settings(s3.settings(get_settings()))
            say(f"writing a {args.size_mb} MB checkpoint in {args.shard_mb} MB shards")
            files = write_random_checkpoint(root / "checkpoint", args.size_mb, args.shard_mb)
            manifest = manifest_of_files(POOL, VERSION, files)
            (root / "checkpoint" / MANIFEST_NAME).write_bytes(manifest.to_bytes())
            started = time.monotonic()
            uri = upload_checkpoint(store, root / "checkpoint", manifest)
            upload_s = time.monotonic() - started
            shutil.rmtree(root / "checkpoint")
            total = manifest.total_size
            sha256 = manifest.sha256_hex()
            say(f"uploaded {total / MB:.0f} MB in {upload_s:.1f} s; one client straight from S3")

            single = run_clients([root / "single"], uri, sha256, [], env, [s3.pid])
            shutil.rmtree(root / "single")
            single_s = single["seconds"]
            rows.append(
                {
                    "case": "single_from_s3",
                    "clients": 1,
                    "size_mb": round(total / MB, 1),
                    "files": len(manifest.files),
                    "seconds": round(single_s, 2),
                    "mb_per_s": round(total / MB / single_s, 1),
                    "s3_egress_mb": round(single["clients"][0]["store_bytes"] / MB, 1),
                    **cpu_figures(single, total),
                    "upload_seconds": round(upload_s, 2),
                }
            )
            say(f"single: {single_s:.1f} s; {args.clients} clients straight from S3 at once")

            caches = [root / f"direct-{i}" for i in range(args.clients)]
            direct = run_clients(caches, uri, sha256, [], env, [s3.pid])
            for cache in caches:
                shutil.rmtree(cache, ignore_errors=True)
            direct_s = direct["seconds"]
            rows.append(
                {
                    "case": "fleet_from_s3",
                    "clients": args.clients,
                    "size_mb": round(total / MB, 1),
                    "seconds": round(direct_s, 2),
                    "effective_speedup": round(args.clients * single_s / direct_s, 2),
                    "fleet_over_single": round(direct_s / single_s, 2),
                    "aggregate_mb_per_s": round(args.clients * total / MB / direct_s, 1),
                    "s3_egress_mb": round(sum(c["store_bytes"] for c in direct["clients"]) / MB, 1),
                    **cpu_figures(direct, total),
                }
            )
            say(f"direct fleet: {direct_s:.1f} s; starting {args.relays} relays")

            relays: list[RelayProcess] = []
            for index in range(args.relays):
                upstream = relays[-1].url if args.chain and relays else "s3"
                relays.append(stack.enter_context(relay_process(root, env, upstream, index)))
            urls = [relay.url for relay in relays]
            for round_ in range(1, args.rounds + 1):
                before = [relay.health() for relay in relays]
                caches = [root / f"client-{round_}-{i}" for i in range(args.clients)]
                fleet = run_clients(caches, uri, sha256, urls, env, [s3.pid, *(r.process.pid for r in relays)])
                after = [relay.health() for relay in relays]
                for cache in caches:
                    shutil.rmtree(cache, ignore_errors=True)
                from_s3 = [
                    a["bytes_from_upstream"] - b["bytes_from_upstream"]
                    for a, b, r in zip(after, before, relays, strict=True)
                    if a["upstream"].startswith("s3://")
                ]
                clients_s3 = sum(c["store_bytes"] for c in fleet["clients"])
                fleet_s = fleet["seconds"]
                rows.append(
                    {
                        "case": f"fleet_via_relays_{'warm' if round_ > 1 else 'cold'}",
                        "clients": args.clients,
                        "relays": args.relays,
                        "topology": "chain" if args.chain else "flat",
                        "size_mb": round(total / MB, 1),
                        "seconds": round(fleet_s, 2),
                        "slowest_client_s": round(max(c["seconds"] for c in fleet["clients"]), 2),
                        "fastest_client_s": round(min(c["seconds"] for c in fleet["clients"]), 2),
                        "effective_speedup": round(args.clients * single_s / fleet_s, 2),
                        "fleet_over_single": round(fleet_s / single_s, 2),
                        "fleet_over_direct_fleet": round(fleet_s / direct_s, 2),
                        "aggregate_mb_per_s": round(args.clients * total / MB / fleet_s, 1),
                        "s3_egress_mb": round((sum(from_s3) + clients_s3) / MB, 1),
                        "s3_egress_if_direct_mb": round(args.clients * total / MB, 1),
                        "relay_served_mb": [
                            round((a["bytes_served"] - b["bytes_served"]) / MB, 1)
                            for a, b in zip(after, before, strict=True)
                        ],
                        "corrupt_or_failed": sum(_bad_transfers(c) for c in fleet["clients"]),
                        **cpu_figures(fleet, total),
                    }
                )
                say(f"fleet round {round_}: {fleet_s:.1f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    client = sub.add_parser("client", help="internal: one client process")
    client.add_argument("--uri", required=True)
    client.add_argument("--sha256", required=True)
    client.add_argument("--cache", required=True)
    client.add_argument("--relay", action="append")
    client.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--size-mb", type=int, default=1024, help="checkpoint size (default 1 GB)")
    parser.add_argument("--shard-mb", type=int, default=50, help="shard size (the trainer's default)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--relays", type=int, default=2)
    parser.add_argument("--chain", action="store_true", help="relay i mirrors from relay i-1, not from S3")
    parser.add_argument("--rounds", type=int, default=1, help="fleet rounds; 2+ measure warm relays too")
    args = parser.parse_args()
    if args.command == "client":
        client_main(args)
        return
    if min(args.size_mb, args.shard_mb, args.clients, args.relays, args.rounds) < 1:
        parser.error("sizes and counts must be >= 1")
    emit("broadcast", bench(args))


if __name__ == "__main__":
    main()
