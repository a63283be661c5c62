"""`proofpool chain up/down --state-dir`: a detached chain is recorded where it was told, and only
a `down` given the same directory finds it, so two stacks from one clone stay apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from proofpool.infra.chain.anvil import free_port, rpc_ready


def chain(*args: str) -> subprocess.CompletedProcess[str]:
    """`proofpool chain ARGS` as a user types it (the environment's PROOFPOOL_STATE_DIR is the
    test run's, not the directories given here)."""
    command = [sys.executable, "-m", "proofpool.cli.main", "chain", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})


def test_down_finds_the_chain_in_the_state_dir_up_was_given(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    port = free_port()
    up = chain("up", "--detach", "--port", str(port), "--state-dir", str(first))
    assert up.returncode == 0, up.stderr
    url = f"http://127.0.0.1:{port}"
    try:
        assert rpc_ready(url)
        assert (first / "anvil.pid").is_file() and (first / "anvil.log").is_file()
        assert f"`proofpool chain down --state-dir {first}` stops it" in up.stdout

        elsewhere = chain("down", "--state-dir", str(second))
        assert elsewhere.returncode == 1
        assert elsewhere.stderr.strip() == (
            f"error: no detached chain recorded in {second / 'anvil.pid'}; was it started with another --state-dir?"
        )
        assert rpc_ready(url)
    finally:
        down = chain("down", "--state-dir", str(first))
    assert down.returncode == 0 and "stopped anvil" in down.stdout, down.stderr
    assert not (first / "anvil.pid").exists()
    assert not rpc_ready(url)
