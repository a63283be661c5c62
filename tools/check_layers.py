"""Check that every import of proofpool's code points down a layer (docs/architecture.md, "Layers").

    python tools/check_layers.py        # exit 1 and one line per offending import

The layers, top to bottom: the environments (plugins under `environments/`, found by entry point)
import only the adapters and the core, and nothing imports them; the applications (CLI, devnet) may
import anything else; the services import the adapters and the core, never each other; the
adapters (settings, chain, storage, ..., inference, environment resolution) import each other and
the core; the core imports only itself. Every module must belong to a layer, so a new package is
placed on purpose.

The installed names (`proofpool.backend`, ...) live in folders of their own (`backend/`, see
`setup.py`), which import-linter's graph builder cannot follow (it only walks a top-level package's
folder); this reads the folders and their imports itself. Imports inside functions and under
`TYPE_CHECKING` count: they couple the code as much as the ones at the top.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Container, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Layer:
    name: str
    packages: tuple[str, ...]
    # Packages of an independent layer never import one another (the services).
    independent: bool = False
    # The layers it may import, when fewer than every layer below it (names).
    only: tuple[str, ...] | None = None


def environment_folders(root: Path = REPO_ROOT / "environments") -> dict[str, Path]:
    """The packages of the environment plugins: `environments/<name>/<package>/`."""
    return {
        init.parent.name: init.parent
        for init in sorted(root.glob("*/*/__init__.py"))
        if (init.parent.parent / "pyproject.toml").is_file()
    }


LAYERS: tuple[Layer, ...] = (
    # Plugins: each stands alone on the library's core and adapters, never on another plugin.
    Layer("environments", tuple(environment_folders()), independent=True, only=("environments", "adapters", "core")),
    Layer("applications", ("proofpool.cli", "proofpool.devnet")),
    Layer(
        "services",
        ("proofpool.backend", "proofpool.worker", "proofpool.validator", "proofpool.trainer", "proofpool.explorer"),
        independent=True,
    ),
    Layer("adapters", ("proofpool.infra", "proofpool.inference", "proofpool.envs", "proofpool.training")),
    Layer("core", ("proofpool.core", "proofpool")),
)


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    importer: str
    imported: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported} ({self.why})"


def package_folders(setup_py: Path = REPO_ROOT / "setup.py") -> dict[str, Path]:
    """The `FOLDERS` table of setup.py: installed package name -> source folder."""
    tree = ast.parse(setup_py.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "FOLDERS" for target in node.targets
        ):
            return {name: setup_py.parent / folder for name, folder in ast.literal_eval(node.value).items()}
    raise SystemExit(f"{setup_py}: no FOLDERS table")


def discover(folders: Mapping[str, Path]) -> dict[str, Path]:
    """Every module under the folders, by its installed dotted name."""
    modules: dict[str, Path] = {}
    for package, folder in folders.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def placement(module: str) -> tuple[int, Layer, str] | None:
    """(layer index, layer, package) of the longest package that contains `module`."""
    best: tuple[int, Layer, str] | None = None
    for index, layer in enumerate(LAYERS):
        for package in layer.packages:
            # The bare `proofpool` holds only the package's own `__init__`.
            contains = module == package or (package != "proofpool" and module.startswith(package + "."))
            if contains and (best is None or len(package) > len(best[2])):
                best = (index, layer, package)
    return best


def imports_of(module: str, path: Path, known: Container[str]) -> list[tuple[int, str]]:
    """(line, module) for each proofpool module that `module` imports."""
    is_package = path.name == "__init__.py"
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                # `from package import module` imports the module; `from module import name` the module.
                candidate = f"{base}.{alias.name}"
                found.append((node.lineno, candidate if candidate in known else base))
    return [(line, name) for line, name in found if name.startswith("proofpool")]


def check(modules: Mapping[str, Path]) -> list[Violation | str]:
    """Violations of the layers, and a line for each module no layer contains."""
    problems: list[Violation | str] = []
    for module, path in sorted(modules.items()):
        placed = placement(module)
        if placed is None:
            problems.append(f"{path}: {module} belongs to no layer (add its package to LAYERS)")
            continue
        index, layer, package = placed
        for line, imported in imports_of(module, path, modules):
            target = placement(imported)
            if target is None:
                continue  # reported as the module's own problem
            target_index, target_layer, target_package = target
            if target_index < index or (layer.only is not None and target_layer.name not in layer.only):
                why = f"{layer.name} may not import {target_layer.name}"
            elif target_index == index and layer.independent and target_package != package:
                why = f"the {layer.name} never import each other"
            else:
                continue
            problems.append(
                Violation(
                    path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path, line, module, imported, why
                )
            )
    return problems


def main() -> int:
    problems = check(discover({**package_folders(), **environment_folders()}))
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} import(s) break the layers", file=sys.stderr)
        return 1
    print(f"layers kept: {', '.join(layer.name for layer in LAYERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
