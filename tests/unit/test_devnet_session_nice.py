"""A niced devnet service is niced against the other services, not only inside its own session.

With autogroup scheduling every session shares the CPU equally whatever its processes' niceness,
so `spawn_cli` also sets the session's niceness (`nice_session`); without it the devnet's niced
workers took as much CPU as the validators (a validation waited 330 ms for a core per 60 ms of work).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from proofpool.devnet.services import nice_session, spawn_cli, wait_until

AUTOGROUP = Path("/proc/self/autogroup")
needs_autogroup = pytest.mark.skipif(
    not AUTOGROUP.exists(), reason="the kernel has no autogroup scheduling (CONFIG_SCHED_AUTOGROUP)"
)


def process_nice(pid: int) -> int:
    """The niceness of process `pid` (field 19 of `/proc/PID/stat`)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def session_nice(pid: int) -> int:
    """The niceness of `pid`'s autogroup, from `/autogroup-N nice K`."""
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


@needs_autogroup
def test_nice_session_ranks_the_whole_session() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert session_nice(child.pid) == 0
        nice_session(child.pid, 10)
        assert session_nice(child.pid) == 10
    finally:
        child.kill()
        child.wait(timeout=10)


@needs_autogroup
def test_spawn_cli_nices_the_service_and_its_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sleeper = tmp_path / "python"  # stands in for the interpreter: the service just sleeps
    sleeper.write_text("#!/bin/sh\nexec sleep 30\n")
    sleeper.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(sleeper))
    service = spawn_cli("sleeper", ["run"], {"PATH": "/usr/bin:/bin"}, tmp_path / "sleeper.log", nice=7)
    try:
        # `nice` execs the service in the same process: the pid is the service's
        assert session_nice(service.process.pid) == 7
        wait_until(lambda: process_nice(service.process.pid) == 7, timeout=10, what="nice -n 7 to take effect")
    finally:
        service.process.kill()
        service.process.wait(timeout=10)


def test_a_process_that_is_gone_is_not_an_error() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    child.wait(timeout=30)
    nice_session(child.pid, 10)  # the pid no longer exists: logged at debug level, no exception
