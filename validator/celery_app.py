"""The validators' Celery app: `celery -A validator.celery_app worker -Q validate|verdicts`.

`proofpool validator run` starts two workers on it: one consuming `validate` (tasks in
parallel threads; the recomputation is PyTorch, which releases the GIL) and one consuming
`verdicts.<address>` with a single slot, so each validator key has exactly one transaction sender
(and no other validator's sender takes its flushes).
The delivery guarantees (late acks, redelivery of a dead worker's task, JSON only) come from
`proofpool.broker.make_celery`, shared with the indexer that dispatches the tasks.

Celery's `-A` needs a module-level app, so it is built at import from the environment's
settings; nothing else happens at import (resources are built on the first task).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_ready

from proofpool.broker import SEND_VERDICTS, VALIDATE_QUEUE, VERDICTS_QUEUE, make_celery, verdicts_queue
from proofpool.config import get_settings


def create_app() -> Celery:
    app = make_celery(get_settings(), "proofpool-validator")
    app.conf.update(include=["validator.tasks"], worker_hijack_root_logger=False)
    return app


app = create_app()


ROLE_ENV = "PROOFPOOL_VALIDATOR_ROLE"
"""`validate` or `verdicts`: which of the two workers this process is (set by `validator run`)."""


@worker_ready.connect
def _on_ready(**_: object) -> None:
    """Serve metrics; a verdict sender that (re)starts sends what a dead predecessor left unsent."""
    from validator import metrics

    role = os.environ.get(ROLE_ENV, VALIDATE_QUEUE)
    port = get_settings().validator_metrics_port
    metrics.serve(port + 1 if port and role == VERDICTS_QUEUE else port)
    if role == VERDICTS_QUEUE:
        from validator.resources import resources

        app.send_task(SEND_VERDICTS, queue=verdicts_queue(resources().address))
    else:
        from validator.models import warm_up
        from validator.resources import resources

        warm_up(resources())
