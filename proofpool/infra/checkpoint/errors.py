"""`CheckpointError`: every way a checkpoint can be refused, each with a reason code.

Workers and validators act on the reason (retry later, report the publisher, give up), and
operators grep logs for it, so the codes are a closed set rather than free text. The root
lives here, next to the package that raises it, like `StorageError` and `ChainError`.
"""

from __future__ import annotations

from enum import StrEnum

from proofpool.core.errors import ProofpoolError


class Reason(StrEnum):
    """Why a checkpoint was refused."""

    MANIFEST_MALFORMED = "manifest_malformed"
    """The manifest is not valid JSON of the expected shape (types, keys, paths, sizes)."""
    MANIFEST_UNSUPPORTED = "manifest_unsupported"
    """The manifest is well formed but of a schema version this code does not know."""
    MANIFEST_MISSING = "manifest_missing"
    """There is no manifest object at the checkpoint URI."""
    MANIFEST_HASH_MISMATCH = "manifest_hash_mismatch"
    """The manifest's sha256 is not the one expected (published on-chain)."""
    SHARD_HASH_MISMATCH = "shard_hash_mismatch"
    """A file's bytes do not have the size and sha256 its manifest entry lists."""
    SHARD_MISSING = "shard_missing"
    """A file the manifest lists is not in the store."""
    CHECKPOINT_TOO_LARGE = "checkpoint_too_large"
    """The manifest's files add up to more than this process downloads (`Settings.checkpoint_max_bytes`)."""
    NOT_ON_CHAIN = "not_on_chain"
    """No manifest hash is published on-chain for this pool and version."""
    URI_INVALID = "uri_invalid"
    """The checkpoint URI is not `s3://<bucket of this store>/<prefix>/`."""
    SOURCE_INVALID = "source_invalid"
    """The model directory or model to publish cannot be made into a checkpoint."""
    PUBLISH_REFUSED = "publish_refused"
    """The chain would refuse the publication (not the manager, version not increasing)."""
    METRICS_MALFORMED = "metrics_malformed"
    """The trainer's metrics file (`proofpool-metrics.json`) is not the expected shape, or names
    another pool or version than its checkpoint."""


class CheckpointError(ProofpoolError):
    """A checkpoint cannot be written, published, fetched or trusted; `reason` says why."""

    def __init__(self, reason: Reason, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason.value}: {detail}")
