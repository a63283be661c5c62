"""Where checkpoints live in the object store, and how they get there.

Layout: checkpoint `version` of pool `pool` is the prefix `pools/{pool}/checkpoints/{version}/`
(below an optional test or tenant prefix) holding the checkpoint's files under their own names
plus the manifest (`proofpool-checkpoint.json`), so the prefix itself is a model directory one
can sync and load. Its URI, the one published on-chain, is `s3://{bucket}/{prefix}`.

Uploads put the files first and the manifest last: a manifest in the store means every file
it lists is there too. A file already stored with the same sha256 and size is not sent again,
so a publication interrupted half way can simply be repeated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from proofpool.infra.checkpoint.errors import CheckpointError, Reason
from proofpool.infra.checkpoint.manifest import MANIFEST_NAME, CheckpointManifest, hash_file
from proofpool.infra.storage import ObjectStore

MANIFEST_CONTENT_TYPE: Final = "application/json"
_URI = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(.+/)")


@dataclass(frozen=True)
class CheckpointLocation:
    """A checkpoint's bucket and key prefix (ending in `/`)."""

    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def manifest_key(self) -> str:
        return self.prefix + MANIFEST_NAME

    def file_key(self, path: str) -> str:
        return self.prefix + path


def checkpoint_prefix(pool_id: int, version: int, prefix: str = "") -> str:
    """`{prefix}pools/{pool}/checkpoints/{version}/`; `prefix` is empty or ends in `/`."""
    if pool_id < 0 or version < 0:
        raise ValueError(f"pool_id and version must be >= 0, not {pool_id} and {version}")
    if prefix and (not prefix.endswith("/") or prefix.startswith("/")):
        raise ValueError(f"prefix must be empty or a relative key prefix ending in '/', not {prefix!r}")
    return f"{prefix}pools/{pool_id}/checkpoints/{version}/"


def parse_checkpoint_uri(uri: str) -> CheckpointLocation:
    """The bucket and prefix of `s3://bucket/prefix/`; `CheckpointError("uri_invalid")` otherwise."""
    match = _URI.fullmatch(uri) if isinstance(uri, str) else None
    if match is None or "//" in match.group(2) or match.group(2).startswith("/"):
        raise CheckpointError(Reason.URI_INVALID, f"{uri!r} is not s3://<bucket>/<prefix>/")
    return CheckpointLocation(bucket=match.group(1), prefix=match.group(2))


def upload_checkpoint(store: ObjectStore, out_dir: Path, manifest: CheckpointManifest, prefix: str = "") -> str:
    """Put every file of `manifest` from `out_dir`, then the manifest, under the checkpoint's
    prefix; return its URI.

    Each local file is checked against the manifest before it is sent (`shard_missing`,
    `shard_hash_mismatch`), and the store checks the sha256 it receives: what lands in the
    store is exactly what the manifest, and so the chain, vouches for.
    """
    location = CheckpointLocation(store.bucket, checkpoint_prefix(manifest.pool_id, manifest.version, prefix))
    for entry in manifest.files:
        path = Path(out_dir) / entry.path
        if not path.is_file():
            raise CheckpointError(Reason.SHARD_MISSING, f"{path} is listed in the manifest but missing")
        if hash_file(path) != (entry.sha256, entry.size):
            raise CheckpointError(Reason.SHARD_HASH_MISMATCH, f"{path} changed since the manifest was written")
        key = location.file_key(entry.path)
        stored = store.head_object(key)
        if stored is not None and stored.size == entry.size and stored.sha256_hex == entry.sha256:
            continue
        store.put_object(key, path.read_bytes(), sha256_hex=entry.sha256)
    store.put_object(location.manifest_key, manifest.to_bytes(), content_type=MANIFEST_CONTENT_TYPE)
    return location.uri


def prune_checkpoints(store: ObjectStore, pool_id: int, keep_from: int, prefix: str = "") -> list[int]:
    """Delete the stored checkpoints of `pool_id` older than version `keep_from`; returns the versions
    deleted. The manifest goes first, so a half-deleted version is never taken for a complete one.
    Each version's metrics record (`metrics_record.py`, outside `checkpoints/`) is kept: the
    backend reads a checkpoint's figures from it whenever it gets to them."""
    root = checkpoint_prefix(pool_id, 0, prefix).rsplit("0/", 1)[0]
    by_version: dict[int, list[str]] = {}
    for info in store.list_objects(root):
        head = info.key[len(root) :].split("/", 1)[0]
        if head.isdigit() and int(head) < keep_from:
            by_version.setdefault(int(head), []).append(info.key)
    for keys in by_version.values():
        for key in sorted(keys, key=lambda k: not k.endswith(MANIFEST_NAME)):
            store.delete(key)
    return sorted(by_version)
