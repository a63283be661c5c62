"""Checkpoints: sharded safetensors model directories whose manifest hash is anchored on-chain.

Shared by the trainer and the pool manager (write, upload, publish), workers and validators
(fetch into a content-addressed cache, trusting only manifests the chain vouches for). See
docs/checkpoints.md for the format, the trust chain and the cache layout.

    manifest.py   the manifest: canonical JSON, strict parsing, safe file names
    metrics.py    the trainer's metrics file (`proofpool-metrics.json`): a checkpoint's figures
    shards.py     write a model (directory or in memory) as shards + manifest
    store.py      object-store layout and upload
    metrics_record.py  manifest + metrics kept after pruning, and the verified read of the figures
    publish.py    write + upload + `publishCheckpoint`
    fetch.py      verified download into the local cache, several files at once, resumable
    sources.py    where bytes come from (object store, relays) and which source to ask next
    relay.py      the HTTP relay that mirrors versions and serves them (imported on its own: FastAPI)
    anchor.py     what the chain recorded for a pool's checkpoints
"""

from proofpool.infra.checkpoint.anchor import (
    AnchoredCheckpoint,
    ensure_published_checkpoint,
    onchain_checkpoint,
    onchain_manifest_sha256,
)
from proofpool.infra.checkpoint.errors import CheckpointError, Reason
from proofpool.infra.checkpoint.fetch import (
    FetchProgress,
    checkpoint_dir,
    ensure_checkpoint,
    fetch_checkpoint,
    is_complete,
    prune_cache,
)
from proofpool.infra.checkpoint.manifest import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    CheckpointManifest,
    ShardEntry,
    parse_manifest,
)
from proofpool.infra.checkpoint.metrics import METRICS_NAME, CheckpointMetrics, parse_metrics, publishable_figures
from proofpool.infra.checkpoint.metrics_record import (
    MetricsReading,
    MetricsStatus,
    metrics_record_prefix,
    read_published_metrics,
)
from proofpool.infra.checkpoint.publish import PublishedCheckpoint, check_can_publish, publish_checkpoint
from proofpool.infra.checkpoint.shards import DEFAULT_SHARD_SIZE, write_checkpoint
from proofpool.infra.checkpoint.sources import (
    RelaySource,
    ShardSource,
    SourceError,
    SourcePicker,
    SourceStats,
    StoreSource,
    build_picker,
)
from proofpool.infra.checkpoint.store import (
    CheckpointLocation,
    checkpoint_prefix,
    parse_checkpoint_uri,
    prune_checkpoints,
    upload_checkpoint,
)

__all__ = [
    "DEFAULT_SHARD_SIZE",
    "MANIFEST_NAME",
    "METRICS_NAME",
    "SCHEMA_VERSION",
    "AnchoredCheckpoint",
    "CheckpointError",
    "CheckpointLocation",
    "CheckpointManifest",
    "CheckpointMetrics",
    "FetchProgress",
    "MetricsReading",
    "MetricsStatus",
    "PublishedCheckpoint",
    "Reason",
    "RelaySource",
    "ShardEntry",
    "ShardSource",
    "SourceError",
    "SourcePicker",
    "SourceStats",
    "StoreSource",
    "build_picker",
    "check_can_publish",
    "checkpoint_dir",
    "checkpoint_prefix",
    "ensure_checkpoint",
    "ensure_published_checkpoint",
    "fetch_checkpoint",
    "is_complete",
    "metrics_record_prefix",
    "onchain_checkpoint",
    "onchain_manifest_sha256",
    "parse_checkpoint_uri",
    "parse_manifest",
    "parse_metrics",
    "prune_cache",
    "prune_checkpoints",
    "publish_checkpoint",
    "publishable_figures",
    "read_published_metrics",
    "upload_checkpoint",
    "write_checkpoint",
]
