"""The scale-out bench's own instruments (`bench/scaleout.py`): the figures stand on them, so each
is checked against a process tree whose behaviour is known.

The bench itself needs a backlog of ~1,400 files and two minutes of judging; it does not fit a
test. What does: a child that starts a grandchild is one tree, pinning the tree binds every thread
of both (and a process started afterwards inherits it), and the tree's CPU counts a grandchild's
busy second also after the grandchild exited (reaped into its parent's counters).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from bench.scaleout import cpu_seconds, machine_busy_seconds, pin_tree, process_tree

CHILD = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(grandchild.pid, flush=True)
sys.stdin.readline()          # the test pins the tree here
late = subprocess.Popen([sys.executable, "-c", "import os, sys; print(sorted(os.sched_getaffinity(0)))"],
                        stdout=subprocess.PIPE, text=True)
print(late.communicate()[0].strip(), flush=True)
grandchild.wait()             # reaped: its CPU moves into this process's cutime
print("reaped", flush=True)
sys.stdin.readline()
"""
BUSY = "import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass"


@pytest.mark.timeout(60)
def test_tree_pinning_and_cpu_accounting() -> None:
    cores = sorted(os.sched_getaffinity(0))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, BUSY], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        grandchild = int(child.stdout.readline())
        assert set(process_tree(child.pid)) >= {child.pid, grandchild}
        assert os.getpid() not in process_tree(child.pid)

        assert pin_tree(child.pid, cores[:1]) >= 2
        for pid in (child.pid, grandchild):
            for tid in os.listdir(f"/proc/{pid}/task"):
                assert os.sched_getaffinity(int(tid)) == {cores[0]}
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == str([cores[0]])  # started after the pinning: inherited
        assert child.stdout.readline().strip() == "reaped"

        tree = process_tree(child.pid)
        assert grandchild not in tree
        assert 0.9 <= cpu_seconds(tree) <= 5.0  # the exited grandchild's busy second, counted once
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    deadline = time.monotonic() + 5
    while process_tree(child.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process_tree(child.pid) == []


def test_machine_busy_seconds_counts_this_process() -> None:
    before = machine_busy_seconds()
    end = time.process_time() + 0.5
    while time.process_time() < end:
        pass
    assert machine_busy_seconds() - before >= 0.45
