"""Compiled contract artifacts (ABI + bytecode): from `contracts/build`, else from the package.

`make contracts` writes them with solcjs, which names files `src_<Name>_sol_<Name>.abi`
and `.bin`; this module is the only place that reads that naming. A wheel ships the compiled
`src_*` artifacts as package data in `proofpool/infra/chain/compiled/` (setup.py maps
`contracts/build` there, and refuses to build a wheel without them), so an installed proofpool
deploys and talks to the contracts without a Solidity toolchain.

Which folder is read: `<contracts_dir>/build` when that folder exists (a source checkout, or a
toolchain set up under PROOFPOOL_CONTRACTS_DIR), else the package data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Final

from proofpool.core.errors import ProofpoolError
from proofpool.infra.config import get_settings

CONTRACT_NAMES: tuple[str, ...] = ("PoolToken", "StakeManager", "ComputeRegistry", "ComputePool")
PACKAGED_DIR: Final = Path(__file__).resolve().parent / "compiled"
"""The artifacts shipped in the package (present in an installed wheel, absent in a checkout)."""


class ArtifactMissing(ProofpoolError):
    """The build folder lacks a compiled contract."""


@dataclass(frozen=True)
class Artifact:
    """One compiled contract."""

    name: str
    abi: list[dict]
    bytecode: str


def build_dir() -> Path:
    """Folder holding the solcjs output of `contracts_dir`."""
    return get_settings().contracts_dir / "build"


def artifacts_dir() -> Path:
    """Folder artifacts are read from: `build_dir()` when it exists, else the packaged ones."""
    build = build_dir()
    return build if build.is_dir() or not PACKAGED_DIR.is_dir() else PACKAGED_DIR


@cache
def _load(name: str, folder: Path) -> Artifact:
    stem = folder / f"src_{name}_sol_{name}"
    abi_path, bin_path = stem.with_suffix(".abi"), stem.with_suffix(".bin")
    if not abi_path.exists() or not bin_path.exists():
        raise ArtifactMissing(f"no compiled artifact for {name} in {folder}: run `make contracts`")
    return Artifact(name=name, abi=json.loads(abi_path.read_text()), bytecode="0x" + bin_path.read_text().strip())


def load_artifact(name: str) -> Artifact:
    """The ABI and creation bytecode of contract `name` (e.g. "ComputePool")."""
    return _load(name, artifacts_dir())


def all_abis() -> dict[str, list[dict]]:
    """ABIs of every proofpool contract, for error and event decoding."""
    return {name: load_artifact(name).abi for name in CONTRACT_NAMES}
