"""The import layers (`tools/check_layers.py`): the core imports only itself, the adapters never import
a service, the services never import each other, and nothing imports the applications. Checked over
the real code, and shown once to fail on an upward import and on a service importing another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tools.check_layers import LAYERS, REPO_ROOT, Violation, check, discover, environment_folders, package_folders


def test_the_code_keeps_its_layers() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "tools" / "check_layers.py")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "layers kept" in done.stdout


def test_every_installed_package_has_a_layer() -> None:
    folders = {**package_folders(), **environment_folders()}
    assert set(folders) >= {
        "proofpool",
        "proofpool.backend",
        "proofpool.cli",
        "proofpool.devnet",
        "proofpool_arithmetic",
    }
    modules = discover(folders)
    assert "proofpool.backend.app" in modules and "proofpool.core.errors" in modules
    assert [problem for problem in check(modules) if isinstance(problem, str)] == []
    assert [layer.name for layer in LAYERS] == ["environments", "applications", "services", "adapters", "core"]


def _with(tmp_path: Path, name: str, source: str) -> dict[str, Path]:
    """The real modules plus one scratch module `name` holding `source`."""
    path = tmp_path / (name.rsplit(".", 1)[-1] + ".py")
    path.write_text(source)
    return {**discover({**package_folders(), **environment_folders()}), name: path}


def test_an_upward_import_breaks_the_check(tmp_path: Path) -> None:
    modules = _with(tmp_path, "proofpool.core.upward", "def f():\n    from proofpool.backend.app import create_app\n")
    [violation] = [p for p in check(modules) if isinstance(p, Violation) and p.importer == "proofpool.core.upward"]
    assert violation.imported == "proofpool.backend.app" and violation.line == 2
    assert violation.why == "core may not import services"


def test_a_service_importing_another_breaks_the_check(tmp_path: Path) -> None:
    modules = _with(tmp_path, "proofpool.worker.peek", "from proofpool.validator import store\n")
    [violation] = [p for p in check(modules) if isinstance(p, Violation) and p.importer == "proofpool.worker.peek"]
    assert violation.imported == "proofpool.validator.store"
    assert violation.why == "the services never import each other"


def test_the_applications_are_imported_by_nobody(tmp_path: Path) -> None:
    modules = _with(tmp_path, "proofpool.infra.cheats", "import proofpool.devnet.adversary\n")
    [violation] = [p for p in check(modules) if isinstance(p, Violation) and p.importer == "proofpool.infra.cheats"]
    assert violation.why == "adapters may not import applications"


def test_a_module_outside_every_layer_is_reported(tmp_path: Path) -> None:
    modules = _with(tmp_path, "proofpool.stray", "")
    assert any(isinstance(p, str) and "proofpool.stray belongs to no layer" in p for p in check(modules))


def test_no_product_module_imports_an_environment(tmp_path: Path) -> None:
    """Environments are found through their entry point, even by the devnet."""
    modules = _with(tmp_path, "proofpool.devnet.shortcut", "from proofpool_arithmetic.task import reward\n")
    [violation] = [p for p in check(modules) if isinstance(p, Violation) and p.importer == "proofpool.devnet.shortcut"]
    assert violation.why == "applications may not import environments"


def test_an_environment_imports_no_service(tmp_path: Path) -> None:
    modules = _with(tmp_path, "proofpool_arithmetic.peek", "import proofpool.validator.store\n")
    [violation] = [p for p in check(modules) if isinstance(p, Violation) and p.importer == "proofpool_arithmetic.peek"]
    assert violation.why == "environments may not import services"
