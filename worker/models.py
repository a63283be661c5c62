"""Which local model directory serves an assignment, and the engine running it.

An assignment names a checkpoint version and the manifest hash the backend indexed. The worker
trusts neither: it reads the manifest hash the chain recorded for that pool and version, refuses
the assignment if the two differ, and lets `proofpool.infra.checkpoint` download only the files it
lacks and check each file's sha256 against the manifest, through the configured relays
(PROOFPOOL_CHECKPOINT_RELAYS) when there are any, the object store being the last resort.
Version 0 without a manifest is the pool's base model (`proofpool.envs`). Anything it
cannot serve becomes `Unservable` with a reason code, which the node reports in its next heartbeat.

When the directory changes, a checkpoint of the same model (`same_model`: every file vLLM reads
besides the weights is identical, as for each checkpoint a pool's trainer publishes) only has its
weights loaded into the running engine (`InferenceEngine.reload`: 0.04 s against 2.7 s for a new
engine for the devnet model, and the same tokens and hidden states bit for bit). Any other
directory gets a new engine; the old one is shut down first so two KV caches never coexist.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path
from typing import Final

from proofpool.worker.engine import EngineConfig, InferenceEngine

from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import SpecError
from proofpool.envs import UnknownBaseModel, resolve_base_model
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint import CheckpointError, ensure_checkpoint, onchain_manifest_sha256
from proofpool.infra.config import get_settings
from proofpool.infra.http.node_api import Assignment
from proofpool.infra.storage.s3 import ObjectStore

log = logging.getLogger(__name__)


class Unservable(ProofpoolError):
    """This node cannot serve the assignment; `reason` is the code it reports to the backend."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


class ModelResolver:
    """Maps an assignment's (version, manifest hash) to a verified local model directory."""

    def __init__(
        self,
        client: ChainClient,
        store: Callable[[], ObjectStore],
        cache_dir: Path,
        base_model: Path | None = None,
        progress: Callable[[str], None] | None = None,
        relays: Sequence[str] | None = None,
    ) -> None:
        self._client = client
        self._store = store
        self._cache_dir = cache_dir
        self._base_model = base_model
        self._progress = progress
        self._relays = tuple(get_settings().checkpoint_relays if relays is None else relays)
        """Checkpoint relays asked before the store (default: PROOFPOOL_CHECKPOINT_RELAYS)."""
        self._resolved: dict[tuple[int, int, bytes | None], Path] = {}

    def resolve(self, a: Assignment) -> Path:
        """The model directory for `a`; raises `Unservable` with a reason code."""
        key = (a.pool_id, a.checkpoint_version, a.manifest_sha256)
        if key not in self._resolved:
            self._resolved[key] = self._resolve(a)
        return self._resolved[key]

    def _resolve(self, a: Assignment) -> Path:
        if a.manifest_sha256 is None:
            if a.checkpoint_version != 0:
                raise Unservable("unknown_model_version", f"version {a.checkpoint_version} comes without a manifest")
            pool = self._client.pool.get_pool(a.pool_id)
            try:
                return resolve_base_model(
                    pool.model_uri, self._base_model, self._progress, spec_sha256=pool.spec_sha256
                )
            except UnknownBaseModel as exc:
                raise Unservable("unknown_base_model", str(exc)) from exc
            except SpecError as exc:  # the pool's spec hash and model URI disagree, or its spec is refused
                raise Unservable("spec_refused", str(exc)) from exc
        on_chain = onchain_manifest_sha256(self._client, a.pool_id, a.checkpoint_version)
        if on_chain is None:
            raise Unservable(
                "unknown_model_version", f"pool {a.pool_id} has no checkpoint {a.checkpoint_version} on-chain"
            )
        if on_chain != a.manifest_sha256:
            raise Unservable(
                "manifest_hash_mismatch",
                f"assigned manifest 0x{a.manifest_sha256.hex()} but the chain has 0x{on_chain.hex()}",
            )
        if not a.checkpoint_uri:
            raise Unservable("checkpoint_uri_missing", f"checkpoint {a.checkpoint_version} has no URI")
        if self._progress:
            through = f" through {len(self._relays)} relay(s)" if self._relays else ""
            self._progress(f"fetching checkpoint {a.checkpoint_version} from {a.checkpoint_uri}{through}")
        try:
            return ensure_checkpoint(
                self._store(),
                a.checkpoint_uri,
                on_chain,
                self._cache_dir,
                relays=self._relays,
                max_bytes=get_settings().checkpoint_max_bytes,
            )
        except CheckpointError as exc:
            raise Unservable(exc.reason.value, exc.detail) from exc


WEIGHT_FILES: Final = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.safetensors.index.json", "*.bin.index.json")
"""Files that hold (or index) a checkpoint's weights: what an in-place reload reads anew."""

OWN_FILES: Final = ("proofpool-*.json",)
"""proofpool's own records in a model directory (build metadata, checkpoint manifest); vLLM ignores them."""


def same_model(a: Path, b: Path) -> bool:
    """Whether the model directories `a` and `b` differ in their weights at most: the same names
    and bytes for every other file (config, generation config, tokenizer, chat template), so an
    engine started on `a` serves `b` once it holds `b`'s weights."""

    def described(root: Path) -> dict[str, bytes]:
        return {
            path.name: path.read_bytes()
            for path in sorted(root.iterdir())
            if path.is_file() and not any(fnmatch(path.name, p) for p in (*WEIGHT_FILES, *OWN_FILES))
        }

    try:
        return a != b and described(a) == described(b)
    except OSError:  # a directory went away: nothing to reuse
        return False


class EngineSlot:
    """At most one engine at a time: a checkpoint of the same model is loaded into the running
    engine, any other model directory gets a new one (module docstring)."""

    def __init__(self, config: EngineConfig, progress: Callable[[str], None] | None = None) -> None:
        self._config = config
        self._progress = progress
        self._engine: InferenceEngine | None = None
        self._path: Path | None = None

    def get(self, path: Path, model_len: int = 0) -> InferenceEngine:
        """The engine on `path`, able to hold `model_len` tokens per sequence (the pool's longest
        prompt plus its completion budget; the configured length when that is larger)."""
        wanted = max(self._config.max_model_len, model_len)
        engine, current = self._engine, self._path
        if engine is not None and current is not None and engine.config.max_model_len >= wanted:
            if current == path:
                return engine
            if self._config.reload_in_place and same_model(current, path) and self._reload(engine, path):
                return engine
        self.close()
        if self._progress:
            self._progress(f"loading {path.name} into vLLM")
        self._engine = InferenceEngine(path, replace(self._config, max_model_len=wanted))
        self._path = path
        log.info("engine loaded", extra={"model": str(path), "seconds": round(self._engine.load_seconds, 1)})
        return self._engine

    def _reload(self, engine: InferenceEngine, path: Path) -> bool:
        """Load `path`'s weights into `engine`; False (and a new engine follows) if vLLM refused."""
        if self._progress:
            self._progress(f"loading the weights of {path.name} into the running engine")
        try:
            engine.reload(path)
        except Exception as exc:  # noqa: BLE001 - a new engine serves it instead: slower, never wrong
            log.warning("in-place reload failed, starting a new engine: %s", exc, extra={"model": str(path)})
            return False
        self._path = path
        log.info("engine reloaded", extra={"model": str(path), "seconds": round(engine.load_seconds, 2)})
        return True

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine, self._path = None, None
