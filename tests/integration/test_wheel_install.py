"""`pip install proofpool` from a wheel, as a provider or an auditor would, away from the checkout:
the wheel is built from a copy of the working tree, installed with its base dependencies only
(from the configured package index) into a fresh venv, and run from an empty folder. Torch and the
other role libraries must be absent; the CLI, the ledger commands against the real backend and a
contract deployment (ABIs and bytecode come from the package) must work, with state under the
user's data directory; a role command says which extra it needs.

About 50 s on the devnet machine, most of it `pip install` of the base dependencies from the index.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proofpool.infra.chain.anvil import ANVIL_KEYS, start_anvil
from proofpool.infra.chain.artifacts import CONTRACT_NAMES
from proofpool.infra.chain.compile import build_is_stale, compile_contracts
from proofpool.infra.config import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROLE_LIBRARIES = ("torch", "transformers", "vllm", "numba", "celery", "fastapi", "uvicorn", "psycopg", "boto3")
"""Imports that come with a role's extra, never with the base install."""
_SKIP_EVERYWHERE = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}
_SKIP_AT_ROOT = {"tests", "bench", "docs", "build", "dist", ".devnet", ".cache", "deployments", "environments"}


def _copy_source(dest: Path) -> Path:
    """The working tree without VCS data, venvs, caches, tests and build output (the wheel is built
    from this copy, so the build writes nothing into the checkout)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n in _SKIP_EVERYWHERE or n.endswith(".egg-info")}
        return skip | (_SKIP_AT_ROOT & set(names) if Path(folder) == REPO_ROOT else set())

    shutil.copytree(REPO_ROOT, dest, ignore=ignore)
    return dest


def _clean_env(tmp: Path) -> dict[str, str]:
    """The environment of the installed commands: no PROOFPOOL_* settings or PYTHONPATH from this
    run, a data directory of their own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROOFPOOL_") and k != "PYTHONPATH"}
    env.update(XDG_DATA_HOME=str(tmp / "xdg"), COLUMNS="200", NO_COLOR="1")
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], Path]:
    """(bin folder of a fresh venv holding the wheel and its base dependencies, its environment, cwd)."""
    if build_is_stale():
        compile_contracts()
    tmp = tmp_path_factory.mktemp("wheel")
    source = _copy_source(tmp / "src")
    dist = tmp / "dist"
    _must(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)], tmp
    )
    (wheel,) = dist.glob("proofpool-*.whl")
    venv = tmp / "venv"
    _must([sys.executable, "-m", "venv", str(venv)], tmp)
    env = _clean_env(tmp)
    work = tmp / "work"
    work.mkdir()
    _must([str(venv / "bin" / "python"), "-m", "pip", "install", str(wheel)], work, env)  # base dependencies only
    return venv / "bin", env, work


def _must(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{argv}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def _run(installed: tuple[Path, dict[str, str], Path], *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    bin_dir, env, work = installed
    program = args[0] if args[0] == "python" else "proofpool"
    argv = [str(bin_dir / program), *(args[1:] if program == "python" else args)]
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    if ok:
        assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def test_the_base_install_has_no_role_libraries_and_runs_from_site_packages(installed) -> None:
    probe = (
        "import importlib.util, json, proofpool.infra.config as c; "
        f"print(json.dumps({{'file': c.__file__, 'checkout': c.FROM_CHECKOUT, "
        f"'found': [m for m in {list(ROLE_LIBRARIES)!r} if importlib.util.find_spec(m)]}}))"
    )
    facts = json.loads(_run(installed, "python", "-c", probe).stdout)
    assert facts == {"file": facts["file"], "checkout": False, "found": []}
    assert "site-packages" in facts["file"] and not Path(facts["file"]).is_relative_to(REPO_ROOT)
    torch = _run(installed, "python", "-c", "import torch", ok=False)
    assert torch.returncode == 1 and "No module named 'torch'" in torch.stderr


def test_help_lists_every_group_and_the_ledger_commands(installed) -> None:
    out = _run(installed, "--help").stdout
    for group in ("chain", "contracts", "keys", "provider", "pool", "worker", "validator", "trainer", "ledger"):
        assert group in out
    ledger = _run(installed, "ledger", "--help").stdout
    for command in ("pools", "submissions", "verdicts", "rewards", "verify"):
        assert command in ledger


def test_a_ledger_query_against_the_running_backend(installed, ledger_server, ledger_db) -> None:
    _, data = ledger_db
    out = json.loads(_run(installed, "ledger", "pools", "--backend-url", ledger_server, "--json").stdout)
    assert [pool["pool_id"] for pool in out["items"]] == [pool["pool_id"] for pool in data.pools]
    table = _run(installed, "ledger", "pools", "--backend-url", ledger_server).stdout
    assert "pools (3 rows)" in table


def test_a_role_command_names_the_extra_it_needs(installed) -> None:
    done = _run(installed, "worker", "run", "--pool", "1", ok=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "proofpool worker run needs the worker extra: pip install 'proofpool[worker," in done.stderr
    done = _run(installed, "db", "current", ok=False)
    assert done.returncode == 1 and "needs the backend extra" in done.stderr


def test_contracts_deploy_from_the_packaged_artifacts_into_the_data_directory(installed) -> None:
    _, env, _ = installed
    with start_anvil() as chain:
        _run(installed, "contracts", "deploy", "--rpc-url", chain.url, "--key", ANVIL_KEYS[0])
    book = json.loads((Path(env["XDG_DATA_HOME"]) / "proofpool" / "deployments" / "31337.json").read_text())
    assert set(book["contracts"]) == set(CONTRACT_NAMES)
