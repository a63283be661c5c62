"""The import layers (`.importlinter`): the services never import each other, the core never imports
a service, and neither imports the applications. Checked over the real import graph, and shown
once to fail on an upward import."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proofpool.config import REPO_ROOT

CONFIG = REPO_ROOT / ".importlinter"
APPS = {"cli", "devnet"}
SERVICES = ("backend", "worker", "validator", "trainer")


def _lint_imports() -> Path:
    found = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("lint-imports is not installed: run `make setup` (it comes with the dev extras)")
    return Path(found)


def _core_modules() -> list[str]:
    """The core modules the contracts list as sources."""
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    listed = parser["importlinter:contract:core"]["source_modules"].split()
    return [name.removeprefix("proofpool.") for name in listed]


def _run(cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(_lint_imports()), str(CONFIG), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_code_keeps_its_layers() -> None:
    done = _run(REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_every_module_of_the_core_package_is_either_core_or_an_application() -> None:
    package = REPO_ROOT / "proofpool"
    modules = [p.stem for p in package.glob("*.py")] + [
        p.name for p in package.iterdir() if (p / "__init__.py").exists()
    ]
    present = {name for name in modules if not name.startswith("_")}
    assert present == set(_core_modules()) | APPS


def test_an_upward_import_breaks_the_check(tmp_path: Path) -> None:
    """A tree with the same package names: clean it passes; one core module importing a service fails."""
    for service in SERVICES:
        (tmp_path / service).mkdir()
        (tmp_path / service / "__init__.py").write_text("")
    (tmp_path / "proofpool").mkdir()
    (tmp_path / "proofpool" / "__init__.py").write_text("")
    for module in [*_core_modules(), *APPS]:
        (tmp_path / "proofpool" / f"{module}.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    assert _run(tmp_path, env).returncode == 0

    (tmp_path / "proofpool" / "chain.py").write_text("import validator\n")
    done = _run(tmp_path, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "The core never imports a service BROKEN" in done.stdout
    assert "proofpool.chain -> validator" in done.stdout
