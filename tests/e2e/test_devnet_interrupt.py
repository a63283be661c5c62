"""Ctrl-C on `proofpool devnet run` stops every process it started: anvil, SeaweedFS, the backend,
the indexer, the validators with their Celery workers, the trainer and the four workers, and the
run exits 130 (interrupted), never a finished run's 0 or 1. Where the signal lands does not
matter (tests/unit/test_devnet_interrupts.py covers the phases); this test checks the whole tree."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from proofpool.infra.config import REPO_ROOT

pytestmark = pytest.mark.slow

STARTED = "workers started"
EXPECTED_CHILDREN = 12
"""anvil, weed, backend, indexer, 2 validators with a Celery worker each, the trainer, 4 workers."""


def wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"the devnet exited early:\n{log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} after {timeout:.0f} s"
        time.sleep(0.5)


def wait_for_children(process: subprocess.Popen[bytes], count: int, timeout: float) -> list[psutil.Process]:
    """The process tree under `process` once it holds `count` processes (the validators' Celery
    workers fork a moment after their parents start)."""
    deadline = time.monotonic() + timeout
    while True:
        children = psutil.Process(process.pid).children(recursive=True)
        if len(children) >= count:
            return children
        assert process.poll() is None, "the devnet exited early"
        names = " ".join(sorted({p.name() for p in children}))
        assert time.monotonic() < deadline, f"{len(children)} processes after {timeout:.0f} s, not {count}: {names}"
        time.sleep(0.5)


def test_ctrl_c_stops_every_process_the_devnet_started(tmp_path: Path) -> None:
    log = tmp_path / "devnet.log"
    args = [
        *("devnet", "run", "--steps", "1", "--out-dir", str(tmp_path / "run")),
        *("--database", "proofpool_test_e2e_interrupt", "--redis-db", "6", "--no-verify-ledger"),
    ]
    with log.open("wb") as out:
        devnet = subprocess.Popen(
            [sys.executable, "-m", "proofpool.cli.main", *args], cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        wait_for_line(log, STARTED, devnet, timeout=300)
        started = wait_for_children(devnet, EXPECTED_CHILDREN, timeout=120)

        devnet.send_signal(signal.SIGINT)
        code = devnet.wait(timeout=120)
    finally:
        if devnet.poll() is None:
            devnet.kill()
    left = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"still running after Ctrl-C: {[(p.pid, p.name(), p.cmdline()[:4]) for p in left]}"
    assert code == 130, f"exit code {code}, not 130 (interrupted):\n{log.read_text(errors='replace')[-3000:]}"
