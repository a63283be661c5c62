"""A 429 from the backend's upload rate limit carries Retry-After: the client keeps it on the
refusal and the worker waits exactly that long (not its growing backoff), so a node over the
limit runs at the limit's pace instead of piling up failed tries."""

from __future__ import annotations

import itertools
import json
import threading
import time

import httpx
import pytest
from eth_account import Account
from proofpool.worker.retry import RETRY_AFTER_MAX, Backoff, retry, retry_wait

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.http.signed_client import ApiRefused, SignedClient

RATE_LIMITED = json.dumps({"error": "rate_limited", "detail": "more than 120 upload URLs per minute"})


def client_answering(reply: httpx.Response) -> SignedClient:
    """A SignedClient whose backend answers every request with `reply`."""
    client = SignedClient(
        "http://backend.test", Account.from_key(ANVIL_KEYS[6]), chain_id=31337, pool_contract="0x" + "ab" * 20
    )
    client._http.close()
    client._http = httpx.Client(base_url="http://backend.test", transport=httpx.MockTransport(lambda _r: reply))
    return client


@pytest.mark.parametrize(
    "headers, retry_after",
    [({"Retry-After": "2"}, 2.0), ({"Retry-After": "0.5"}, 0.5), ({}, None), ({"Retry-After": "soon"}, None)],
)
def test_the_refusal_keeps_the_retry_after_header(headers: dict[str, str], retry_after: float | None) -> None:
    reply = httpx.Response(429, headers={"Content-Type": "application/json", **headers}, content=RATE_LIMITED)
    with pytest.raises(ApiRefused) as refused:
        client_answering(reply).request("POST", "/v1/uploads", json_body={})
    assert (refused.value.status, refused.value.error, refused.value.retry_after) == (429, "rate_limited", retry_after)


def test_retry_after_replaces_the_backoff_delay() -> None:
    backoff = Backoff(initial=0.5, maximum=30)
    assert retry_wait(ApiRefused(429, "rate_limited", "", retry_after=2.0), backoff, attempt=6) == 2.0
    assert retry_wait(ApiRefused(429, "rate_limited", ""), backoff, attempt=6) == 30.0
    assert retry_wait(ServiceUnavailable("down"), backoff, attempt=0) == 0.5
    assert retry_wait(ApiRefused(429, "rate_limited", "", retry_after=1e9), backoff, attempt=0) == RETRY_AFTER_MAX


def test_a_rate_limited_call_waits_the_retry_after_not_the_backoff() -> None:
    calls: list[float] = []

    def limited() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise ApiRefused(429, "rate_limited", "", retry_after=0.2)
        return "ticket"

    started = time.monotonic()
    assert retry(limited, what="upload", stop=threading.Event(), backoff=Backoff(initial=60)) == "ticket"
    assert time.monotonic() - started < 5  # the 60 s backoff was not used
    assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(calls))
