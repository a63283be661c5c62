"""Scoring from the caller's side: hand (gold, completion) to the worker process, get a `Score`.

The worker (`proofpool_math.worker`) is started on first use and kept for the environment's
life: starting Python and importing sympy costs seconds, a score costs milliseconds. It is
started with `subprocess` (fork + exec), which is safe from threaded callers, unlike a bare
`fork` of a process whose other threads may hold locks. Calls are serialized by a lock; a
process that forked after the worker started (a Celery prefork child) starts its own worker
rather than sharing pipes with its parent's.

Nothing here raises for a completion's content: anything that goes wrong inside the worker's
child is a status. A worker that cannot even start (a broken installation) raises
`ScoringUnavailable`, since scoring every row 0 would hide the fault.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from proofpool.core.environment import Score, ScoreStatus
from proofpool.core.errors import ProofpoolError

REWARDS: Final[dict[str, float]] = {"correct": 1.0}
"""Reward by status: only a verified answer earns anything."""
STARTUP_SECONDS: Final = 180.0
"""How long the worker may take to import sympy and warm up (generous: a loaded 2-core box)."""
WORKER_SLACK_SECONDS: Final = 30.0
"""How much longer than a child's wall-clock backstop the caller waits for the worker's reply."""
_BOOT: Final = "import sys; sys.path.insert(0, sys.argv[1]); from proofpool_math.worker import main; main()"
_PACKAGE_ROOT: Final = str(Path(__file__).resolve().parent.parent)


class ScoringUnavailable(ProofpoolError):
    """The scoring worker could not be started (not a fault of any completion)."""


@dataclass(frozen=True)
class Limits:
    """What one score may spend; part of what a pool pins, since limits can change a score."""

    cpu_seconds: int = 5
    """CPU seconds of the child that parses and compares (RLIMIT_CPU, whole seconds)."""
    memory_mib: int = 1024
    """Address space the child may add to the warmed worker's own (RLIMIT_AS)."""

    @property
    def wall_seconds(self) -> float:
        """The wall-clock backstop of a child: far above its CPU limit, for overloaded machines only."""
        return 4.0 * self.cpu_seconds + 10.0


class _Worker:
    """One running worker process and its pipes."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env["PYTHONHASHSEED"] = "0"  # set iteration order inside sympy is then the same everywhere
        self.pid = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-c", _BOOT, _PACKAGE_ROOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
            start_new_session=True,  # a Ctrl-C to the caller's terminal is the caller's to handle
        )
        self.buffer = b""
        self._finalizer = weakref.finalize(self, _stop, self.proc)
        ready = self.read_line(STARTUP_SECONDS)
        if ready is None or not ready.get("ready"):
            self.stop()
            raise ScoringUnavailable(f"the math scoring worker did not start (reply {ready!r}); see its stderr")

    def read_line(self, timeout: float) -> dict[str, Any] | None:
        """The worker's next reply, or None if it died or stayed silent for `timeout` seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(remaining):
                    return None
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            return cast(dict[str, Any], json.loads(line))
        except ValueError:
            return None

    def send(self, request: dict[str, Any]) -> bool:
        """Write one request; False if the worker is gone."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request, ensure_ascii=True).encode("ascii") + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            return False
        return True

    def stop(self) -> None:
        self._finalizer()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a worker: close its stdin (it exits on EOF), kill it if it lingers."""
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


class Scorer:
    """Scores completions against reference answers in a worker process, one at a time."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self.last_cpu_seconds = 0.0
        """CPU seconds the last score's child used (for measurement; not part of the score)."""

    def score(self, gold: str, completion: str) -> Score:
        """The completion's `Score`; never raises for its content."""
        request = {
            "gold": gold,
            "completion": completion,
            "cpu_seconds": self.limits.cpu_seconds,
            "memory_mib": self.limits.memory_mib,
            "wall_seconds": self.limits.wall_seconds,
        }
        with self._lock:
            worker = self._live_worker()
            reply = worker.read_line(self.limits.wall_seconds + WORKER_SLACK_SECONDS) if worker.send(request) else None
            if reply is None:
                # The worker itself failed (it never runs the completion's parsing, so this is
                # the machine's fault, not the completion's): start afresh next time.
                worker.stop()
                self._worker = None
                return Score(0.0, "inconclusive", "the scoring worker stopped answering")
            self.last_cpu_seconds = float(reply.get("cpu", 0.0))
        status = cast(ScoreStatus, reply["status"])
        return Score(REWARDS.get(status, 0.0), status, str(reply["detail"]))

    def close(self) -> None:
        """Stop the worker (it is also stopped when the scorer is collected or Python exits)."""
        with self._lock:
            if self._worker is not None and self._worker.pid == os.getpid():
                self._worker.stop()
            self._worker = None

    def _live_worker(self) -> _Worker:
        worker = self._worker
        if worker is not None and worker.pid != os.getpid():
            worker._finalizer.detach()  # our parent's worker: not ours to stop or talk to
            worker = None
        if worker is None or worker.proc.poll() is not None:
            if worker is not None:
                worker.stop()
            worker = self._worker = _Worker()
        return worker
