"""The models validators recompute with: a pool's checkpoint of a given version, verified
against its on-chain manifest hash, loaded once and kept for the next files.

Version 0 without a published checkpoint is the pool's base model (`proofpool.envs`, the
same rule workers follow). A checkpoint that is on-chain but cannot be fetched or verified is the
pool's problem, not the submitter's: it raises `ModelUnavailable`, which the task retries, and
never turns into a verdict against the worker.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import SpecError
from proofpool.envs import UnknownBaseModel, pool_environment, resolve_base_model
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint import CheckpointError, ensure_published_checkpoint, onchain_manifest_sha256
from proofpool.infra.config import get_settings
from proofpool.infra.storage.s3 import ObjectStore

if TYPE_CHECKING:
    from proofpool.validator.resources import Resources
    from transformers import PreTrainedModel

    from proofpool.core.environment import Environment

log = logging.getLogger(__name__)


class ModelUnavailable(ProofpoolError):
    """The model of a version cannot be obtained right now; retry the validation later."""


class ModelCache:
    """Loaded models by (pool, version), least recently used dropped beyond `capacity`."""

    def __init__(
        self,
        client: ChainClient,
        store: ObjectStore,
        cache_dir: Path,
        precision: str = "bf16",
        capacity: int = 3,
        base_model: Path | None = None,
        relays: Sequence[str] | None = None,
    ) -> None:
        self._client, self._store, self._cache_dir = client, store, cache_dir
        self._precision, self._capacity, self._base_model = precision, capacity, base_model
        self._relays = tuple(get_settings().checkpoint_relays if relays is None else relays)
        """Checkpoint relays asked before the store (default: PROOFPOOL_CHECKPOINT_RELAYS)."""
        self._models: OrderedDict[tuple[int, int], PreTrainedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._environments: dict[int, Environment] = {}

    def environment(self, pool_id: int) -> Environment:
        """The environment the pool's on-chain model URI names (its task set and token limits).

        One not installed here, a spec pool whose spec this machine does not reproduce (another
        package version, another scorer: `SpecMismatch`), or a pool whose on-chain spec hash its
        model URI does not name (`SpecMismatch`, `proofpool.envs.check_spec_commitment`) is not the
        submitter's fault: `ModelUnavailable`, so it judges none of the pool's files and slashes no one."""
        if pool_id not in self._environments:
            pool = self._client.pool.get_pool(pool_id)
            try:
                self._environments[pool_id] = pool_environment(pool.model_uri, pool.spec_sha256)
            except ProofpoolError as exc:
                raise ModelUnavailable(f"pool {pool_id}: {exc}") from exc
        return self._environments[pool_id]

    def get(self, pool_id: int, version: int) -> PreTrainedModel:
        """The model of `pool_id` at `version`, loading (and verifying) it on first use."""
        with self._lock:  # one load at a time: two threads must not both load the same checkpoint
            key = (pool_id, version)
            if key in self._models:
                self._models.move_to_end(key)
                return self._models[key]
            model = self._load(pool_id, version)
            self._models[key] = model
            while len(self._models) > self._capacity:
                self._models.popitem(last=False)
            return model

    def model_dir(self, pool_id: int, version: int) -> Path:
        """The verified local directory of the model (base model or fetched checkpoint)."""
        try:
            if version == 0 and onchain_manifest_sha256(self._client, pool_id, 0) is None:
                pool = self._client.pool.get_pool(pool_id)
                return resolve_base_model(pool.model_uri, self._base_model, spec_sha256=pool.spec_sha256)
            return ensure_published_checkpoint(
                self._client,
                self._store,
                pool_id,
                version,
                self._cache_dir,
                relays=self._relays,
                max_bytes=get_settings().checkpoint_max_bytes,
            )
        except (CheckpointError, UnknownBaseModel, SpecError) as exc:
            raise ModelUnavailable(f"model of pool {pool_id} version {version}: {exc}") from exc

    def _load(self, pool_id: int, version: int) -> PreTrainedModel:
        from proofpool.inference.model import load_model

        path = self.model_dir(pool_id, version)
        log.info("loading model", extra={"pool": pool_id, "version": version, "path": str(path)})
        return load_model(path, self._precision)  # type: ignore[arg-type]


def warm_up(res: Resources) -> None:
    """Load the latest model of every active pool served here before the first task arrives, so the first
    submissions are not judged seconds late behind a cold start (imports and weights: ~5 s here).
    A model that cannot be loaded now is loaded by the task that needs it. Training pools are skipped:
    their replay trains from a checkpoint directory (`proofpool.validator.training`), not this cache."""
    from proofpool.infra.chain.bindings import PoolStatus
    from proofpool.training.published import is_training_pool

    pools = res.client.pool
    for pool_id in range(1, pools.pool_count() + 1):
        info = pools.get_pool(pool_id)
        if info.status is not PoolStatus.ACTIVE or not res.served.allows(pool_id, {pool_id: info.manager}.get):
            continue
        if is_training_pool(info.model_uri):
            continue
        version = pools.latest_checkpoint(pool_id).version
        try:
            res.models.get(pool_id, version)
        except ModelUnavailable as exc:
            log.warning("no warm model: %s", exc, extra={"pool": pool_id, "version": version})
