"""`proofpool.core.auth.signed_request` alone: the signed text byte for byte (clients and backends
of different versions must agree on it), what binds a signature, the timestamp window, host
normalization, and the settings that configure the backend's side."""

from __future__ import annotations

import pytest
from eth_account import Account

from proofpool.core.auth.signed_request import (
    Audience,
    AuthError,
    Deployment,
    TimeWindow,
    canonical_message,
    normalize_host,
    request_target,
    sign_request,
    verify_request,
)
from proofpool.infra.config import Settings

pytestmark = pytest.mark.timeout(20)

KEY = "0x" + "11" * 32
POOL = "0x" + "ab" * 20
POOL_CHECKSUMMED = "0xABaBaBaBABabABabAbAbABAbABabababaBaBABaB"
DEPLOYMENT = Deployment(31337, POOL)
AUDIENCE = Audience(DEPLOYMENT, "api.example.org:8443")
WINDOW = TimeWindow(max_age=300, max_ahead=5)
NOW = 1_800_000_000


def test_canonical_message_is_this_text() -> None:
    text = canonical_message(AUDIENCE, "post", "/v1/heartbeat?x=1", b"{}", NOW, "n0nce")
    assert text == (
        "proofpool-request-v2\n"
        "chain:31337\n"
        "pool:0xabababababababababababababababababababab\n"
        "host:api.example.org:8443\n"
        "POST\n"
        "/v1/heartbeat?x=1\n"
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\n"
        "1800000000\n"
        "n0nce"
    )


def verify(headers: dict[str, str], *, host: str = AUDIENCE.host, deployment: Deployment = DEPLOYMENT) -> str:
    signed = verify_request(
        "POST",
        "/v1/heartbeat",
        b"{}",
        {**headers, "Host": host},
        deployment=deployment,
        hosts={AUDIENCE.host},
        window=WINDOW,
        now=NOW,
    )
    return signed.address


def test_a_signature_verifies_for_its_audience_only() -> None:
    account = Account.from_key(KEY)
    headers = sign_request(account, AUDIENCE, "POST", "/v1/heartbeat", b"{}", now=NOW)
    assert verify(headers) == account.address
    assert verify(headers, host="API.example.org:8443") == account.address  # Host compared normalized
    for other in (Deployment(1, POOL), Deployment(31337, "0x" + "cd" * 20)):
        with pytest.raises(AuthError) as refused:
            verify(headers, deployment=other)
        assert refused.value.reason == "address_mismatch"
    with pytest.raises(AuthError) as refused:
        verify(headers, host="other.example.org:8443")
    assert refused.value.reason == "wrong_host"


@pytest.mark.parametrize(
    "timestamp, reason",
    [
        (NOW - 300, None),
        (NOW - 301, "stale_timestamp"),
        (NOW + 5, None),
        (NOW + 6, "future_timestamp"),
    ],
)
def test_timestamp_window_edges(timestamp: int, reason: str | None) -> None:
    if reason is None:
        WINDOW.check(timestamp, NOW)
        return
    with pytest.raises(AuthError) as refused:
        WINDOW.check(timestamp, NOW)
    assert refused.value.reason == reason


def test_nonces_outlive_every_timestamp_the_window_accepts() -> None:
    """Accepted at server time s with t >= s - max_ahead, a request passes until t + max_age."""
    assert WINDOW.nonce_ttl >= WINDOW.max_age + WINDOW.max_ahead


@pytest.mark.parametrize(
    "authority, host",
    [
        ("API.Example.org", "api.example.org"),
        ("api.example.org:443", "api.example.org"),
        ("api.example.org:80", "api.example.org"),
        ("127.0.0.1:8000", "127.0.0.1:8000"),
        ("[::1]:8000", "[::1]:8000"),
        (" host:9 ", "host:9"),
    ],
)
def test_hosts_are_normalized_as_clients_send_them(authority: str, host: str) -> None:
    assert normalize_host(authority) == host


@pytest.mark.parametrize("authority", ["", " ", "a b", "host/path", "user@host", "h\r\nX: y", "hôst"])
def test_non_hosts_are_refused(authority: str) -> None:
    with pytest.raises(ValueError):
        normalize_host(authority)


def test_audience_of_a_base_url_is_the_host_the_client_sends() -> None:
    audience = Audience.for_base_url("https://user@API.example.org:443/prefix", chain_id=1, pool_contract=POOL)
    assert audience.host == "api.example.org"
    assert audience.deployment.pool_contract == POOL_CHECKSUMMED


def test_request_target_is_the_bytes_on_the_wire() -> None:
    assert request_target(b"/v1/invites/%C3%B5", b"pool_id=1") == "/v1/invites/%C3%B5?pool_id=1"
    assert request_target(b"/v1/heartbeat") == "/v1/heartbeat"


@pytest.mark.parametrize("bad", [{"chain_id": 0}, {"chain_id": True}, {"pool_contract": "0x1234"}])
def test_a_deployment_must_name_a_chain_and_an_address(bad: dict) -> None:
    with pytest.raises(ValueError):
        Deployment(**{"chain_id": 31337, "pool_contract": POOL, **bad})


def test_backend_settings_for_signed_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROOFPOOL_API_HOSTS", "API.example.org:443, 10.0.0.5:8000")
    monkeypatch.setenv("PROOFPOOL_API_CHAIN_ID", "8453")
    monkeypatch.setenv("PROOFPOOL_API_POOL_CONTRACT", POOL)
    settings = Settings()
    assert settings.signed_request_hosts == {"api.example.org", "10.0.0.5:8000"}
    assert (settings.api_chain_id, settings.api_pool_contract) == (8453, POOL_CHECKSUMMED)
    monkeypatch.delenv("PROOFPOOL_API_HOSTS")
    monkeypatch.setenv("PROOFPOOL_BACKEND_URL", "https://Backend.example.org")
    assert Settings().signed_request_hosts == {"backend.example.org"}


def test_chain_without_pool_contract_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROOFPOOL_API_CHAIN_ID", "8453")
    with pytest.raises(ValueError, match="together"):
        Settings()
