"""`proofpool backend serve --workers 2` as a real process: every scrape of `/metrics` shows the
sum of both worker processes' counters, never one process's (which made successive scrapes
jump between two values, as if the counters reset). The heartbeats are counted in two processes
(checked from each process's own counter file), so a scrape answered from one process's memory
could not show the total. The counter directory is removed when `serve` stops.

Own database (`proofpool_test_metrics_<random>`) and Redis db 8; a registered, announced node
sends signed heartbeats, each on a new connection so both processes get some."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from eth_account import Account
from eth_account.signers.local import LocalAccount
from prometheus_client import CollectorRegistry, multiprocess
from proofpool.devnet.services import Service, cli_environment, http_ok, spawn_cli, wait_until
from redis import Redis

from proofpool.infra.chain.anvil import free_port
from proofpool.infra.config import get_settings
from proofpool.infra.http.node_api import NodeApi
from tests.fixtures.backend import API_POOL_CONTRACT, CHAIN_ID, empty_redis
from tests.fixtures.postgres import migrated_database

pytestmark = pytest.mark.timeout(150)

METRICS_REDIS_DB = 8
"""Not used by any other test (7 and 9-15 are: grep REDIS_DB)."""
SCRAPES = 12
DISCOVERED = re.compile(r'^proofpool_heartbeats_total\{state="discovered"\} ([0-9.e+]+)$', re.MULTILINE)


@pytest.fixture(scope="module")
def metrics_database_url() -> Iterator[str]:
    with migrated_database("proofpool_test_metrics") as url:
        yield url


@pytest.fixture
def backend(metrics_database_url: str, tmp_path: Path) -> Iterator[tuple[Service, str, str, Path]]:
    """The backend with two worker processes; yields it, its base URL, its metrics URL and the
    temporary directory its counter directory is made in (TMPDIR)."""
    redis_url = get_settings().redis_url.rsplit("/", 1)[0] + f"/{METRICS_REDIS_DB}"
    redis = Redis.from_url(redis_url)
    empty_redis(redis)
    port, metrics_port = free_port(), free_port()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = cli_environment(
        {
            "DATABASE_URL": metrics_database_url,
            "REDIS_URL": redis_url,
            "PROOFPOOL_API_HOSTS": f"127.0.0.1:{port}",
            "PROOFPOOL_API_CHAIN_ID": str(CHAIN_ID),
            "PROOFPOOL_API_POOL_CONTRACT": API_POOL_CONTRACT,
            "PROOFPOOL_METRICS_ADDRESS": f"127.0.0.1:{metrics_port}",
            "TMPDIR": str(scratch),
        }
    )
    args = ["backend", "serve", "--port", str(port), "--workers", "2", "--log-level", "warning", "--no-access-log"]
    service = spawn_cli("backend", args, env, tmp_path / "backend.log")
    base_url, metrics_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        wait_until(lambda: http_ok(f"{base_url}/v1/ledger/pools"), timeout=90, what="the backend", service=service)
        wait_until(lambda: http_ok(metrics_url), timeout=30, what="its metrics server", service=service)
        yield service, base_url, metrics_url, scratch
    finally:
        service.stop(timeout=20)
        redis.flushdb()
        redis.close()


def register(database_url: str, node: LocalAccount, provider: str) -> None:
    """The registry projection row the indexer writes for `addNode`."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO nodes (address, provider, compute_units, specs_hash, attested, active, block_number, tx_hash)"
            " VALUES (%s, %s, 4, %s, false, true, 1, %s)",
            (node.address, provider, b"\x00" * 32, b"\x11" * 32),
        )


def node_api(base_url: str, node: LocalAccount) -> NodeApi:
    """A client on a connection of its own: each accepted by whichever worker process takes it."""
    return NodeApi(base_url, node, chain_id=CHAIN_ID, pool_contract=API_POOL_CONTRACT)


def counted(text: str) -> float:
    match = DISCOVERED.search(text)
    return 0.0 if match is None else float(match.group(1))


def per_process(directory: Path, scratch: Path) -> list[float]:
    """Heartbeats counted by each process, read from its own counter file alone."""
    counts = []
    for i, db_file in enumerate(sorted(directory.glob("counter_*.db"))):
        alone = scratch / f"alone-{i}"
        alone.mkdir(parents=True)
        shutil.copy(db_file, alone / db_file.name)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(alone))
        value = registry.get_sample_value("proofpool_heartbeats_total", {"state": "discovered"})
        counts.append(value or 0.0)
    return counts


def test_every_scrape_shows_the_sum_over_both_worker_processes(
    backend: tuple[Service, str, str, Path], metrics_database_url: str, tmp_path: Path
) -> None:
    service, base_url, metrics_url, scratch = backend
    (directory,) = scratch.glob("proofpool-metrics-*")  # made by `serve`, inherited by both processes
    node, provider = Account.create(), Account.create()
    register(metrics_database_url, node, provider.address)
    with node_api(base_url, node) as api:
        api.announce(provider.address, {"cores": 2})

    sent = 0

    def heartbeat_until_both_counted() -> bool:
        nonlocal sent
        with node_api(base_url, node) as api:
            assert api.heartbeat().state == "discovered"
        sent += 1
        counts = per_process(directory, tmp_path / f"view-{sent}")
        return sent >= 10 and sum(1 for c in counts if c > 0) >= 2

    wait_until(heartbeat_until_both_counted, timeout=60, what="heartbeats answered by both processes", poll=0.02)
    counts = per_process(directory, tmp_path / "final")
    assert sum(counts) == sent and max(counts) < sent  # two processes, each holding a part

    for _ in range(SCRAPES):  # each on a new connection: either process's server may answer
        scrape = httpx.get(metrics_url, timeout=5, headers={"Connection": "close"})
        assert scrape.status_code == 200
        assert counted(scrape.text) == sent

    assert service.stop(timeout=20) == 0
    assert not directory.exists()  # `serve` removed its counter files
