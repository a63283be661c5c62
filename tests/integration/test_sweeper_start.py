"""`proofpool backend sweep` says at start what it watches: the manager key's address, the pools
it manages (from the indexed `pools`), when a member counts as dead and how often it sweeps.
Real PostgreSQL and Redis (the API tests' database and Redis db), a dry run (no chain needed)."""

from __future__ import annotations

import os
import subprocess
import sys

from eth_account import Account

from tests.fixtures.backend import MANAGER_KEY, ApiHarness, api_redis_url

MANAGER = Account.from_key(MANAGER_KEY)


def sweep(api: ApiHarness, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DATABASE_URL": str(api.settings.database_url),
        "REDIS_URL": api_redis_url(),
        "PROOFPOOL_MANAGER_PRIVATE_KEY": MANAGER_KEY,
        "PROOFPOOL_DEAD_AFTER": "90",
        "COLUMNS": "80",
    }
    command = [sys.executable, "-m", "proofpool.cli.main", "backend", "sweep", "--once", "--dry-run", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_the_sweeper_says_what_it_watches(api: ApiHarness) -> None:
    api.add_pool(1, MANAGER.address)
    api.add_pool(2, Account.create().address)  # another manager's pool is not its business
    api.add_pool(3, MANAGER.address, status="closed")
    done = sweep(api, "--interval", "7.5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"sweeper for manager {MANAGER.address}: pools 1 (active), 3 (closed); ejects members silent for more "
        "than 90 s (PROOFPOOL_DEAD_AFTER), sweeping every 7.5 s; dry run: reports only, sends no transaction"
    ]


def test_with_json_the_start_line_goes_to_stderr_and_names_no_pool_yet(api: ApiHarness) -> None:
    done = sweep(api, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # stdout holds only ejections, one JSON object each
    assert f"sweeper for manager {MANAGER.address}: pools none indexed yet;" in done.stderr
