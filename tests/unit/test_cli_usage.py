"""Usage mistakes get click's one-line message and exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_unknown_command_is_a_usage_error_not_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "model", "no-such-command"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "No such command 'no-such-command'" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_error_message_with_brackets_is_printed_as_is() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "keys", "show", "[not-a-file]"], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "[not-a-file]" in done.stderr


def _devnet_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "devnet", "run", *args], capture_output=True, text=True
    )


def test_a_model_pool_needs_both_model_and_env(tmp_path: Path) -> None:
    for args in (("--model", str(tmp_path)), ("--env", "reasoning-gym")):
        done = _devnet_run(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert "--model and --env go together" in done.stderr


def test_a_model_pool_refuses_a_directory_without_a_model(tmp_path: Path) -> None:
    done = _devnet_run("--model", str(tmp_path), "--env", "reasoning-gym")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "config.json missing" in done.stderr


def test_env_config_needs_env() -> None:
    done = _devnet_run("--env-config", '{"seed": 1}')
    assert done.returncode == 2 and "--env-config needs --env" in done.stderr


def test_a_cheater_needs_an_honest_worker_beside_it() -> None:
    done = _devnet_run("--workers", "1")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "a cheater needs an honest node beside it" in done.stderr


def test_worker_and_validator_counts_are_bounded() -> None:
    for args in (("--workers", "5"), ("--validators", "0"), ("--validators", "3")):
        done = _devnet_run(*args)
        assert done.returncode == 2 and "Traceback" not in done.stderr, args
        assert f"Invalid value for '{args[0]}'" in done.stderr, (args, done.stderr)
