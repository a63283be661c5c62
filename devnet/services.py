"""Child processes of the devnet: `proofpool <group> <command>` started with one environment,
logged to a file, waited for, and stopped (gracefully, or with SIGKILL for fault drills).

The devnet stack and the integration tests start the backend, the indexer and workers this
way, as separate processes talking over real connections, like an operator's deployment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from proofpool.core.errors import ProofpoolError
from proofpool.infra.config import REPO_ROOT

log = logging.getLogger(__name__)


class ServiceFailed(ProofpoolError):
    """A child service exited or did not become ready in time."""


@dataclass
class Service:
    """One running `proofpool ...` child process."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    args: tuple[str, ...] = ()
    """The `proofpool` arguments it was started with (`restarted()` starts it again with them)."""
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    nice: int = 0
    """Niceness it runs at (`nice -n`), kept by `restarted()`."""

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout` seconds; returns the exit code."""
        if self.alive:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.returncode

    def restarted(self) -> Service:
        """The same command started again (same environment, same log file, appended)."""
        return spawn_cli(self.name, list(self.args), self.env, self.log_path, nice=self.nice)

    def kill(self) -> None:
        """SIGKILL to the service and every process it started (its own process group): what a
        crash of the machine's process tree does, no cleanup runs. Killing only the leader would
        leave e.g. a validator's Celery workers running on as orphans."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def stop_all(services: list[Service], timeout: float = 30.0) -> None:
    """SIGTERM every service at once, wait up to `timeout` seconds for all, SIGKILL the rest:
    stopping a dozen processes takes as long as the slowest, not the sum."""
    for service in services:
        if service.alive:
            service.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for service in services:
        try:
            service.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            service.kill()


def cli_environment(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without any proofpool setting, plus `overrides`: a child sees
    exactly the settings its starter meant, not whatever the parent shell had exported."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PROOFPOOL_") and k not in ("DATABASE_URL", "REDIS_URL", "S3_ENDPOINT_URL")
    }
    env.update(overrides)
    return env


def cpu_shares(names: Sequence[str], cores: Sequence[int] | None = None) -> dict[str, tuple[int, ...]]:
    """The cores each compute process of one machine gets: an equal share of `cores` (default: the
    ones this process may run on), at least one, handed out round-robin when there are more
    processes than cores.

    A worker's vLLM engine binds one OpenMP thread to every core it is given and PyTorch starts one
    thread per core; with several engines, a validator and the trainer each spinning on every core
    of a small machine, each of them runs many times slower than on its own share (a held-out
    evaluation of SmolLM2 was 7x slower on two threads than on one, on 2 busy cores)."""
    available = sorted(os.sched_getaffinity(0)) if cores is None else list(cores)
    if not available:
        raise ValueError("no cores to share")
    per = max(1, len(available) // max(1, len(names)))
    return {name: tuple(available[(i * per + k) % len(available)] for k in range(per)) for i, name in enumerate(names)}


def thread_environment(cores: Sequence[int], *, vllm: bool = False) -> dict[str, str]:
    """Environment that keeps a child to `cores`: as many PyTorch/OpenMP threads, and for a worker
    (`vllm`) its engine's threads bound to exactly those cores."""
    threads = str(len(cores))
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
    if vllm:
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cores)
    return env


def spawn_cli(name: str, args: list[str], env: Mapping[str, str], log_path: Path, *, nice: int = 0) -> Service:
    """`proofpool ARGS` as a child process with environment `env`, output appended to `log_path`,
    at niceness `nice` (0: this process's), in a session of its own (`nice_session`)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    out = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed with it
    prefix = ["nice", "-n", str(nice)] if nice else []
    process = subprocess.Popen(
        [*prefix, sys.executable, "-m", "proofpool.cli.main", *args],
        cwd=REPO_ROOT,
        env=dict(env),
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: `kill()` reaches the children too
    )
    out.close()
    if nice:
        nice_session(process.pid, nice)
    return Service(name, process, log_path, tuple(args), dict(env), nice)


def nice_session(pid: int, nice: int) -> None:
    """Give the session that `pid` leads niceness `nice` against the other sessions.

    With the kernel's autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`, on by
    default) every session is one scheduling group, and the groups share the CPU equally: a
    process's own niceness only ranks it against the processes of its session. Each service runs
    in a session of its own, so `nice -n` alone leaves a niced worker with the validators' share;
    the session's niceness (`/proc/PID/autogroup`) is what ranks it. Without autogroup (the file
    is absent, or the setting is off) the process's niceness already does, and this is a no-op."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError as exc:  # not Linux, no autogroup, or the process already exited
        log.debug("session niceness of %d not set: %s", pid, exc)


def wait_until(
    ready: Callable[[], bool], *, timeout: float, what: str, service: Service | None = None, poll: float = 0.1
) -> None:
    """Poll `ready` until true; `ServiceFailed` (with the service's log tail) on timeout or exit."""
    deadline = time.monotonic() + timeout
    while not ready():
        if service is not None and not service.alive:
            raise ServiceFailed(
                f"{service.name} exited ({service.process.returncode}) before {what}:\n{service.log_tail()}"
            )
        if time.monotonic() > deadline:
            tail = f":\n{service.log_tail()}" if service is not None else ""
            raise ServiceFailed(f"timed out after {timeout:.0f} s waiting for {what}{tail}")
        time.sleep(poll)


def http_ok(url: str) -> bool:
    """True when `url` answers 2xx."""
    try:
        return httpx.get(url, timeout=2.0).is_success
    except httpx.HTTPError:
        return False
