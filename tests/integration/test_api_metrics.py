"""Prometheus metrics live on the internal `metrics_address`, not on the public API: the
public app answers 404 at /metrics, the metrics server serves the backend's counters and
nothing else, and a metrics address that cannot be bound stops start-up with a clear message."""

from __future__ import annotations

import socket

import httpx
import pytest
from eth_account import Account
from fastapi.testclient import TestClient

from proofpool.core.errors import ConfigError
from proofpool.infra.config import Settings
from tests.fixtures.backend import ApiHarness

pytestmark = pytest.mark.timeout(30)


def test_public_app_has_no_metrics(api: ApiHarness) -> None:
    reply = api.client.get("/metrics")
    assert reply.status_code == 404
    assert reply.json()["error"] == "not_found"


def test_metrics_server_serves_the_counters_on_its_own_address(api: ApiHarness) -> None:
    node, provider = Account.create(), Account.create()
    api.add_node(node.address, provider.address)
    assert api.announce(node, provider.address).status_code == 200
    assert api.signed(node, "POST", "/v1/heartbeat", {}).status_code == 200

    metrics = api.client.app.state.metrics
    assert metrics.host == "127.0.0.1" and metrics.port != api.settings.backend_port
    scrape = httpx.get(metrics.url, timeout=5)
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain")
    assert 'proofpool_heartbeats_total{state="discovered"}' in scrape.text
    assert httpx.get(metrics.url.replace("/metrics", "/v1/ledger/pools"), timeout=5).status_code == 404


def test_metrics_address_in_use_stops_start_up_naming_the_setting(api_settings: Settings) -> None:
    from proofpool.backend.app import create_app

    with socket.socket() as taken:  # a listener without SO_REUSEPORT: nobody may share its port
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = create_app(api_settings.model_copy(update={"metrics_address": f"127.0.0.1:{port}"}))
        with pytest.raises(ConfigError, match="PROOFPOOL_METRICS_ADDRESS"), TestClient(app):
            pass


def test_metrics_can_be_turned_off(api_settings: Settings) -> None:
    from proofpool.backend.app import create_app

    with TestClient(create_app(api_settings.model_copy(update={"metrics_address": ""}))) as client:
        assert client.app.state.metrics is None
        assert client.get("/v1/ledger/pools").status_code == 200


@pytest.mark.parametrize(
    "value, bind",
    [
        ("127.0.0.1:9107", ("127.0.0.1", 9107)),
        ("[::1]:0", ("::1", 0)),
        ("10.0.0.5:9200", ("10.0.0.5", 9200)),
        ("", None),
    ],
)
def test_metrics_address_setting(monkeypatch: pytest.MonkeyPatch, value: str, bind: tuple[str, int] | None) -> None:
    monkeypatch.setenv("PROOFPOOL_METRICS_ADDRESS", value)
    assert Settings().metrics_bind == bind


@pytest.mark.parametrize("value", ["9107", "localhost", "127.0.0.1:70000", ":9107", "127.0.0.1:port"])
def test_malformed_metrics_address_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("PROOFPOOL_METRICS_ADDRESS", value)
    with pytest.raises(ValueError, match="HOST:PORT"):
        Settings()
