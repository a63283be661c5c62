"""Where each installed package's source lives; the metadata is in pyproject.toml.

The repository keeps one folder per part (`proofpool/` the core library, `backend/`, `worker/`,
`validator/`, `trainer/`, `explorer/` the services, `cli/` and `devnet/` the applications), and installs them
all under the `proofpool` name (`proofpool.backend`, `proofpool.cli`, ...), so a wheel adds one
top-level package to site-packages. Every subpackage of a folder is found here, so a new one needs
no entry.

Files that are not Python source ship as package data, so an installed wheel works without the
checkout (DATA below): the compiled contracts (`contracts/build`, written by `make contracts`: a
wheel cannot be built before it), the database migrations and the explorer's templates and static
files.
"""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent

FOLDERS = {
    "proofpool": "proofpool",
    "proofpool.backend": "backend",
    "proofpool.worker": "worker",
    "proofpool.validator": "validator",
    "proofpool.trainer": "trainer",
    "proofpool.explorer": "explorer",
    "proofpool.cli": "cli",
    "proofpool.devnet": "devnet",
}

CONTRACTS = ("PoolToken", "StakeManager", "ComputeRegistry", "ComputePool")
"""The contracts every role loads (`proofpool.infra.chain.artifacts.CONTRACT_NAMES`)."""
ARTIFACTS = [f"src_{name}_sol_{name}.{ext}" for name in CONTRACTS for ext in ("abi", "bin")]

# Package data: installed package -> (source folder, data files). Read by
# `proofpool.infra.chain.artifacts` and `proofpool.infra.db` when not running from a checkout.
DATA = {
    "proofpool.infra.chain.compiled": ("contracts/build", ARTIFACTS),
    "proofpool.infra.migrations": ("migrations", ["script.py.mako"]),  # and env.py
    "proofpool.infra.migrations.versions": ("migrations/versions", []),  # the revisions (*.py)
    "proofpool.explorer": ("explorer", ["templates/*.html", "static/*.css", "static/*.js"]),  # its pages
}
if not (ROOT / "contracts" / "build").is_dir():
    # A fresh checkout: `make setup` installs (editable) before `make contracts` compiles, and a
    # checkout reads its own build folder anyway. A wheel build without it stops in build_py.
    del DATA["proofpool.infra.chain.compiled"]


class BuildPyWithArtifacts(build_py):
    """build_py that refuses to build a wheel without the compiled contracts (an editable install,
    which `make setup` does before `make contracts`, reads them from the checkout instead)."""

    def run(self) -> None:
        if not getattr(self, "editable_mode", False) and "proofpool.infra.chain.compiled" not in DATA:
            raise SystemExit("error: compiled contracts missing (no contracts/build): run `make contracts` first")
        if not getattr(self, "editable_mode", False):
            missing = [
                f"contracts/build/{name}" for name in ARTIFACTS if not (ROOT / "contracts/build" / name).is_file()
            ]
            if missing:
                raise SystemExit(
                    f"error: compiled contracts missing ({', '.join(missing)}): run `make contracts` first"
                )
        super().run()


setup(
    package_dir={**FOLDERS, **{package: folder for package, (folder, _) in DATA.items()}},
    packages=[
        *(
            name
            for package, folder in FOLDERS.items()
            for name in [package, *(f"{package}.{sub}" for sub in find_packages(folder))]
        ),
        *DATA,
    ],
    package_data={package: files for package, (_, files) in DATA.items() if files},
    cmdclass={"build_py": BuildPyWithArtifacts},
)
