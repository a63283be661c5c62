"""`/healthz` reports every dependency and the indexer's lag behind the chain."""

from __future__ import annotations

import psycopg
from fastapi.testclient import TestClient
from proofpool.backend.app import create_app

HEALTH_REDIS_DB = 10


def _settings(s3_settings, database_url, anvil, **overrides):
    base = s3_settings.redis_url.rsplit("/", 1)[0]
    return s3_settings.model_copy(
        update={"database_url": database_url, "redis_url": f"{base}/{HEALTH_REDIS_DB}", "rpc_url": anvil.url}
        | overrides
    )


def test_all_dependencies_up_reports_ok_and_chain_lag(s3_settings, clean_database, anvil):
    for _ in range(3):
        anvil.rpc("evm_mine")
    head = int(anvil.rpc("eth_blockNumber"), 16)
    with psycopg.connect(clean_database, autocommit=True) as conn:
        conn.execute("INSERT INTO indexer_state (id, chain_id, next_block) VALUES (1, 31337, %s)", (head - 1,))
    with TestClient(create_app(_settings(s3_settings, clean_database, anvil))) as client:
        reply = client.get("/healthz")
    body = reply.json()
    assert reply.status_code == 200, body
    assert body["checks"] == {"database": "ok", "redis": "ok", "storage": "ok", "chain": "ok"}
    assert body["indexed_through"] == head - 2
    assert body["chain_lag_blocks"] == body["chain_head"] - (head - 2) >= 2


def test_a_dependency_down_gives_503_naming_it(s3_settings, clean_database, anvil):
    settings = _settings(
        s3_settings, clean_database, anvil, s3_endpoint_url="http://127.0.0.1:9", rpc_url="http://127.0.0.1:9"
    )
    with TestClient(create_app(settings)) as client:
        reply = client.get("/healthz")
    body = reply.json()
    assert reply.status_code == 503
    assert body["ok"] is False
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["storage"].startswith("error")
    assert body["checks"]["chain"].startswith("error")
    assert body["chain_lag_blocks"] is None
