"""What a ledger page and an explorer page cost with 1,000,000 submissions in the table.

Fills a fresh database (`proofpool_bench_ledger_<random>`, migrated to head) with 1,000,000
submissions over 100 pools, 1,000 providers and 2,000 nodes (two per provider, each in one pool),
mixed statuses, one in ten a bundle of four files, 2-second blocks (about 5.8 days of chain), with
what their judgment logged: a verdict for every judged submission (20 validators), a slash and a
slash share for an invalid one, a provider reward and a validator fee for a finalized one, and per
pool memberships and 50 checkpoints. A submission keeps the position of its own log; its verdict
and its status change are logged later (150 blocks for an attestation or invalidation, 1,800 for
a finalization), as on the chain. The statistics (pool_stats, contributors, validator_stats) are
the triggers' own. Then it times:

- `limit=100` pages of the ledger API's typical filtered queries, page 1 and deep pages reached by
  cursor, oldest first and newest first (`order=desc`), and its key lookups (an account, a pool, a
  transaction's rows, a bundle file's submission), at two layers:
  - `http`: a real `uvicorn` process serving `backend serve`'s app (the backend with the explorer
    mounted), called over loopback by httpx (one request at a time; client and server share this
    machine's cores);
  - `db`: `proofpool.backend.db.ledger.fetch_page` on one psycopg connection (the query alone);
- the explorer's pages, through the same process (`http` only): the market, a pool, a provider, a
  node, a validator, a submission and a search for a transaction hash, each reading the ledger API
  in-process as `backend serve` mounts it.

Prints one JSON line per scenario and layer and writes them to `bench/results/ledger.jsonl` (or
`--results`); drops the database at the end. Targets: p99 <= 50 ms for a ledger page, <= 100 ms
for an explorer page. Run: `.venv/bin/python bench/ledger.py` (the fill takes a few minutes;
`--rows` for a smaller table).
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
from proofpool.backend.db.ledger import encode_cursor, fetch_page

from proofpool.core.ledger_listings import LISTINGS, SUBMISSIONS, Listing, Order
from proofpool.infra import db
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.config import REPO_ROOT, get_settings

RESULTS = Path(__file__).resolve().parent / "results" / "ledger.jsonl"
POOLS, PROVIDERS, NODES, VALIDATORS, CHECKPOINTS = 100, 1_000, 2_000, 20, 50
T0 = datetime(2025, 1, 1, tzinfo=UTC)
BLOCK_SECONDS, PER_BLOCK, FIRST_BLOCK = 2, 4, 1_000
JUDGED_AFTER = 150
"""Blocks between a submission and its verdict (an invalidation also slashes then)."""
API_TARGET_MS, PAGE_TARGET_MS = 50, 100
LIMIT = 100

FILL_SUBMISSIONS = """
INSERT INTO submissions (pool_id, work_key, node, provider, work_units, model_version, status, submitted_at,
                         block_number, tx_hash, log_index, status_block, status_tx_hash, file_keys, file_units)
SELECT n.idx %% %(pools)s + 1, sha256(int8send(i)), n.address, n.provider,
       CASE WHEN g.bundle THEN 4 * (1 + i %% 125) ELSE 1 + i %% 500 END, 1 + i / 100000, s.status,
       %(t0)s + (g.block * %(block_seconds)s) * interval '1 second',
       g.block, sha256(int8send(-1 - i)), i %% %(per_block)s,
       CASE WHEN s.status = 'pending' THEN NULL ELSE g.block + s.delay END,
       CASE WHEN s.status = 'pending' THEN NULL ELSE sha256(int8send(-1000000000 - i)) END,
       CASE WHEN g.bundle THEN ARRAY(SELECT sha256(int8send(i) || int2send(f::int2)) FROM generate_series(1, 4) AS f
                                    ORDER BY 1) END,
       CASE WHEN g.bundle THEN array_fill(1 + i %% 125, ARRAY[4]) END
FROM generate_series(0::bigint, %(rows)s - 1) AS i
CROSS JOIN LATERAL (SELECT %(first_block)s + i / %(per_block)s AS block,
                           (i * 7919) %% %(nodes)s AS node_idx,
                           abs(hashint8(i)) %% 100 AS bucket,
                           i %% 10 = 0 AS bundle) AS g
JOIN bench_nodes n ON n.idx = g.node_idx
CROSS JOIN LATERAL (SELECT * FROM (VALUES
        ('pending', 0, 0, 0, 12), ('accepted', %(judged_after)s, 0, 12, 30), ('invalid', %(judged_after)s, 1, 30, 35),
        ('finalized', 1800, 2, 35, 97), ('forfeited', 1800, 3, 97, 100)
    ) AS v(status, delay, k, lo, hi) WHERE g.bucket >= v.lo AND g.bucket < v.hi) AS s
"""
"""A row keeps its submission position (block, log index 0..3) and records the block and
transaction of its last status change `delay` blocks later; one in ten is a bundle of four files."""

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
    """INSERT INTO validators (address, active, block_number, tx_hash)
       SELECT address, true, 2, sha256(address::bytea) FROM bench_validators""",
    """INSERT INTO memberships (pool_id, node, provider, state, blacklisted, block_number, tx_hash)
       SELECT idx %% %(pools)s + 1, address, provider, 'active', false, 4, sha256(('join' || address)::bytea)
       FROM bench_nodes""",
    """INSERT INTO checkpoints (pool_id, version, manifest_sha256, uri, block_number, tx_hash, log_index)
       SELECT p, v, sha256(int8send(p * 1000 + v)), 'hf://bench/' || p || '/' || v,
              %(first_block)s + v * %(checkpoint_blocks)s + p, sha256(int8send(-5000000000 - p * 1000 - v)),
              4 * %(per_block)s
       FROM generate_series(1, %(pools)s) AS p, generate_series(1, %(checkpoints)s) AS v""",
]

FILL_JUDGMENTS = [
    # One verdict per judged submission, in the transaction that set an accepted or invalid status
    # (a finalized or forfeited one was attested in a transaction of its own, then settled).
    """INSERT INTO verdicts (pool_id, work_key, verdict, validator, reason, block_number, tx_hash, log_index,
                            lag_blocks)
       SELECT s.pool_id, s.work_key, CASE WHEN s.status = 'invalid' THEN 'invalid' ELSE 'accepted' END, v.address,
              CASE WHEN s.status = 'invalid' THEN 'sampling_mismatch' END, s.block_number + %(judged_after)s,
              CASE WHEN s.status IN ('accepted', 'invalid') THEN s.status_tx_hash
                   ELSE sha256(s.tx_hash || '\x01'::bytea) END,
              %(per_block)s + s.log_index, %(judged_after)s
       FROM submissions s
       JOIN bench_validators v ON v.idx = abs(hashint8(s.block_number * 8 + s.log_index)) %% %(validators)s
       WHERE s.status <> 'pending'""",
    """INSERT INTO slashes (pool_id, work_key, provider, validator, validator_share, treasury, treasury_share, amount,
                           block_number, tx_hash, log_index)
       SELECT s.pool_id, s.work_key, s.provider, v.validator, 25 * 10::numeric ^ 18, %(creator)s,
              25 * 10::numeric ^ 18, 50 * 10::numeric ^ 18, s.status_block, s.status_tx_hash,
              2 * %(per_block)s + s.log_index
       FROM submissions s JOIN verdicts v ON v.pool_id = s.pool_id AND v.work_key = s.work_key
       WHERE s.status = 'invalid'""",
    """INSERT INTO rewards (account, pool_id, work_key, kind, amount, block_number, tx_hash, log_index)
       SELECT r.account, s.pool_id, s.work_key, r.kind, r.amount, s.status_block, s.status_tx_hash, r.log
       FROM submissions s JOIN verdicts v ON v.pool_id = s.pool_id AND v.work_key = s.work_key
       CROSS JOIN LATERAL (VALUES
           (s.provider, 'provider_reward', s.work_units * 10::numeric ^ 16, 3 * %(per_block)s + s.log_index),
           (v.validator, 'validator_fee', 5 * 10::numeric ^ 17 * COALESCE(cardinality(s.file_keys), 1),
            3 * %(per_block)s + s.log_index),
           (v.validator, 'slash_share', 25 * 10::numeric ^ 18, 2 * %(per_block)s + s.log_index)
       ) AS r(account, kind, amount, log)
       WHERE (s.status = 'finalized' AND r.kind <> 'slash_share')
          OR (s.status = 'invalid' AND r.kind = 'slash_share')""",
]


def _addresses(rng: random.Random, count: int) -> list[str]:
    return [to_checksum_address(rng.randbytes(20).hex()) for _ in range(count)]


def fill(url: str, rows: int) -> None:
    """Write the data set (the module docstring says what it holds)."""
    rng = random.Random(5)
    providers = _addresses(rng, PROVIDERS)
    nodes = [(i, address, providers[i // 2]) for i, address in enumerate(_addresses(rng, NODES))]
    validators = list(enumerate(_addresses(rng, VALIDATORS)))
    params = {
        "rows": rows,
        "pools": POOLS,
        "nodes": NODES,
        "validators": VALIDATORS,
        "checkpoints": CHECKPOINTS,
        "checkpoint_blocks": max(POOLS + 1, rows // PER_BLOCK // CHECKPOINTS),
        "t0": T0,
        "block_seconds": BLOCK_SECONDS,
        "per_block": PER_BLOCK,
        "first_block": FIRST_BLOCK,
        "judged_after": JUDGED_AFTER,
        "creator": providers[0],
    }
    started = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE UNLOGGED TABLE bench_nodes (idx INT PRIMARY KEY, address TEXT, provider TEXT)")
        conn.execute("CREATE UNLOGGED TABLE bench_validators (idx INT PRIMARY KEY, address TEXT)")
        with conn.cursor().copy("COPY bench_nodes (idx, address, provider) FROM STDIN") as copy:
            for row in nodes:
                copy.write_row(row)
        with conn.cursor().copy("COPY bench_validators (idx, address) FROM STDIN") as copy:
            for row in validators:
                copy.write_row(row)
        for statement in (*FILL_ENTITIES, FILL_SUBMISSIONS, *FILL_JUDGMENTS):
            conn.execute(statement, params)
        conn.execute("DROP TABLE bench_nodes, bench_validators")
        conn.execute("VACUUM ANALYZE")
        counts = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("submissions", "verdicts", "slashes", "rewards", "checkpoints", "contributors")
        }
        by_status = dict(conn.execute("SELECT status, count(*) FROM submissions GROUP BY status").fetchall())
    fill_s = time.perf_counter() - started
    print(json.dumps({"fill": counts, "seconds": round(fill_s, 1), "by_status": by_status}), flush=True)


@dataclass(frozen=True)
class World:
    """Real ids of the filled database the scenarios draw from."""

    pools: list[int]
    providers: list[str]
    nodes: list[str]
    validators: list[str]
    submissions: list[tuple[int, str]]
    """(pool_id, work_key) of sampled submissions."""
    files: list[str]
    """Keys of files inside sampled bundles."""
    submission_txs: list[str]
    verdict_txs: list[str]
    status_txs: list[str]
    """Transactions that last changed a sampled submission's status."""
    finalization_txs: list[str]
    """Those of finalizations (each logged a provider reward and a validator fee)."""
    positions: list[tuple[int, int]]
    """Chain positions of sampled submissions (deep cursors)."""
    deep_pool: dict[int, tuple[int, int]]
    """Per pool, the position 90% of the way through its submissions."""
    first_block: int
    last_block: int


SAMPLES = 2_000


def world_of(url: str) -> World:
    """Sample the ids the scenarios ask for from the database (filled now, or kept by `--keep`)."""

    def hexes(conn: psycopg.Connection, query: str) -> list[Any]:
        return [row[0] if len(row) == 1 else tuple(row) for row in conn.execute(query, {"n": SAMPLES}).fetchall()]

    with psycopg.connect(url) as conn:
        sampled = conn.execute(
            """SELECT pool_id, '0x' || encode(work_key, 'hex'), block_number, log_index,
                      '0x' || encode(tx_hash, 'hex'), '0x' || encode(status_tx_hash, 'hex'),
                      '0x' || encode(file_keys[2], 'hex'), status
               FROM submissions ORDER BY hashint8(block_number * 8 + log_index) LIMIT %(n)s""",
            {"n": SAMPLES},
        ).fetchall()
        verdict_txs = hexes(
            conn, "SELECT '0x' || encode(tx_hash, 'hex') FROM verdicts ORDER BY hashint8(id) LIMIT %(n)s"
        )
        deep_pool = {
            pool: (block, log)
            for pool, block, log in conn.execute(
                """SELECT pool_id, block_number, log_index FROM (
                     SELECT pool_id, block_number, log_index,
                            row_number() OVER (PARTITION BY pool_id ORDER BY block_number, log_index) AS n,
                            count(*) OVER (PARTITION BY pool_id) AS total
                     FROM submissions) AS ranked WHERE n = GREATEST(1, (total * 9) / 10)"""
            ).fetchall()
        }
        first, last = conn.execute("SELECT min(block_number), max(block_number) FROM submissions").fetchone()
        return World(
            pools=hexes(conn, "SELECT pool_id FROM pools ORDER BY pool_id"),
            providers=hexes(conn, "SELECT address FROM providers"),
            nodes=hexes(conn, "SELECT address FROM nodes"),
            validators=hexes(conn, "SELECT address FROM validators"),
            submissions=[(row[0], row[1]) for row in sampled],
            files=[row[6] for row in sampled if row[6] is not None],
            submission_txs=[row[4] for row in sampled],
            verdict_txs=verdict_txs,
            status_txs=[row[5] for row in sampled if row[5] is not None],
            finalization_txs=[row[5] for row in sampled if row[7] == "finalized"],
            positions=[(row[2], row[3]) for row in sampled],
            deep_pool=deep_pool,
            first_block=first,
            last_block=last,
        )


Request = tuple[str, dict[str, Any]]
"""A request's path and query parameters."""


@dataclass(frozen=True)
class Scenario:
    """One kind of request; `request(rng)` draws one (its path and parameters)."""

    name: str
    note: str
    request: Callable[[random.Random], Request]
    listing: Listing | None = None
    """The ledger list the request pages, also timed at the query layer; None: an explorer page."""

    @property
    def target_ms(self) -> float:
        return API_TARGET_MS if self.listing is not None else PAGE_TARGET_MS


def _time(block: int) -> str:
    return (T0 + timedelta(seconds=block * BLOCK_SECONDS)).isoformat()


def _api(name: str, note: str, listing: str, params: Callable[[random.Random], dict[str, Any]]) -> Scenario:
    declared = LISTINGS[listing]
    return Scenario(name, note, lambda r: (f"/v1/ledger/{listing}", {"limit": LIMIT, **params(r)}), declared)


def _page(name: str, note: str, path: Callable[[random.Random], str], **params: Any) -> Scenario:
    return Scenario(name, note, lambda r: (f"/explorer{path(r)}", dict(params)))


def api_scenarios(world: World) -> list[Scenario]:
    """The typical auditor and trainer queries, the explorer's newest-first pages and its key
    lookups, with deep cursors taken from real rows."""
    pools, last = world.pools, world.last_block

    def window(rng: random.Random, blocks: int) -> dict[str, str]:
        blocks = min(blocks, (last - world.first_block) // 4)  # small --rows runs span less than a day
        start = rng.randint(world.first_block, last - blocks)
        return {"since": _time(start), "until": _time(start + blocks)}

    def deep(r: random.Random, order: Order = Order.ASC) -> str:
        return encode_cursor(SUBMISSIONS, r.choice(world.positions), order)

    def desc(**params: Any) -> dict[str, Any]:
        return {**params, "order": Order.DESC.value}

    return [
        _api("pool", "pool_id, page 1", "submissions", lambda r: {"pool_id": r.choice(pools)}),
        _api("provider", "provider, page 1", "submissions", lambda r: {"provider": r.choice(world.providers)}),
        _api("node", "node, page 1", "submissions", lambda r: {"node": r.choice(world.nodes)}),
        _api("status", "status=invalid (5%), page 1", "submissions", lambda r: {"status": "invalid"}),
        _api(
            "pool_status",
            "pool_id + status, page 1 (pending, accepted, invalid or finalized)",
            "submissions",
            lambda r: {"pool_id": r.choice(pools), "status": r.choice(["pending", "accepted", "invalid", "finalized"])},
        ),
        _api("time_1h", "since/until over 1 hour (~7,200 rows), page 1", "submissions", lambda r: window(r, 1800)),
        _api("time_1d", "since/until over 1 day (~17% of rows), page 1", "submissions", lambda r: window(r, 43_200)),
        _api(
            "pool_time_1d",
            "pool_id + 1-day window, page 1",
            "submissions",
            lambda r: {"pool_id": r.choice(pools), **window(r, 43_200)},
        ),
        _api(
            "pool_deep",
            "pool_id, page at 90% of the pool via cursor",
            "submissions",
            lambda r: {"pool_id": (p := r.choice(pools)), "cursor": encode_cursor(SUBMISSIONS, world.deep_pool[p])},
        ),
        _api("all_deep", "no filter, page at a random position via cursor", "submissions",
             lambda r: {"cursor": deep(r)}),
        _api(
            "provider_deep",
            "provider, page after a random position via cursor",
            "submissions",
            lambda r: {"provider": r.choice(world.providers), "cursor": deep(r)},
        ),
        # Newest first: the explorer's feed, a validator's latest verdicts, deep pages backwards.
        _api("pool_desc", "pool_id, newest first, page 1", "submissions", lambda r: desc(pool_id=r.choice(pools))),
        _api(
            "provider_desc",
            "provider, newest first, page 1",
            "submissions",
            lambda r: desc(provider=r.choice(world.providers)),
        ),
        _api(
            "all_deep_desc",
            "no filter, newest first, page at a random position via cursor",
            "submissions",
            lambda r: desc(cursor=deep(r, Order.DESC)),
        ),
        _api(
            "pool_time_1d_desc",
            "pool_id + 1-day window, newest first, page 1",
            "submissions",
            lambda r: desc(pool_id=r.choice(pools), **window(r, 43_200)),
        ),
        _api(
            "verdicts_validator_desc",
            "verdicts of a validator, newest first, page 1",
            "verdicts",
            lambda r: desc(validator=r.choice(world.validators)),
        ),
        _api(
            "rewards_account_desc",
            "rewards of a provider, newest first, page 1",
            "rewards",
            lambda r: desc(account=r.choice(world.providers)),
        ),
        # Key lookups: one row (or a transaction's few) found by an index.
        _api("provider_lookup", "providers?address= (lowercase)", "providers",
             lambda r: {"address": r.choice(world.providers).lower()}),
        _api("node_lookup", "nodes?address=", "nodes", lambda r: {"address": r.choice(world.nodes)}),
        _api("validator_lookup", "validators?address=", "validators",
             lambda r: {"address": r.choice(world.validators)}),
        _api("pool_lookup", "pools?pool_id=", "pools", lambda r: {"pool_id": r.choice(pools)}),
        _api("submission_tx", "submissions?tx_hash=", "submissions",
             lambda r: {"tx_hash": r.choice(world.submission_txs)}),
        _api("submission_status_tx", "submissions?status_tx_hash=", "submissions",
             lambda r: {"status_tx_hash": r.choice(world.status_txs)}),
        _api("verdict_tx", "verdicts?tx_hash=", "verdicts", lambda r: {"tx_hash": r.choice(world.verdict_txs)}),
        _api("reward_tx", "rewards?tx_hash= (a finalization: two credits)", "rewards",
             lambda r: {"tx_hash": r.choice(world.finalization_txs)}),
        _api("file_in_bundle", "submissions?file= a file inside a bundle", "submissions",
             lambda r: {"file": r.choice(world.files)}),
        _api("file_work_key", "submissions?file= a work key", "submissions",
             lambda r: {"file": r.choice(world.submissions)[1]}),
    ]  # fmt: skip


def page_scenarios(world: World) -> list[Scenario]:
    """The explorer's pages, as `backend serve` mounts them."""
    return [
        _page("explorer_market", "/explorer/ (every pool: terms, stats, checkpoint, members)", lambda r: "/"),
        _page("explorer_pool", "/explorer/pools/{id}", lambda r: f"/pools/{r.choice(world.pools)}"),
        _page(
            "explorer_provider", "/explorer/providers/{address}", lambda r: f"/providers/{r.choice(world.providers)}"
        ),
        _page("explorer_node", "/explorer/nodes/{address}", lambda r: f"/nodes/{r.choice(world.nodes)}"),
        _page(
            "explorer_validator",
            "/explorer/validators/{address}",
            lambda r: f"/validators/{r.choice(world.validators)}",
        ),
        _page(
            "explorer_submission",
            "/explorer/submissions/{pool}/{key}",
            lambda r: "/submissions/{}/{}".format(*r.choice(world.submissions)),
        ),
        Scenario(
            "explorer_search_tx",
            "/explorer/search?q=<tx hash> (of a submission, a verdict or a status change, in turn)",
            lambda r: (
                "/explorer/search",
                {"q": r.choice(r.choice([world.submission_txs, world.verdict_txs, world.status_txs]))},
            ),
        ),
        Scenario(
            "explorer_search_file",
            "/explorer/search?q=<sha256 of a file inside a bundle>",
            lambda r: ("/explorer/search", {"q": r.choice(world.files)}),
        ),
    ]


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max_ms": round(ordered[-1], 2),
    }


DB_POOL = 8
"""The server's database connections: as many as the explorer's concurrent in-process requests
(`proofpool.explorer.ledger.MAX_CONCURRENT_REQUESTS`)."""


def serve(url: str) -> tuple[subprocess.Popen, str]:
    """uvicorn with `backend serve`'s app (the backend, the explorer under /explorer) on a free port,
    against the bench database."""
    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "PROOFPOOL_DB_POOL_MAX": str(DB_POOL)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "proofpool.cli.backend:backend_with_explorer", "--factory",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"],
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


ANSWERS = {200, 303}
"""Statuses a timed request may get: a page, or a search's redirect to the one page it found."""


def measure_http(base: str, scenario: Scenario, requests: int, warmup: int) -> list[float]:
    rng = random.Random(scenario.name)
    samples = []
    with httpx.Client(base_url=base, timeout=60) as client:
        for n in range(warmup + requests):
            path, params = scenario.request(rng)
            started = time.perf_counter()
            reply = client.get(path, params=params)
            elapsed = (time.perf_counter() - started) * 1000
            if reply.status_code not in ANSWERS:
                raise RuntimeError(f"{scenario.name}: {path} {params} -> {reply.status_code} {reply.text[:300]}")
            if n >= warmup:
                samples.append(elapsed)
    return samples


async def measure_db(url: str, scenario: Scenario, requests: int, warmup: int) -> list[float]:
    assert scenario.listing is not None
    rng = random.Random(scenario.name)
    samples = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for n in range(warmup + requests):
            _, params = scenario.request(rng)
            filters = {k: v for k, v in params.items() if k not in ("limit", "cursor", "order")}
            for key in ("since", "until"):
                if key in filters:
                    filters[key] = datetime.fromisoformat(filters[key])
            if "address" in filters:
                filters["address"] = to_checksum_address(filters["address"])  # as the API's model checksums it
            order = Order(params.get("order", Order.ASC))
            started = time.perf_counter()
            await fetch_page(
                conn, scenario.listing, filters=filters, cursor=params.get("cursor"), limit=LIMIT, order=order
            )
            elapsed = (time.perf_counter() - started) * 1000
            if n >= warmup:
                samples.append(elapsed)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="Submissions to write.")
    parser.add_argument("--requests", type=int, default=400, help="Timed ledger requests per scenario and layer.")
    parser.add_argument("--page-requests", type=int, default=200, help="Timed explorer pages per scenario.")
    parser.add_argument("--keep", action="store_true", help="Keep the database (prints its URL).")
    parser.add_argument("--reuse", metavar="URL", help="Measure a database kept by --keep instead of filling one.")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"JSON lines written. Default: {RESULTS}.")
    parser.add_argument("--only", nargs="+", metavar="PREFIX", help="Run only the scenarios named with these prefixes.")
    args = parser.parse_args()

    url = args.reuse or db.with_database(get_settings().database_url, f"proofpool_bench_ledger_{uuid.uuid4().hex[:8]}")
    results: list[dict[str, Any]] = []
    server = None
    try:
        if args.reuse is None:
            db.ensure_database(url)
            db.upgrade(url)
            fill(url, args.rows)
        world = world_of(url)
        rows = psycopg.connect(url).execute("SELECT count(*) FROM submissions").fetchone()[0]
        server, base = serve(url)
        common = {
            "bench": "ledger",
            "rows": rows,
            "limit": LIMIT,
            "machine": f"{platform.machine()} {os.cpu_count()} cores",
        }
        layers = [(case, layer) for case in api_scenarios(world) for layer in ("http", "db")]
        layers += [(case, "http") for case in page_scenarios(world)]
        if args.only:
            layers = [(case, layer) for case, layer in layers if case.name.startswith(tuple(args.only))]
        for case, layer in layers:
            requests = args.requests if case.listing is not None else args.page_requests
            warmup = min(20, requests)
            if layer == "http":
                samples = measure_http(base, case, requests, warmup)
            else:
                samples = asyncio.run(measure_db(url, case, requests, warmup))
            line = {**common, "requests": requests, "scenario": case.name, "query": case.note, "layer": layer,
                    **percentiles(samples), "target_p99_ms": case.target_ms}  # fmt: skip
            line["meets_target"] = line["p99_ms"] <= case.target_ms
            print(json.dumps(line), flush=True)
            results.append(line)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        if args.keep or args.reuse:
            print(json.dumps({"kept_database": url}))
        else:
            db.drop_database(url)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text("".join(json.dumps(line) + "\n" for line in results))


if __name__ == "__main__":
    main()
