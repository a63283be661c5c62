"""Retry with backoff: what is retried, how often, and that a stop request cuts it short."""

from __future__ import annotations

import threading
import time

import pytest
import requests
from proofpool.worker.retry import Backoff, Stopped, is_transient, retry

from proofpool.core.errors import ConfigError, ServiceUnavailable
from proofpool.infra.chain.errors import ContractRevert, TxTimeout
from proofpool.infra.http.signed_client import ApiRefused
from proofpool.infra.storage.s3 import StorageUnavailable

FAST = Backoff(initial=0.001, maximum=0.002)


class Flaky:
    """Fails with `error` `failures` times, then returns "done"."""

    def __init__(self, error: Exception, failures: int) -> None:
        self.error, self.failures, self.calls = error, failures, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "done"


@pytest.mark.parametrize(
    "error, transient",
    [
        (ServiceUnavailable("backend down"), True),
        (StorageUnavailable("store down"), True),
        (TxTimeout("not mined"), True),
        (requests.ConnectionError("refused"), True),
        (ApiRefused(503, "chain_unknown", ""), True),
        (ApiRefused(429, "rate_limited", ""), True),
        (ApiRefused(403, "not_active_member", ""), False),
        (ApiRefused(422, "validation_error", ""), False),
        (ContractRevert("ComputePoolNotMember"), False),
        (ConfigError("bad setting"), False),
        (ValueError("a bug"), False),
    ],
)
def test_transient_errors(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


def test_transient_failures_are_retried_until_success() -> None:
    flaky = Flaky(ServiceUnavailable("down"), failures=3)
    assert retry(flaky, what="call", stop=threading.Event(), backoff=FAST) == "done"
    assert flaky.calls == 4


def test_other_failures_propagate_at_once() -> None:
    flaky = Flaky(ContractRevert("ComputePoolZeroWorkUnits"), failures=1)
    with pytest.raises(ContractRevert):
        retry(flaky, what="call", stop=threading.Event(), backoff=FAST)
    assert flaky.calls == 1


def test_attempts_bound_the_retries() -> None:
    flaky = Flaky(ServiceUnavailable("down"), failures=10)
    with pytest.raises(ServiceUnavailable):
        retry(flaky, what="call", stop=threading.Event(), backoff=Backoff(initial=0.001, attempts=3))
    assert flaky.calls == 3


def test_backoff_grows_and_is_capped() -> None:
    backoff = Backoff(initial=0.5, factor=2, maximum=3)
    assert [backoff.delay(n) for n in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_a_stop_request_ends_a_long_backoff_wait() -> None:
    stop = threading.Event()
    flaky = Flaky(ServiceUnavailable("down"), failures=100)
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    with pytest.raises(Stopped):
        retry(flaky, what="call", stop=stop, backoff=Backoff(initial=60))
    assert time.monotonic() - started < 5
    assert flaky.calls == 1


def test_after_a_stop_request_one_try_still_runs_but_no_retry() -> None:
    stop = threading.Event()
    stop.set()
    assert retry(Flaky(ServiceUnavailable("down"), failures=0), what="call", stop=stop, backoff=FAST) == "done"
    flaky = Flaky(ServiceUnavailable("down"), failures=1)
    with pytest.raises(Stopped):
        retry(flaky, what="call", stop=stop, backoff=FAST)
    assert flaky.calls == 1
