"""Where devnet models live: one directory per (model spec, warm-up settings), built once.

Building and warming the devnet model takes tens of seconds on two cores; every worker,
validator, trainer and test on a machine wants the same one. Models are therefore cached under
a directory named by a hash of their settings (plus the builder version and the vocabulary),
so changing any setting builds a new model next to the old one and nothing is ever stale.

A model is built in a temporary sibling directory and renamed into place only when complete:
a crash leaves no half model behind, and two processes racing to build the same settings both
end with the same complete directory (the loser discards its copy).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Final

from proofpool_arithmetic.build import (
    ModelManifest,
    ModelSpec,
    create_model,
    read_manifest,
    save_model,
    settings_digest,
)
from proofpool_arithmetic.warmup import Progress, WarmupSpec, warmup

CACHE_ENV: Final = "PROOFPOOL_MODEL_CACHE"
"""Environment variable that overrides the cache directory."""
DEFAULT_CACHE: Final = Path("~/.cache/proofpool/models")


def model_cache_dir() -> Path:
    """The cache root: `$PROOFPOOL_MODEL_CACHE`, else `~/.cache/proofpool/models`."""
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE).expanduser()


def devnet_model_path(
    spec: ModelSpec | None = None, warmup_spec: WarmupSpec | None = None, cache_dir: Path | None = None
) -> Path:
    """Where the model for these settings lives (whether or not it was built yet)."""
    spec, warmup_spec = spec or ModelSpec(), warmup_spec or WarmupSpec()
    digest = settings_digest(spec, warmup_spec)
    return (cache_dir or model_cache_dir()) / f"devnet-{digest[:16]}"


def is_complete(path: Path, spec: ModelSpec, warmup_spec: WarmupSpec) -> bool:
    """True if `path` holds a model built from `spec` and warmed with `warmup_spec`."""
    manifest = read_manifest(path)
    return (
        manifest is not None
        and manifest.spec == spec
        and manifest.warmup == asdict(warmup_spec)
        and (path / "model.safetensors").is_file()
        and (path / "tokenizer.json").is_file()
    )


def ensure_devnet_model(
    spec: ModelSpec | None = None,
    warmup_spec: WarmupSpec | None = None,
    cache_dir: Path | None = None,
    progress: Progress | None = print,
) -> Path:
    """The directory of the warmed devnet model for these settings, building it on first use."""
    spec, warmup_spec = spec or ModelSpec(), warmup_spec or WarmupSpec()
    target = devnet_model_path(spec, warmup_spec, cache_dir)
    if is_complete(target, spec, warmup_spec):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # incomplete leftovers of an older build: replace them
        shutil.rmtree(target)
    if progress:
        progress(f"building the devnet model in {target}")
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        save_model(create_model(spec), staging, ModelManifest(spec=spec))
        warmup(staging, warmup_spec, progress)
        try:
            staging.rename(target)
        except OSError:
            if not is_complete(target, spec, warmup_spec):  # not a lost race: a real failure
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target
