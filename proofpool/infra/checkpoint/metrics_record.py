"""The metrics record: a published checkpoint's manifest and metrics file, kept after its weights are
pruned, and the verified read of a checkpoint's figures from it.

Layout, beside the checkpoints (below the same optional test or tenant prefix):

    pools/{pool}/checkpoint-metrics/{manifest sha256 hex}/proofpool-metrics.json
    pools/{pool}/checkpoint-metrics/{manifest sha256 hex}/proofpool-checkpoint.json

`publish_checkpoint` writes it after the checkpoint and before the chain transaction: the metrics
file first, the manifest last, so a manifest in the record means the file it lists is there. The
trainer prunes old versions (`prune_checkpoints` deletes `pools/{pool}/checkpoints/{version}/`),
never the record: a copy of the two small files keeps the rule "a manifest under `checkpoints/`
means every file it lists is there", which workers and relays rely on, and the figures of every
version stay verifiable however late the backend reads them. The record is keyed by manifest hash,
so a checkpoint published again under the same version (after a reorg) never overwrites another's.

`read_published_metrics` is what the backend asks for each checkpoint the chain recorded: the
manifest from the record (or, for a checkpoint anchored without one, from its URI), checked
against the chain's manifest hash, then the metrics file, checked against its manifest entry.
Every outcome is a `MetricsReading` with a status; only a store that cannot be asked (unreachable,
refusing the credentials) raises its `StorageError`, for the caller to try again later.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Final

from proofpool.infra.checkpoint.errors import CheckpointError
from proofpool.infra.checkpoint.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, CheckpointManifest, parse_manifest
from proofpool.infra.checkpoint.metrics import MAX_METRICS_BYTES, METRICS_NAME, CheckpointMetrics, parse_metrics
from proofpool.infra.checkpoint.store import MANIFEST_CONTENT_TYPE, checkpoint_prefix, parse_checkpoint_uri
from proofpool.infra.storage import ObjectNotFound, ObjectStore, ObjectTooLarge

RECORD_FOLDER: Final = "checkpoint-metrics"
_LAYOUT = re.compile(r"(.*)pools/(\d+)/checkpoints/(\d+)/")


class MetricsStatus(StrEnum):
    """What reading a checkpoint's figures found."""

    VERIFIED = "verified"
    """The figures are the checkpoint's: manifest hash = the chain's, file hash = the manifest's."""
    UNLISTED = "unlisted"
    """The (verified) manifest lists no metrics file: the publisher gave no figures."""
    MISSING = "missing"
    """The store holds no manifest for the checkpoint, or not the metrics file it lists."""
    MISMATCH = "mismatch"
    """The stored manifest is not the one the chain anchored, or the file not the one it lists."""
    MALFORMED = "malformed"
    """The manifest or the metrics file is not of the expected shape, or names another pool or version."""


@dataclass(frozen=True)
class MetricsReading:
    """The outcome of one read: the status, why (unless verified), and the figures when verified."""

    status: MetricsStatus
    detail: str | None = None
    metrics: CheckpointMetrics | None = None


def metrics_record_prefix(pool_id: int, manifest_sha256_hex: str, prefix: str = "") -> str:
    """`{prefix}pools/{pool}/checkpoint-metrics/{manifest sha256 hex}/`."""
    pools = checkpoint_prefix(pool_id, 0, prefix).removesuffix("checkpoints/0/")
    return f"{pools}{RECORD_FOLDER}/{manifest_sha256_hex}/"


def upload_metrics_record(store: ObjectStore, out_dir: Path, manifest: CheckpointManifest, prefix: str = "") -> str:
    """Copy the metrics file (when the manifest lists one) and then the manifest of the checkpoint
    written in `out_dir` into its record; returns the record's prefix."""
    record = metrics_record_prefix(manifest.pool_id, manifest.sha256_hex(), prefix)
    entry = manifest.entry(METRICS_NAME)
    if entry is not None:
        store.put_object(
            record + METRICS_NAME,
            (Path(out_dir) / METRICS_NAME).read_bytes(),
            sha256_hex=entry.sha256,
            content_type=MANIFEST_CONTENT_TYPE,
        )
    store.put_object(record + MANIFEST_NAME, manifest.to_bytes(), content_type=MANIFEST_CONTENT_TYPE)
    return record


def read_published_metrics(
    store: ObjectStore, pool_id: int, version: int, manifest_sha256: bytes, uri: str
) -> MetricsReading:
    """The verified figures of checkpoint `version` of `pool_id`, which the chain anchored as
    `manifest_sha256` stored at `uri`; see the module docstring. Raises only the store's
    `StorageError` when the store cannot be asked (never for a missing or oversized object)."""
    try:
        location = parse_checkpoint_uri(uri)
    except CheckpointError as exc:
        return MetricsReading(MetricsStatus.MALFORMED, f"the checkpoint's URI: {exc.detail}")
    if location.bucket != store.bucket:
        return MetricsReading(
            MetricsStatus.MISSING, f"the checkpoint is in bucket {location.bucket}, this store reads {store.bucket}"
        )
    places = [location.prefix]
    layout = _LAYOUT.fullmatch(location.prefix)
    if layout is not None and (int(layout.group(2)), int(layout.group(3))) == (pool_id, version):
        places.insert(0, metrics_record_prefix(pool_id, manifest_sha256.hex(), layout.group(1)))
    for place in places:
        try:
            raw = store.get_object(place + MANIFEST_NAME, max_bytes=MAX_MANIFEST_BYTES)
        except ObjectNotFound:
            continue
        except ObjectTooLarge:
            detail = f"the manifest at {place} is over {MAX_MANIFEST_BYTES} bytes"
            return MetricsReading(MetricsStatus.MALFORMED, detail)
        return _verified(store, place, raw, pool_id, version, manifest_sha256)
    return MetricsReading(MetricsStatus.MISSING, f"no manifest in s3://{store.bucket}/ at {' or '.join(places)}")


def _verified(
    store: ObjectStore, place: str, raw: bytes, pool_id: int, version: int, manifest_sha256: bytes
) -> MetricsReading:
    """The figures of the manifest `raw` found under `place`, checked link by link."""
    digest = hashlib.sha256(raw).digest()
    if digest != manifest_sha256:
        return MetricsReading(
            MetricsStatus.MISMATCH,
            f"the manifest at {place} has sha256 {digest.hex()}, the chain anchored {manifest_sha256.hex()}",
        )
    try:
        manifest = parse_manifest(raw)
    except CheckpointError as exc:
        return MetricsReading(MetricsStatus.MALFORMED, f"the manifest: {exc}")
    misnamed = _misnamed("the manifest", manifest.pool_id, manifest.version, pool_id, version)
    if misnamed is not None:
        return misnamed
    entry = manifest.entry(METRICS_NAME)
    if entry is None:
        return MetricsReading(MetricsStatus.UNLISTED, f"the manifest lists no {METRICS_NAME}")
    if entry.size > MAX_METRICS_BYTES:
        return MetricsReading(
            MetricsStatus.MALFORMED, f"the manifest lists a {entry.size}-byte {METRICS_NAME}, over {MAX_METRICS_BYTES}"
        )
    try:
        body = store.get_object(place + METRICS_NAME, max_bytes=MAX_METRICS_BYTES)
    except ObjectNotFound:
        return MetricsReading(MetricsStatus.MISSING, f"no {METRICS_NAME} at {place}, which its manifest lists")
    except ObjectTooLarge:
        return MetricsReading(MetricsStatus.MISMATCH, f"the {METRICS_NAME} at {place} is larger than its manifest says")
    found = (hashlib.sha256(body).hexdigest(), len(body))
    if found != (entry.sha256, entry.size):
        return MetricsReading(
            MetricsStatus.MISMATCH,
            f"the {METRICS_NAME} at {place} has sha256 {found[0]} ({found[1]} bytes), "
            f"its manifest lists {entry.sha256} ({entry.size} bytes)",
        )
    try:
        metrics = parse_metrics(body)
    except CheckpointError as exc:
        return MetricsReading(MetricsStatus.MALFORMED, f"the metrics file: {exc}")
    misnamed = _misnamed("the metrics file", metrics.pool_id, metrics.version, pool_id, version)
    if misnamed is not None:
        return misnamed
    return MetricsReading(MetricsStatus.VERIFIED, None, metrics)


def _misnamed(what: str, named_pool: int, named_version: int, pool_id: int, version: int) -> MetricsReading | None:
    """`malformed` when `what` names another checkpoint than the one it was published as, else None."""
    if (named_pool, named_version) == (pool_id, version):
        return None
    return MetricsReading(
        MetricsStatus.MALFORMED,
        f"{what} names pool {named_pool} version {named_version}, published as pool {pool_id} version {version}",
    )
