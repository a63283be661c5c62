"""Usage mistakes get click's one-line message and exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys


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
