"""A tiny Celery worker app for the dispatch tests (`celery -A tests.celery_probe worker`).

It registers the validator's task name and records every delivery (task id + args) in a Redis
list, so a test can count what a real worker received. `probe.sentinel` marks a point in the
queue: with one solo worker and prefetch 1, when the sentinel is recorded every task sent
before it has been received.
"""

from __future__ import annotations

import json
import os

import redis

from proofpool.infra.broker import VALIDATE_SUBMISSION, make_celery
from proofpool.infra.config import get_settings

RECEIVED = "probe:received"
SENTINELS = "probe:sentinels"

app = make_celery(get_settings(), "proofpool-probe")


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["PROBE_REDIS_URL"])


@app.task(name=VALIDATE_SUBMISSION, bind=True)
def validate_submission(self, pool_id: int, work_key: str) -> None:
    _redis().rpush(RECEIVED, json.dumps({"task_id": self.request.id, "pool_id": pool_id, "work_key": work_key}))


@app.task(name="probe.sentinel")
def sentinel(token: str) -> None:
    _redis().rpush(SENTINELS, token)
