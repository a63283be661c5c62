"""Compiling the Solidity sources with the pinned solcjs from `contracts/node_modules`.

The one place that knows the compiler flags: `make contracts` runs this module, and
tests use it to compile test-only contracts from `contracts/mocks/` into a temp folder.
Compiling needs a source checkout (sources and npm toolchain); a wheel built from one ships the
`src_*` artifacts of `contracts/build` as package data (setup.py, `proofpool.infra.chain.artifacts`).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from proofpool.core.errors import ProofpoolError
from proofpool.infra.config import get_settings

SOLC_FLAGS = ("--bin", "--abi", "--optimize", "--optimize-runs", "200", "--base-path", ".", "--include-path",
              "node_modules")  # fmt: skip


class CompileError(ProofpoolError):
    """solcjs refused the sources."""


def compile_sources(sources: list[str], out_dir: Path, contracts_dir: Path | None = None) -> Path:
    """Compile `sources` (paths relative to `contracts/`) into `out_dir`; returns `out_dir`."""
    contracts_dir = contracts_dir or get_settings().contracts_dir
    solcjs = contracts_dir / "node_modules" / ".bin" / "solcjs"
    if not solcjs.exists():
        raise CompileError(f"solcjs not found at {solcjs}: run `make setup` (npm ci in contracts/)")
    done = subprocess.run(
        [str(solcjs), *SOLC_FLAGS, "-o", str(out_dir), *sources],
        cwd=contracts_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise CompileError(f"solcjs failed:\n{done.stderr or done.stdout}")
    return out_dir


def compile_contracts(contracts_dir: Path | None = None) -> Path:
    """Rebuild `contracts/build` from every top-level source in `contracts/src`."""
    contracts_dir = contracts_dir or get_settings().contracts_dir
    sources = sorted(str(p.relative_to(contracts_dir)) for p in (contracts_dir / "src").glob("*.sol"))
    if not sources:
        raise CompileError(
            f"no Solidity sources in {contracts_dir / 'src'}: compiling needs a source checkout "
            "(an installed proofpool ships its compiled contracts)"
        )
    build = contracts_dir / "build"
    shutil.rmtree(build, ignore_errors=True)
    compile_sources(sources, build, contracts_dir)
    (build / ".stamp").touch()
    return build


def build_is_stale(contracts_dir: Path | None = None) -> bool:
    """True when `contracts/build` is missing or older than any Solidity source (False when there
    are no sources to build from)."""
    contracts_dir = contracts_dir or get_settings().contracts_dir
    sources = list((contracts_dir / "src").glob("**/*.sol"))
    if not sources:
        return False
    stamp = contracts_dir / "build" / ".stamp"
    if not stamp.exists():
        return True
    return stamp.stat().st_mtime < max(p.stat().st_mtime for p in sources)


if __name__ == "__main__":
    try:
        out = compile_contracts()
    except ProofpoolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"compiled contracts into {out}")
