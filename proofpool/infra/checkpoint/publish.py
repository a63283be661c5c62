"""Publish a checkpoint: write it, upload it, anchor its manifest hash on-chain.

The order is what makes the anchor trustworthy for readers: the files and the manifest are in
the store (and the manifest and metrics file in the checkpoint's metrics record,
`metrics_record.py`) before the chain names the manifest, so a worker that sees
`CheckpointPublished` can always fetch what it names, and the backend its figures. What the
chain would refuse (a sender that is not the pool's manager, a version that does not increase)
is checked first, before minutes of uploading.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from web3.types import TxReceipt

from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint.errors import CheckpointError, Reason
from proofpool.infra.checkpoint.manifest import MAX_VERSION, CheckpointManifest
from proofpool.infra.checkpoint.metrics import CheckpointMetrics, Figure
from proofpool.infra.checkpoint.metrics_record import upload_metrics_record
from proofpool.infra.checkpoint.shards import DEFAULT_SHARD_SIZE, write_checkpoint
from proofpool.infra.checkpoint.store import upload_checkpoint
from proofpool.infra.storage import ObjectStore

if TYPE_CHECKING:
    from collections.abc import Mapping

    from transformers import PreTrainedModel


@dataclass(frozen=True)
class PublishedCheckpoint:
    """A checkpoint that is in the store and anchored on-chain."""

    version: int
    manifest_sha256: bytes
    uri: str
    tx_hash: bytes
    manifest: CheckpointManifest = field(repr=False)
    receipt: TxReceipt = field(repr=False)


def check_can_publish(client: ChainClient, pool_id: int, version: int) -> None:
    """`CheckpointError("publish_refused")` unless `client` may publish `version` of `pool_id` now."""
    if not 0 <= version <= MAX_VERSION:
        raise CheckpointError(Reason.PUBLISH_REFUSED, f"version {version} is outside 0..{MAX_VERSION}")
    if not 1 <= pool_id <= client.pool.pool_count():
        raise CheckpointError(Reason.PUBLISH_REFUSED, f"no pool {pool_id} on chain {client.chain_id}")
    manager = client.pool.get_pool(pool_id).manager
    if manager.lower() != client.address.lower():
        raise CheckpointError(
            Reason.PUBLISH_REFUSED, f"pool {pool_id} is managed by {manager}; {client.address} cannot publish"
        )
    latest = client.pool.latest_checkpoint(pool_id)
    if latest.published_at and version <= latest.version:
        raise CheckpointError(
            Reason.PUBLISH_REFUSED, f"pool {pool_id} already has checkpoint {latest.version}; versions must increase"
        )


def publish_checkpoint(
    client: ChainClient,
    store: ObjectStore,
    pool_id: int,
    version: int,
    source: Path | PreTrainedModel,
    shard_size: int = DEFAULT_SHARD_SIZE,
    *,
    prefix: str = "",
    assets_dir: Path | None = None,
    work_dir: Path | None = None,
    figures: Mapping[str, Figure] | None = None,
) -> PublishedCheckpoint:
    """Write `source` (model directory or in-memory model, see `write_checkpoint`) as checkpoint
    `version` of `pool_id`, upload it under `{prefix}pools/{pool}/checkpoints/{version}/` and
    publish its manifest hash with `client`, which must send as the pool's manager.

    `figures`, the training figures of the step that made the checkpoint (`metrics.py`: finite
    numbers by name; `publishable_figures` picks them), go into its `proofpool-metrics.json`.

    The local copy is written under `work_dir` (default: the system temp dir) and removed after.
    """
    metrics = None if figures is None else CheckpointMetrics(pool_id, version, figures)
    check_can_publish(client, pool_id, version)
    with tempfile.TemporaryDirectory(prefix="proofpool-checkpoint-", dir=work_dir) as tmp:
        out_dir = Path(tmp) / "checkpoint"
        manifest = write_checkpoint(
            source, out_dir, shard_size, pool_id=pool_id, version=version, assets_dir=assets_dir, metrics=metrics
        )
        uri = upload_checkpoint(store, out_dir, manifest, prefix)
        upload_metrics_record(store, out_dir, manifest, prefix)
    digest = manifest.sha256()
    receipt = client.pool.publish_checkpoint(pool_id, version, digest, uri)
    return PublishedCheckpoint(
        version=version,
        manifest_sha256=digest,
        uri=uri,
        tx_hash=bytes(receipt["transactionHash"]),
        manifest=manifest,
        receipt=receipt,
    )
