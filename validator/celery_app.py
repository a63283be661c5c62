"""The validators' Celery app: `celery -A proofpool.validator.celery_app worker -Q validate|verdicts`.

`proofpool validator run` starts two workers on it: one consuming `validate` (tasks in
parallel threads; the recomputation is PyTorch, which releases the GIL) and one consuming
`verdicts.<address>` with a single slot, so each validator key has exactly one transaction sender
(and no other validator's sender takes its flushes).
The delivery guarantees (late acks, redelivery of a dead worker's task, JSON only) come from
`proofpool.infra.broker.make_celery`, shared with the indexer that dispatches the tasks.

Celery's `-A` needs a module-level app, so it is built at import from the environment's
settings; nothing else happens at import (resources are built on the first task).

Time limits: Celery enforces `soft_time_limit` only in the prefork pool (by a signal to the child
process); the threads and solo pools, which the two workers use, ignore it. `TimeLimitedTask`
enforces it itself: a timer raises `SoftTimeLimitExceeded` in the task's thread, as prefork would.
Python delivers it between bytecodes, so a long C call (a PyTorch forward) finishes first; the
decoding of the untrusted file, the one step a submitter can make long, runs in a child process
with its own timeout (`proofpool.validator.checks.decode`) whose wait the exception interrupts. There is no
hard limit: a thread cannot be killed.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery, Task
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_ready

from proofpool.infra.broker import SEND_VERDICTS, VALIDATE_QUEUE, VERDICTS_QUEUE, make_celery, verdicts_queue
from proofpool.infra.config import get_settings


@contextmanager
def thread_deadline(seconds: float) -> Iterator[None]:
    """Raise `SoftTimeLimitExceeded` in this thread if the block runs longer than `seconds`.

    The exception is set asynchronously (`PyThreadState_SetAsyncExc`) by a timer thread and raised
    at the thread's next bytecode. Disarming and firing share a lock, so once the block is left no
    exception can arrive later; one set just before the block ended is cleared, because the block's
    work is done (or it is raised inside the block's exit, which is still within the limit's scope).
    """
    thread = threading.get_ident()
    lock = threading.Lock()
    state = {"armed": True, "fired": False}

    def fire() -> None:
        with lock:
            if state["armed"]:
                _async_raise(thread, SoftTimeLimitExceeded)
                state["fired"] = True

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["armed"] = False
        timer.cancel()
        if state["fired"]:
            _async_raise(thread, None)  # clear it if it has not been raised yet


def _async_raise(thread: int, exception: type[BaseException] | None) -> None:
    """Set (or, with None, clear) the exception `thread` raises at its next bytecode."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(exception))


class TimeLimitedTask(Task):
    """A task whose `soft_time_limit` holds in every pool, including threads and solo (module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _, soft = self.request.timelimit or (None, None)
        limit = soft or self.soft_time_limit or self.app.conf.task_soft_time_limit
        if not limit:
            return super().__call__(*args, **kwargs)
        with thread_deadline(float(limit)):
            return super().__call__(*args, **kwargs)


def create_app() -> Celery:
    app = make_celery(get_settings(), "proofpool-validator")
    app.conf.update(include=["proofpool.validator.tasks"], worker_hijack_root_logger=False)
    return app


app = create_app()


ROLE_ENV = "PROOFPOOL_VALIDATOR_ROLE"
"""`validate` or `verdicts`: which of the two workers this process is (set by `validator run`)."""


@worker_ready.connect
def _on_ready(sender: object = None, **_: object) -> None:
    """Serve metrics; a verdict sender that (re)starts sends what a dead predecessor left unsent;
    a validate worker starts the decoding forkserver and warms its models up. Then
    `proofpool_validator_ready` turns 1 (what the devnet waits for before it starts workers).

    Only for workers of this app: the signal is global, and other apps import `TimeLimitedTask`."""
    if getattr(sender, "app", None) is not app:
        return
    from proofpool.validator import metrics

    role = os.environ.get(ROLE_ENV, VALIDATE_QUEUE)
    port = get_settings().validator_metrics_port
    metrics.serve(port + 1 if port and role == VERDICTS_QUEUE else port)
    if role == VERDICTS_QUEUE:
        from proofpool.validator.resources import resources

        app.send_task(SEND_VERDICTS, queue=verdicts_queue(resources().address))
        metrics.READY.set(1)
    else:
        from proofpool.validator.checks.decode import start_forkserver
        from proofpool.validator.models import warm_up
        from proofpool.validator.resources import resources

        start_forkserver()
        warm_up(resources())
        metrics.READY.set(1)
