"""The validator tasks' soft time limit fires under Celery's threads pool, in a real worker.

Celery enforces `soft_time_limit` only in the prefork pool; the validator's `validate` worker runs
`--pool threads`, where nothing would stop a task. This module is also the worker's Celery app
(`celery -A tests.integration.test_validator_time_limit worker --pool threads`): its tasks record in
Redis db 7 whether and when `SoftTimeLimitExceeded` arrived, with the validator's `TimeLimitedTask`
and, for contrast, with Celery's plain Task.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any, Final

import pytest
import redis
from celery import Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_ready
from proofpool.validator.celery_app import TimeLimitedTask
from proofpool.validator.checks.decode import ChildLimits, run_in_child, start_forkserver

from proofpool.infra.broker import make_celery
from proofpool.infra.config import REPO_ROOT, Settings, get_settings
from tests.fixtures.processes import stop

pytestmark = pytest.mark.slow

TIME_LIMIT_REDIS_DB: Final = 7
"""Not used by any other test (10-15 are: grep REDIS_DB)."""
RESULTS: Final = "time-limit:results"
SOFT_LIMIT: Final = 1.0
RUNS_FOR: Final = 8.0
"""How long each task would run if nothing stopped it."""

app = make_celery(get_settings(), "proofpool-time-limit-probe")


@worker_ready.connect
def _start_forkserver(**_: object) -> None:
    """As the validate worker does (`proofpool.validator.celery_app`): a cold forkserver takes seconds to start."""
    start_forkserver()


def _record(token: str, **fields: Any) -> None:
    redis.Redis.from_url(os.environ["PROBE_REDIS_URL"]).rpush(RESULTS, json.dumps({"token": token, **fields}))


def _sleep_in_python(token: str) -> None:
    started = time.monotonic()
    try:
        while time.monotonic() - started < RUNS_FOR:
            time.sleep(0.05)
    except SoftTimeLimitExceeded:
        _record(token, fired=True, after=time.monotonic() - started)
        return
    _record(token, fired=False, after=time.monotonic() - started)


@app.task(name="probe.limited", base=TimeLimitedTask, soft_time_limit=SOFT_LIMIT)
def limited(token: str) -> None:
    _sleep_in_python(token)


@app.task(name="probe.celery_plain", base=Task, soft_time_limit=SOFT_LIMIT)
def celery_plain(token: str) -> None:
    _sleep_in_python(token)


@app.task(name="probe.limited_child", base=TimeLimitedTask, soft_time_limit=SOFT_LIMIT)
def limited_child(token: str) -> None:
    """A decoding child that would take `RUNS_FOR` s, under a child timeout far longer than the limit."""
    started = time.monotonic()
    try:
        run_in_child(time.sleep, (RUNS_FOR,), ChildLimits(memory_bytes=256 * 2**20, timeout_seconds=60.0))
    except SoftTimeLimitExceeded:
        _record(token, fired=True, after=time.monotonic() - started)
        return
    _record(token, fired=False, after=time.monotonic() - started)


@pytest.fixture
def worker(tmp_path) -> Iterator[tuple[str, redis.Redis]]:
    """A real `celery worker --pool threads` on this module, consuming from Redis db 7."""
    url = get_settings().redis_url.rsplit("/", 1)[0] + f"/{TIME_LIMIT_REDIS_DB}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROOFPOOL_")}
    env.update(PROOFPOOL_BROKER_URL=url, PROBE_REDIS_URL=url)
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - handed to the child
    command = [sys.executable, "-m", "celery", "-A", __name__, "worker", "--pool=threads", "--concurrency=3"]
    process = subprocess.Popen(
        [*command, "--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=WARNING"],
        cwd=REPO_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield url, client
    finally:
        stop(process)
        log.close()
        client.flushdb()


def _results(client: redis.Redis, tokens: dict[str, str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = {json.loads(item)["token"]: json.loads(item) for item in client.lrange(RESULTS, 0, -1)}
        if set(tokens.values()) <= set(found):
            return {name: found[token] for name, token in tokens.items()}
        time.sleep(0.2)
    raise AssertionError(f"tasks did not report within {timeout} s: {client.lrange(RESULTS, 0, -1)}")


def test_soft_time_limit_fires_under_the_threads_pool(worker: tuple[str, redis.Redis]) -> None:
    url, client = worker
    sender = make_celery(Settings(broker_url=url), "time-limit-sender")
    tokens = {name: uuid.uuid4().hex for name in ("limited", "celery_plain", "limited_child")}
    for name, token in tokens.items():
        sender.send_task(f"probe.{name}", args=[token], soft_time_limit=SOFT_LIMIT)
    results = _results(client, tokens, timeout=60.0)
    # Celery's own Task is not stopped by the threads pool: the reason TimeLimitedTask exists.
    assert results["celery_plain"]["fired"] is False
    for name in ("limited", "limited_child"):
        assert results[name]["fired"] is True, results
        assert SOFT_LIMIT <= results[name]["after"] < SOFT_LIMIT + 1.0, results


def test_validator_tasks_enforce_their_limit() -> None:
    from proofpool.validator.tasks import send_verdicts, validate_submission

    assert isinstance(validate_submission._get_current_object(), TimeLimitedTask)
    assert isinstance(send_verdicts._get_current_object(), TimeLimitedTask)
    assert validate_submission.soft_time_limit and send_verdicts.soft_time_limit
