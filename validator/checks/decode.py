"""Decoding untrusted Parquet where a hostile file cannot take the validator down.

A rollout file's footer states the sizes of what it encodes, but nothing makes it tell the truth:
a 569-byte file whose footer claims one value can hold a data page of ten million run-length
encoded tokens, and a page header may claim up to 2**31 values. So the validator does not trust the
footer for its safety; three bounds hold whatever the file says:

1. Structure first (`footer_length_error`, and `MAX_ROW_GROUPS` in `proofpool.validator.checks.file`): the
   footer's own length is read from the file's last 8 bytes and capped before pyarrow parses it,
   because parsing a footer of 165,000 row groups alone costs gigabytes.
2. What is actually decoded (`decode_bounded`): batch by batch, with a running count of the
   decoded Arrow buffers, stopping with `file_too_large` as soon as it passes the pool's cap.
3. A memory-capped child process (`run_in_child`): one batch can still be a single row of billions
   of tokens, decoded by pyarrow in one C++ call before anything can count it. The child has an
   address-space limit (RLIMIT_AS) and a timeout; running out of either, or dying, is a
   `file_too_large` verdict, and the validator process never holds the decoded bytes.

The child is forked from a forkserver (`multiprocessing`), not from the validator process, which
runs threads (Celery's threads pool, PyTorch) that fork must not copy; the forkserver preloads
pyarrow and the checks, warmed up on one file (`proofpool.validator.checks.preload`). Each validator thread
keeps its child for file after file until one fails in it, because a fork per file (about 13 ms)
costs more than parsing an honest file. `DECODE_IN_CHILD_ENV=0` turns the child off
(the same checks then run in-process, bounded by 1 and 2 only) for environments that cannot fork.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import resource
import struct
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from proofpool.validator.checks.facts import MIB
from proofpool.validator.checks.verdict import Verdict, reject

log = logging.getLogger(__name__)

R = TypeVar("R")

DECODE_IN_CHILD_ENV: Final = "PROOFPOOL_VALIDATOR_DECODE_IN_CHILD"
"""`0` decodes in the calling process (tests that cannot fork); anything else, or unset, uses the child."""
MAX_FOOTER_BYTES: Final = 1 * MIB
"""An honest rollout footer (10 columns, one row group) is a few KiB; 1 MiB leaves room for other
writers' statistics while keeping the footer's parse small (a 165,000-row-group footer is ~40 MiB)."""
BATCH_ROWS: Final = 256
"""Rows decoded per step of the running count: an honest 4,096-row file is 16 steps."""
CHILD_TIMEOUT: Final = 60.0
"""Seconds a child may take. An honest file of the largest allowed size decodes in well under a
second; the bound is far below the task's soft time limit (600 s), so the verdict comes first."""
CHILD_HEADROOM: Final = 512 * MIB
"""Address space the child may use beyond twice the pool's decoded-size cap: the file's bytes,
pyarrow's read and decompression buffers, and the Python objects of the samples."""
_POLL_SECONDS: Final = 0.1
"""The parent waits for the child in slices this long, so the task's enforced deadline
(`proofpool.validator.celery_app.TimeLimitedTask`), raised between bytecodes, interrupts the wait promptly."""
_FORKSERVER_PRELOAD: Final = ["proofpool.validator.checks.preload"]
"""Imported once by the forkserver, so a child starts with pyarrow and the checks loaded.
multiprocessing also re-imports the parent's main module in each child, unless it is a package's
`__main__`: the validator runs `python -m celery` (`celery.__main__`, skipped), and pytest runs as
`python -m pytest`; a program run as a script or as `-m pkg.module` pays its own import per file
(bench/validator.py hides its main module for that reason)."""


class DecodeChildError(RuntimeError):
    """The child raised something other than MemoryError: a bug in the checks, not a verdict on the file.
    The message carries the child's traceback."""


@dataclass(frozen=True)
class ChildLimits:
    """The bounds of one decoding child."""

    memory_bytes: int
    """Address space the child may add to what it had when forked (RLIMIT_AS)."""
    timeout_seconds: float = CHILD_TIMEOUT


def child_limits(max_decoded_bytes: int) -> ChildLimits | None:
    """The child's limits for a pool's decoded-size cap, or None when `DECODE_IN_CHILD_ENV` is `0`."""
    if os.environ.get(DECODE_IN_CHILD_ENV, "1").strip() == "0":
        return None
    return ChildLimits(memory_bytes=2 * max_decoded_bytes + CHILD_HEADROOM)


def start_forkserver() -> None:
    """Start the forkserver and wait until it forks, not in the first check (its preload takes seconds).

    Called when the validate worker is ready, so the first submission's time limit is not spent on
    it: the first fork blocks, uninterruptibly, until the forkserver has imported its modules.
    """
    run_in_child(int, (), ChildLimits(memory_bytes=CHILD_HEADROOM))
    child = getattr(_children, "child", None)
    if child is not None:  # this thread does no checks: do not keep a child for it
        _retire(child)


def _forkserver_context() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_FORKSERVER_PRELOAD)
    return context


def footer_length_error(data: bytes) -> Verdict | None:
    """`file_too_large` if the footer's declared length passes `MAX_FOOTER_BYTES`, read without parsing.

    A Parquet file ends with the footer's length (4 bytes, little-endian) and `PAR1`. Anything
    shorter or without the magic is left to pyarrow, which names it `not_parquet`.
    """
    if len(data) < 12 or data[-4:] != b"PAR1":
        return None
    (length,) = struct.unpack("<I", data[-8:-4])
    if length > MAX_FOOTER_BYTES:
        return reject("file_too_large", footer_bytes=length, max_footer_bytes=MAX_FOOTER_BYTES)
    return None


def decode_bounded(parquet: pq.ParquetFile, rows: int, max_decoded_bytes: int) -> pa.Table | Verdict:
    """The file's table, decoded `BATCH_ROWS` at a time and refused once the decoded buffers pass the cap.

    The count is of the Arrow buffers actually produced (`get_total_buffer_size`), not of any size
    the file claims, so a lying footer or page header cannot get past it; it can only make one
    batch large, which the child's memory limit bounds.
    """
    batches: list[pa.RecordBatch] = []
    decoded = 0
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS, use_threads=False):
        decoded += batch.get_total_buffer_size()
        if decoded > max_decoded_bytes:
            return reject(
                "file_too_large",
                rows,
                decoded_bytes=decoded,
                decoded_rows=sum(b.num_rows for b in batches) + batch.num_rows,
                max_decoded_bytes=max_decoded_bytes,
            )
        batches.append(batch)
    return pa.Table.from_batches(batches, schema=parquet.schema_arrow)


def run_in_child(target: Callable[..., R], args: tuple[Any, ...], limits: ChildLimits) -> R | Verdict:
    """`target(*args)` in a memory-capped child under `limits`; its result, or `file_too_large` if it ran out.

    `target` must be a module-level function and its arguments and result picklable. Evidence
    `decode` says which bound stopped it: `memory_cap` (MemoryError in the child), `killed` (the
    child died from a signal, e.g. SIGABRT on a failed C++ allocation, or SIGKILL) or `timeout`.

    The child serves one call after another for the calling thread (`_Child`): a fork per file costs
    about 13 ms, more than parsing an honest file. A child that failed in any way (out of memory,
    killed, timed out, raised, or interrupted by the task's time limit) is killed and the next call
    starts a new one, so no file runs in a child another file left in a bad state.

    Raises:
        DecodeChildError: the child raised another exception, or exited without an answer.
    """
    child = _child_for(limits)
    healthy = False
    try:
        result, healthy = _await_child(child, limits, time.monotonic(), target, args)
        return result
    finally:
        if not healthy:
            _retire(child)


class _Child:
    """A decoding child process and the parent's end of its pipe."""

    def __init__(self, memory_bytes: int) -> None:
        context = _forkserver_context()
        self.memory_bytes = memory_bytes
        self.conn, theirs = context.Pipe(duplex=True)
        self.process = context.Process(target=_child_main, args=(theirs, memory_bytes), daemon=True)
        self.process.start()
        theirs.close()  # the child holds its own end, so EOF means the child is gone


_children = threading.local()
"""One child per calling thread (Celery's threads pool runs tasks side by side)."""


def _child_for(limits: ChildLimits) -> _Child:
    child: _Child | None = getattr(_children, "child", None)
    if child is not None and (child.memory_bytes != limits.memory_bytes or not child.process.is_alive()):
        _retire(child)
        child = None
    if child is None:
        child = _children.child = _Child(limits.memory_bytes)
    return child


def _retire(child: _Child) -> None:
    """Kill `child` and forget it: the thread's next call starts a fresh one."""
    if getattr(_children, "child", None) is child:
        _children.child = None
    if child.process.is_alive():
        child.process.kill()
    child.process.join()
    child.conn.close()


def _await_child(
    child: _Child, limits: ChildLimits, started: float, target: Callable[..., Any], args: tuple[Any, ...]
) -> tuple[Any, bool]:
    """Send the call and map the child's answer to a result, a verdict or DecodeChildError (see
    `run_in_child`), with whether the child may serve another call."""
    deadline = started + limits.timeout_seconds
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        child.conn.send((target, args))  # if the child is gone, the receive reads EOF and says how it ended
    while not child.conn.poll(_POLL_SECONDS):
        if time.monotonic() >= deadline:
            child.process.kill()
            return reject("file_too_large", decode="timeout", timeout_seconds=limits.timeout_seconds), False
    try:
        kind, payload = child.conn.recv()
    except EOFError:
        child.process.join()
        code = child.process.exitcode
        if code is not None and code < 0:
            killed = reject("file_too_large", decode="killed", signal=-code, memory_cap_bytes=limits.memory_bytes)
            return killed, False
        raise DecodeChildError(f"decoding child exited with {code} without an answer") from None
    if kind == "ok":
        return payload, True
    if kind == "memory":
        return reject("file_too_large", decode="memory_cap", memory_cap_bytes=limits.memory_bytes), False
    raise DecodeChildError(f"decoding child failed:\n{payload}")


def _child_main(conn: Connection, memory_bytes: int) -> None:
    """The child: cap the address space, then for each call received run it and send ("ok", result),
    ("memory", None) or ("error", traceback); it exits after anything but "ok", or when the parent
    closes the pipe.

    Any exception other than MemoryError is sent as a traceback for the parent to raise: it is a
    bug, and must not become a verdict on the file.
    """
    pa.allocate_buffer(1)  # pyarrow's mimalloc maps its first arena (~1 GiB) now, inside the baseline
    _cap_address_space(memory_bytes)
    while True:
        try:
            target, args = conn.recv()
        except MemoryError:  # the call's arguments alone did not fit
            conn.send(("memory", None))
            return
        except EOFError:
            return
        try:
            answer: tuple[str, Any] = ("ok", target(*args))
        except MemoryError:
            answer = ("memory", None)
        except Exception:  # noqa: BLE001 - not swallowed: re-raised in the parent as DecodeChildError
            answer = ("error", traceback.format_exc())
        del target, args
        try:
            conn.send(answer)
        except MemoryError:
            answer = ("memory", None)
            conn.send(answer)
        if answer[0] != "ok":
            return


def _cap_address_space(extra_bytes: int) -> None:
    """Limit the process's address space to what it maps now plus `extra_bytes` (RLIMIT_AS).

    What the child maps at fork (the interpreter, pyarrow, the preloaded modules, and the arena
    pyarrow's allocator reserves on first use) is not the file's doing, so the cap is relative to
    it. Allocations inside that already reserved arena are not counted again, so the child's memory
    is bounded by its mapped size at the cap plus `extra_bytes`, not by `extra_bytes` alone.
    Linux only: elsewhere RLIMIT_AS is not enforced and
    the child runs under the timeout and the decoded-bytes count alone, which is logged.
    """
    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * resource.getpagesize()
    except FileNotFoundError:
        log.warning("no /proc/self/statm: the decoding child runs without an address-space limit")
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = mapped + extra_bytes
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
