"""The console script mounts only the group a command line names, so `proofpool ledger ...` does
not pay for web3, torch or vLLM (cli/main.py `run`), while `proofpool.cli.main.app` (tests,
documentation) still has every group."""

from __future__ import annotations

import subprocess
import sys

import pytest
from proofpool.cli.main import GROUPS, build_app, requested_group


@pytest.mark.parametrize(
    ("argv", "group"),
    [
        (["ledger", "pools"], "ledger"),
        (["-v", "ledger", "pools", "--limit", "5"], "ledger"),
        (["--verbose", "keys", "new"], "keys"),
        (["--help"], None),
        ([], None),
        (["ledgr", "pools"], None),  # a typo: every group is mounted, so click can suggest the right one
    ],
)
def test_the_group_a_command_line_names(argv: list[str], group: str | None) -> None:
    assert requested_group(argv) == group


def test_the_full_app_has_every_group_and_a_lean_one_only_its_own() -> None:
    from proofpool.cli.main import app

    def names(command) -> set[str]:
        return {info.name for info in command.registered_groups}

    assert names(app) == {name for name, _, _ in GROUPS}
    assert names(build_app({"ledger"})) == {"ledger"}


def test_a_ledger_command_does_not_import_web3() -> None:
    probe = (
        "import sys\n"
        "sys.argv = ['proofpool', 'ledger', '--help']\n"
        "from proofpool.cli.main import run\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "print('web3' in sys.modules, 'proofpool.cli.provider' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert "Auditors: query the contribution ledger." in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "False False"
