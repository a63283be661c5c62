"""`make setup` (which `make test` runs first) installs the contracts' npm toolchain with `npm ci`:
it must leave the lock file as committed, so a clean clone stays clean after setting up."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from proofpool.infra.config import REPO_ROOT

SETUP_INPUTS = ("contracts/package.json", "contracts/package-lock.json")


@pytest.mark.skipif(shutil.which("git") is None or not (REPO_ROOT / ".git").exists(), reason="not a git checkout")
def test_setup_left_the_npm_lock_as_committed() -> None:
    changed = subprocess.run(
        ["git", "diff", "--name-only", "HEAD", "--", *SETUP_INPUTS],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.split()
    assert changed == [], f"the set-up rewrote {changed}: the Makefile must install with `npm ci`"


def test_the_makefile_installs_the_lock_with_npm_ci() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "npm ci" in makefile and "npm install" not in makefile
