"""`proofpool.core.auth.signed_request` alone: the signed text byte for byte (clients and backends
of different versions must agree on it), what binds a signature, the timestamp window, host
normalization, and the settings that configure the backend's side."""

from __future__ import annotations

import pytest
from eth_account import Account
from eth_account.messages import encode_defunct
from eth_utils import to_checksum_address
from hypothesis import given, settings
from hypothesis import strategies as st

from proofpool.core.auth.signed_request import (
    SECP256K1_N,
    Audience,
    AuthError,
    Deployment,
    TimeWindow,
    canonical_message,
    normalize_host,
    personal_sign_digest,
    recover_address,
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


# --------------------------------------------------------------------------- recovery on the digest

MESSAGE = "proofpool-request-v2\nPOST\n/v1/heartbeat"


def reference(signature: bytes, text: str = MESSAGE) -> str | None:
    """What eth-account recovers (None: it refuses the signature)."""
    try:
        return Account.recover_message(encode_defunct(text=text), signature=signature)
    except Exception:  # noqa: BLE001 - eth-account and eth-keys raise several types for junk
        return None


def ours(signature: bytes, text: str = MESSAGE) -> str | None:
    try:
        return to_checksum_address(recover_address(personal_sign_digest(text), signature))
    except Exception:  # noqa: BLE001 - coincurve raises its own types for junk
        return None


def test_the_digest_is_personal_signs() -> None:
    from eth_account.messages import _hash_eip191_message

    for text in ("", "a", MESSAGE, "ünïcode\n" * 40):
        assert personal_sign_digest(text) == _hash_eip191_message(encode_defunct(text=text))


@pytest.mark.parametrize("v", [0, 1, 27, 28, 35, 36, 37, 38, 255])
def test_recovery_reads_v_as_eth_account_does(v: int) -> None:
    """Every recovery id eth-account takes (0/1, 27/28, EIP-155's 35 and up) gives its address."""
    signed = Account.from_key(KEY).sign_message(encode_defunct(text=MESSAGE))
    raw = bytes(signed.signature)
    parity = raw[64] - 27
    candidate = raw[:64] + bytes([v])
    assert ours(candidate) == reference(candidate)
    if (v in (0, 1) and v == parity) or (v in (27, 28) and v - 27 == parity) or (v >= 35 and (v - 35) % 2 == parity):
        assert ours(candidate) == Account.from_key(KEY).address


@pytest.mark.parametrize("v", [2, 26, 29, 34])
def test_recovery_refuses_the_v_eth_account_refuses(v: int) -> None:
    signed = Account.from_key(KEY).sign_message(encode_defunct(text=MESSAGE))
    candidate = bytes(signed.signature)[:64] + bytes([v])
    assert reference(candidate) is None and ours(candidate) is None


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=65, max_size=65))
def test_recovery_agrees_with_eth_account_on_any_65_bytes(signature: bytes) -> None:
    """Junk included: r or s zero or past the curve order, points off the curve, any v."""
    assert ours(signature) == reference(signature)


@pytest.mark.parametrize(
    "signature",
    [
        bytes(64) + b"\x1b",  # r = s = 0
        b"\xff" * 64 + b"\x1b",  # r, s past the order
        SECP256K1_N.to_bytes(32, "big") + (1).to_bytes(32, "big") + b"\x1c",  # r = n
        (1).to_bytes(32, "big") + SECP256K1_N.to_bytes(32, "big") + b"\x1c",  # s = n
    ],
)
def test_recovery_refuses_out_of_range_signatures(signature: bytes) -> None:
    assert reference(signature) is None and ours(signature) is None


def test_a_junk_signature_is_refused_as_bad_signature() -> None:
    headers = sign_request(Account.from_key(KEY), AUDIENCE, "POST", "/v1/heartbeat", b"{}", now=NOW)
    headers["X-Signature"] = "0x" + "ff" * 65
    with pytest.raises(AuthError) as refused:
        verify(headers)
    assert refused.value.reason == "bad_signature"


def test_the_address_header_is_read_in_any_case_and_checksummed() -> None:
    account = Account.from_key(KEY)
    headers = sign_request(account, AUDIENCE, "POST", "/v1/heartbeat", b"{}", now=NOW)
    for written in (account.address.lower(), account.address[:2] + account.address[2:].swapcase()):
        assert verify({**headers, "X-Address": written}) == account.address
    with pytest.raises(AuthError) as refused:
        verify({**headers, "X-Address": account.address[:-1] + "g"})
    assert refused.value.reason == "bad_address"
