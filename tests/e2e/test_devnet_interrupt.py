"""Ctrl-C on `proofpool devnet run` stops every process it started: anvil, SeaweedFS, the backend,
the indexer, the validators with their Celery workers, the trainer and the four workers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from proofpool.config import REPO_ROOT

pytestmark = pytest.mark.slow

STARTED = "workers started"


def wait_for_line(log: Path, text: str, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert process.poll() is None, f"the devnet exited early:\n{log.read_text(errors='replace')[-3000:]}"
        assert time.monotonic() < deadline, f"no {text!r} after {timeout:.0f} s"
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
        time.sleep(5)  # the workers load vLLM, the validators start their Celery workers
        started = psutil.Process(devnet.pid).children(recursive=True)
        names = " ".join(sorted({p.name() for p in started}))
        assert len(started) >= 12, f"expected anvil, weed, backend, indexer, validators, trainer, workers: {names}"

        devnet.send_signal(signal.SIGINT)
        code = devnet.wait(timeout=120)
    finally:
        if devnet.poll() is None:
            devnet.kill()
    left = [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"still running after Ctrl-C: {[(p.pid, p.name(), p.cmdline()[:4]) for p in left]}"
    assert code != 0  # interrupted, not a finished run
