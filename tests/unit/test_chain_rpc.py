"""`proofpool.infra.chain.rpc.connect`: the web3 connection every service and CLI uses."""

from __future__ import annotations

import pytest

from proofpool.infra.chain.rpc import UNUSED_MIDDLEWARE, connect

URL = "http://127.0.0.1:1"  # nobody answers; check=False never sends


def test_middleware_that_costs_round_trips_is_removed() -> None:
    w3 = connect(URL, check=False)
    names = {name for _, name in w3.middleware_onion.middleware}
    assert not names & set(UNUSED_MIDDLEWARE)
    assert "attrdict" in names  # the rest of web3's defaults stay


def test_environment_read_once_proxies_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    w3 = connect("http://rpc.example:8545", check=False)
    explicit = w3.provider._request_session_manager._explicit_session  # type: ignore[attr-defined]
    assert explicit.trust_env is False  # no per-request scan of the environment or ~/.netrc
    assert explicit.proxies["http"] == "http://proxy.example:3128"
