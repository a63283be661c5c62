"""Every command of `make bench` starts: run with `--help`, each prints its usage and exits 0.

The benchmarks are not run in CI (they print figures, they do not pass or fail), so this is what
keeps an entry point from breaking unnoticed: `python bench/toploc.py` once imported
`bench/worker.py` instead of the `worker` package and died before measuring anything.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench_commands() -> list[list[str]]:
    """The `$(PY) ...` lines of the Makefile's `bench` target, as argument lists."""
    target = re.search(r"^bench:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert target is not None, "the Makefile has no bench target"
    lines = [line.split("#")[0].strip() for line in target.group(1).splitlines()]
    return [line.removeprefix("$(PY)").split() for line in lines if line.startswith("$(PY)")]


def test_the_makefile_lists_the_benchmarks() -> None:
    commands = bench_commands()
    assert ["-m", "bench.toploc"] in commands and ["bench/heartbeat.py"] in commands
    assert len(commands) >= 10


@pytest.mark.parametrize("command", bench_commands(), ids=" ".join)
def test_a_benchmark_entry_point_starts(command: list[str]) -> None:
    done = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage:"), done.stdout[:500]
