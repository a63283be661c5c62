"""A pool's base model (checkpoint version 0) from the `model_uri` it was created with.

Version 0 has no manifest on-chain: it is whatever the pool's `model_uri` names. The devnet
scheme `devnet://...` names the locally built tiny model, which every worker and validator
builds identically from the same seeds (and caches). Any other URI needs an explicit local
directory (`--base-model`) until pools publish version 0 as a checkpoint like any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from proofpool.core.errors import ProofpoolError
from proofpool.model.cache import ensure_devnet_model
from proofpool.model.warmup import Progress

DEVNET_SCHEME: Final = "devnet://"


class UnknownBaseModel(ProofpoolError):
    """The pool's base model is neither the devnet model nor given as a local directory."""


def resolve_base_model(model_uri: str, override: Path | None = None, progress: Progress | None = None) -> Path:
    """The local directory of the base model for a pool created with `model_uri`."""
    if override is not None:
        if not (Path(override) / "config.json").is_file():
            raise UnknownBaseModel(f"{override} holds no model (config.json missing)")
        return Path(override)
    if model_uri.startswith(DEVNET_SCHEME):
        return ensure_devnet_model(progress=progress)
    raise UnknownBaseModel(
        f"pool model {model_uri!r} is not a devnet model; pass its local directory with --base-model"
    )
