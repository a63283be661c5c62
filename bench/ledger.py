"""What a ledger page costs with 1,000,000 submissions in the table.

Fills a fresh database (`proofpool_bench_ledger_<random>`, migrated to head) with 1,000,000
submissions over 100 pools, 1,000 providers and 2,000 nodes (two per provider), mixed statuses,
2-second blocks (about 5.8 days of chain), where an attested, invalidated or finalized row has
moved to the position of that later log, as the indexer does. Then times `limit=100` pages of
typical filtered queries, page 1 and deep pages reached by cursor, at two layers:

- `http`: a real `uvicorn` process serving the app, called over loopback by httpx (one request
  at a time; client and server share this machine's cores);
- `db`: `proofpool.backend.db.ledger.fetch_page` on one psycopg connection (the query alone).

Prints one JSON line per scenario and layer and writes them to `bench/results/ledger.jsonl`;
drops the database at the end. Target: p99 <= 50 ms. Run: `.venv/bin/python bench/ledger.py`
(about 3 minutes; `--rows` for a smaller table).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
from eth_utils import to_checksum_address
from proofpool.backend.db.ledger import SUBMISSIONS, encode_cursor, fetch_page

from proofpool.infra import db
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.config import REPO_ROOT, get_settings

RESULTS = Path(__file__).resolve().parent / "results" / "ledger.jsonl"
POOLS, PROVIDERS, NODES = 100, 1_000, 2_000
T0 = datetime(2025, 1, 1, tzinfo=UTC)
BLOCK_SECONDS, PER_BLOCK, FIRST_BLOCK = 2, 4, 1_000

FILL_SUBMISSIONS = """
INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status, submitted_at,
                         block_number, tx_hash, log_index, status_block, status_tx_hash)
SELECT n.idx %% %(pools)s + 1, sha256(int8send(i)), n.address, n.provider, 1 + i %% 500, 1 + i / 100000, s.status,
       %(t0)s + (g.block * %(block_seconds)s) * interval '1 second',
       g.block, sha256(int8send(-1 - i)), i %% %(per_block)s,
       CASE WHEN s.status = 'pending' THEN NULL ELSE g.block + s.delay END,
       CASE WHEN s.status = 'pending' THEN NULL ELSE sha256(int8send(-1000000000 - i)) END
FROM generate_series(0::bigint, %(rows)s - 1) AS i
CROSS JOIN LATERAL (SELECT %(first_block)s + i / %(per_block)s AS block,
                           (i * 7919) %% %(nodes)s AS node_idx,
                           abs(hashint8(i)) %% 100 AS bucket) AS g
JOIN bench_nodes n ON n.idx = g.node_idx
CROSS JOIN LATERAL (SELECT * FROM (VALUES
        ('pending', 0, 0, 0, 12), ('accepted', 150, 0, 12, 30), ('invalid', 150, 1, 30, 35),
        ('finalized', 1800, 2, 35, 97), ('forfeited', 1800, 3, 97, 100)
    ) AS v(status, delay, k, lo, hi) WHERE g.bucket >= v.lo AND g.bucket < v.hi) AS s
"""
"""A row keeps its submission position (block, log index 0..3); a judged row records the block of its
status change `delay` blocks later."""

FILL_ENTITIES = [
    """INSERT INTO providers (address, active_stake, compute_units, registered_block, block_number, tx_hash)
       SELECT DISTINCT provider, 1000 * 10::numeric ^ 18, 8, 1, 1, sha256(provider::bytea) FROM bench_nodes""",
    """INSERT INTO nodes (address, provider, compute_units, specs_hash, attested, block_number, tx_hash)
       SELECT address, provider, 4, sha256(address::bytea), idx %% 3 = 0, 2, sha256(address::bytea) FROM bench_nodes""",
    """INSERT INTO pools (pool_id, creator, manager, treasury, status, model_uri, reward_per_unit, validator_fee,
                          slash_amount, dispute_window, validator_slash_share_bps, budget, block_number, tx_hash)
       SELECT p, %(creator)s, %(creator)s, %(creator)s, 'active', 'devnet://bench/' || p, 10::numeric ^ 16,
              5 * 10::numeric ^ 17, 50 * 10::numeric ^ 18, 3600, 5000, 10::numeric ^ 24, 3, sha256(int8send(p))
       FROM generate_series(1, %(pools)s) AS p""",
]


def fill(url: str, rows: int) -> dict[str, Any]:
    """Write the data set; returns the addresses the scenarios draw from."""
    rng = random.Random(5)
    providers = [to_checksum_address(rng.randbytes(20).hex()) for _ in range(PROVIDERS)]
    nodes = [(i, to_checksum_address(rng.randbytes(20).hex()), providers[i // 2]) for i in range(NODES)]
    params = {
        "rows": rows,
        "pools": POOLS,
        "nodes": NODES,
        "t0": T0,
        "block_seconds": BLOCK_SECONDS,
        "per_block": PER_BLOCK,
        "first_block": FIRST_BLOCK,
        "creator": providers[0],
    }
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE UNLOGGED TABLE bench_nodes (idx INT PRIMARY KEY, address TEXT, provider TEXT)")
        with conn.cursor().copy("COPY bench_nodes (idx, address, provider) FROM STDIN") as copy:
            for row in nodes:
                copy.write_row(row)
        for statement in FILL_ENTITIES:
            conn.execute(statement, params)
        conn.execute(FILL_SUBMISSIONS, params)
        conn.execute("DROP TABLE bench_nodes")
        conn.execute("VACUUM ANALYZE")
        count = conn.execute("SELECT count(*) FROM submissions").fetchone()[0]
        by_status = dict(conn.execute("SELECT status, count(*) FROM submissions GROUP BY status").fetchall())
    fill_s = time.perf_counter() - started
    print(json.dumps({"fill": count, "seconds": round(fill_s, 1), "by_status": by_status}), flush=True)
    last_block = FIRST_BLOCK + rows // PER_BLOCK
    return {"providers": providers, "nodes": [n[1] for n in nodes], "last_block": last_block}


@dataclass(frozen=True)
class Scenario:
    """One kind of query; `params(rng)` draws the filters (and cursor) of one request."""

    name: str
    note: str
    params: Callable[[random.Random], dict[str, Any]]


def _time(block: int) -> str:
    return (T0 + timedelta(seconds=block * BLOCK_SECONDS)).isoformat()


def scenarios(url: str, world: dict[str, Any]) -> list[Scenario]:
    """The typical auditor and trainer queries, with deep cursors taken from real rows."""
    with psycopg.connect(url) as conn:
        deep_pool = {
            pool: encode_cursor(SUBMISSIONS, row)
            for pool, *row in conn.execute(
                """SELECT pool_id, block_number, log_index FROM (
                     SELECT pool_id, block_number, log_index,
                            row_number() OVER (PARTITION BY pool_id ORDER BY block_number, log_index) AS n,
                            count(*) OVER (PARTITION BY pool_id) AS total
                     FROM submissions) AS ranked WHERE n = (total * 9) / 10"""
            ).fetchall()
        }
        positions = [
            encode_cursor(SUBMISSIONS, row)
            for row in conn.execute(
                "SELECT block_number, log_index FROM submissions TABLESAMPLE SYSTEM (1) LIMIT 2000"
            ).fetchall()
        ]
    pools = list(range(1, POOLS + 1))
    last = world["last_block"]

    def window(rng: random.Random, blocks: int) -> dict[str, str]:
        blocks = min(blocks, (last - FIRST_BLOCK) // 4)  # small --rows runs span less than a day
        start = rng.randint(FIRST_BLOCK, last - blocks)
        return {"since": _time(start), "until": _time(start + blocks)}

    return [
        Scenario("pool", "pool_id, page 1", lambda r: {"pool_id": r.choice(pools)}),
        Scenario("provider", "provider, page 1", lambda r: {"provider": r.choice(world["providers"])}),
        Scenario("node", "node, page 1", lambda r: {"node": r.choice(world["nodes"])}),
        Scenario("status", "status=invalid (5%), page 1", lambda r: {"status": "invalid"}),
        Scenario(
            "pool_status",
            "pool_id + status, page 1 (pending, accepted, invalid or finalized)",
            lambda r: {"pool_id": r.choice(pools), "status": r.choice(["pending", "accepted", "invalid", "finalized"])},
        ),
        Scenario("time_1h", "since/until over 1 hour (~7,200 rows), page 1", lambda r: window(r, 1800)),
        Scenario("time_1d", "since/until over 1 day (~17% of rows), page 1", lambda r: window(r, 43_200)),
        Scenario(
            "pool_time_1d",
            "pool_id + 1-day window, page 1",
            lambda r: {"pool_id": r.choice(pools), **window(r, 43_200)},
        ),
        Scenario(
            "pool_deep",
            "pool_id, page at 90% of the pool via cursor",
            lambda r: {"pool_id": (p := r.choice(pools)), "cursor": deep_pool[p]},
        ),
        Scenario(
            "all_deep", "no filter, page at a random position via cursor", lambda r: {"cursor": r.choice(positions)}
        ),
        Scenario(
            "provider_deep",
            "provider, page after a random position via cursor",
            lambda r: {"provider": r.choice(world["providers"]), "cursor": r.choice(positions)},
        ),
    ]


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max_ms": round(ordered[-1], 2),
    }


def serve(url: str) -> tuple[subprocess.Popen, str]:
    """uvicorn with the app on a free port, against the bench database."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "PROOFPOOL_DB_POOL_MAX": "4"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "proofpool.backend.app:create_app", "--factory", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"uvicorn exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}/v1/ledger/pools", params={"limit": 1}, timeout=2).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("uvicorn did not answer within 60 s")


def measure_http(base: str, scenario: Scenario, requests: int, warmup: int) -> list[float]:
    rng = random.Random(scenario.name)
    samples = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for n in range(warmup + requests):
            params = {"limit": 100, **scenario.params(rng)}
            started = time.perf_counter()
            reply = client.get("/v1/ledger/submissions", params=params)
            elapsed = (time.perf_counter() - started) * 1000
            if reply.status_code != 200:
                raise RuntimeError(f"{scenario.name}: {reply.status_code} {reply.text[:200]}")
            if n >= warmup:
                samples.append(elapsed)
    return samples


async def measure_db(url: str, scenario: Scenario, requests: int, warmup: int) -> list[float]:
    rng = random.Random(scenario.name)
    samples = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for n in range(warmup + requests):
            params = scenario.params(rng)
            cursor = params.pop("cursor", None)
            for key in ("since", "until"):
                if key in params:
                    params[key] = datetime.fromisoformat(params[key])
            started = time.perf_counter()
            await fetch_page(conn, SUBMISSIONS, filters=params, cursor=cursor, limit=100)
            elapsed = (time.perf_counter() - started) * 1000
            if n >= warmup:
                samples.append(elapsed)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="Submissions to write.")
    parser.add_argument("--requests", type=int, default=400, help="Timed requests per scenario and layer.")
    parser.add_argument("--keep", action="store_true", help="Keep the database (prints its URL).")
    args = parser.parse_args()

    url = db.with_database(get_settings().database_url, f"proofpool_bench_ledger_{uuid.uuid4().hex[:8]}")
    db.ensure_database(url)
    results: list[dict[str, Any]] = []
    server = None
    try:
        db.upgrade(url)
        world = fill(url, args.rows)
        cases = scenarios(url, world)
        server, base = serve(url)
        common = {
            "bench": "ledger",
            "rows": args.rows,
            "limit": 100,
            "requests": args.requests,
            "machine": f"{platform.machine()} {os.cpu_count()} cores",
        }
        for case in cases:
            for layer in ("http", "db"):
                if layer == "http":
                    samples = measure_http(base, case, args.requests, warmup=20)
                else:
                    samples = asyncio.run(measure_db(url, case, args.requests, warmup=20))
                line = {**common, "scenario": case.name, "query": case.note, "layer": layer, **percentiles(samples)}
                line["target_p99_ms"], line["meets_target"] = 50, line["p99_ms"] <= 50
                print(json.dumps(line), flush=True)
                results.append(line)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        if args.keep:
            print(json.dumps({"kept_database": url}))
        else:
            db.drop_database(url)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("".join(json.dumps(line) + "\n" for line in results))


if __name__ == "__main__":
    main()
