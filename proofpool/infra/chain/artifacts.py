"""Compiled contract artifacts (ABI + bytecode) read from `contracts/build`.

`make contracts` writes them with solcjs, which names files `src_<Name>_sol_<Name>.abi`
and `.bin`; this module is the only place that knows that naming.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from proofpool.core.errors import ProofpoolError
from proofpool.infra.config import get_settings

CONTRACT_NAMES: tuple[str, ...] = ("PoolToken", "StakeManager", "ComputeRegistry", "ComputePool")


class ArtifactMissing(ProofpoolError):
    """The build folder lacks a compiled contract."""


@dataclass(frozen=True)
class Artifact:
    """One compiled contract."""

    name: str
    abi: list[dict]
    bytecode: str


def build_dir() -> Path:
    """Folder holding the solcjs output."""
    return get_settings().contracts_dir / "build"


@cache
def _load(name: str, folder: Path) -> Artifact:
    stem = folder / f"src_{name}_sol_{name}"
    abi_path, bin_path = stem.with_suffix(".abi"), stem.with_suffix(".bin")
    if not abi_path.exists() or not bin_path.exists():
        raise ArtifactMissing(f"no compiled artifact for {name} in {folder}: run `make contracts`")
    return Artifact(name=name, abi=json.loads(abi_path.read_text()), bytecode="0x" + bin_path.read_text().strip())


def load_artifact(name: str) -> Artifact:
    """The ABI and creation bytecode of contract `name` (e.g. "ComputePool")."""
    return _load(name, build_dir())


def all_abis() -> dict[str, list[dict]]:
    """ABIs of every proofpool contract, for error and event decoding."""
    return {name: load_artifact(name).abi for name in CONTRACT_NAMES}
