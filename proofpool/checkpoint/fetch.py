"""Fetch a checkpoint into a local cache, trusting nothing but the expected manifest hash.

The cache (`cache_dir`) has two parts:

    blobs/<sha256>                       one verified file per content hash, read-only
    checkpoints/<manifest sha256 hex>/   a loadable model directory: hard links to the blobs
                                         (copies where links are impossible) + the manifest

Blobs are shared between versions: a new checkpoint downloads only the files whose hash the
cache lacks (usually the weight shards; config and tokenizer stay). Every download is checked
against its manifest entry before it becomes a blob, so a blob's name is its verified content.
A checkpoint directory is built in a temporary sibling and renamed into place when complete:
a crash leaves no directory that looks complete but is not, and two processes fetching the
same checkpoint both end with the same complete directory.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from proofpool.checkpoint.errors import CheckpointError, Reason
from proofpool.checkpoint.manifest import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    CheckpointManifest,
    ShardEntry,
    hash_file,
    parse_manifest,
)
from proofpool.checkpoint.store import CheckpointLocation, parse_checkpoint_uri
from proofpool.storage import ObjectNotFound, ObjectStore, ObjectTooLarge

BLOBS: Final = "blobs"
CHECKPOINTS: Final = "checkpoints"
_PARTIAL: Final = ".partial-"
_READ_ONLY: Final = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH


@dataclass(frozen=True)
class FetchProgress:
    """Where a fetch stands after one more file, for a worker's console."""

    files_done: int
    files_total: int
    bytes_done: int
    bytes_total: int
    path: str
    """The file just handled."""
    downloaded: bool
    """True when it came from the store, False when the cache already had its blob."""
    downloaded_bytes: int
    """Bytes fetched from the store so far in this call."""


ProgressCallback = Callable[[FetchProgress], None]


def checkpoint_dir(cache_dir: Path, manifest_sha256: bytes) -> Path:
    """Where the checkpoint with this manifest hash lives in `cache_dir` (built or not)."""
    return Path(cache_dir) / CHECKPOINTS / _check_digest(manifest_sha256).hex()


def ensure_checkpoint(
    store: ObjectStore,
    uri: str,
    expected_manifest_sha256: bytes,
    cache_dir: Path,
    progress: ProgressCallback | None = None,
    *,
    verify_cached: bool = False,
) -> Path:
    """A local model directory holding exactly the checkpoint whose manifest hashes to
    `expected_manifest_sha256` (the hash published on-chain), fetched from `uri` as needed.

    Returns at once when the cache already has it complete. Otherwise: the manifest is read
    and checked against the expected hash (`manifest_missing`, `manifest_hash_mismatch`,
    `manifest_malformed`), files the cache lacks are downloaded and checked (`shard_missing`,
    `shard_hash_mismatch`; a bad download never becomes a blob), and the directory is
    assembled atomically. `verify_cached` re-hashes reused blobs too and replaces a damaged one.
    """
    target = checkpoint_dir(cache_dir, expected_manifest_sha256)
    if is_complete(target):
        return target
    location = parse_checkpoint_uri(uri)
    if location.bucket != store.bucket:
        raise CheckpointError(
            Reason.URI_INVALID, f"checkpoint is in bucket {location.bucket!r}, the store serves {store.bucket!r}"
        )
    raw = _fetch_manifest(store, location, expected_manifest_sha256)
    manifest = parse_manifest(raw)
    blobs = Path(cache_dir) / BLOBS
    blobs.mkdir(parents=True, exist_ok=True)
    done = downloaded_bytes = bytes_done = 0
    for entry in manifest.files:
        fetched = _ensure_blob(store, location, entry, blobs, verify_cached)
        done, bytes_done = done + 1, bytes_done + entry.size
        downloaded_bytes += entry.size if fetched else 0
        if progress is not None:
            progress(
                FetchProgress(
                    files_done=done,
                    files_total=len(manifest.files),
                    bytes_done=bytes_done,
                    bytes_total=manifest.total_size,
                    path=entry.path,
                    downloaded=fetched,
                    downloaded_bytes=downloaded_bytes,
                )
            )
    return _assemble(manifest, raw, blobs, target)


def is_complete(directory: Path) -> bool:
    """True when `directory` is an assembled checkpoint whose files all exist with their sizes.

    Cheap (one small read and a `stat` per file) so a worker can call it on every heartbeat;
    the files' hashes were checked when their blobs were made.
    """
    try:
        raw = (directory / MANIFEST_NAME).read_bytes()
        if hashlib.sha256(raw).hexdigest() != directory.name:
            return False
        manifest = parse_manifest(raw)
        return all((directory / entry.path).stat().st_size == entry.size for entry in manifest.files)
    except (OSError, CheckpointError):
        return False


def _check_digest(digest: bytes) -> bytes:
    if not isinstance(digest, bytes) or len(digest) != 32:
        raise ValueError(f"a manifest sha256 is 32 bytes, not {digest!r}")
    return digest


def _fetch_manifest(store: ObjectStore, location: CheckpointLocation, expected: bytes) -> bytes:
    """The manifest's bytes, only if they hash to `expected`."""
    try:
        raw = store.get_object(location.manifest_key, max_bytes=MAX_MANIFEST_BYTES)
    except ObjectNotFound as exc:
        raise CheckpointError(Reason.MANIFEST_MISSING, f"no manifest at {location.uri}{MANIFEST_NAME}") from exc
    except ObjectTooLarge as exc:
        raise CheckpointError(Reason.MANIFEST_MALFORMED, f"manifest at {location.uri} is too large: {exc}") from exc
    actual = hashlib.sha256(raw).digest()
    if actual != expected:
        raise CheckpointError(
            Reason.MANIFEST_HASH_MISMATCH,
            f"manifest at {location.uri} has sha256 0x{actual.hex()}, expected 0x{expected.hex()}",
        )
    return raw


def _ensure_blob(
    store: ObjectStore, location: CheckpointLocation, entry: ShardEntry, blobs: Path, verify_cached: bool
) -> bool:
    """Make `blobs/<sha256>` hold the entry's verified bytes; True when they were downloaded."""
    blob = blobs / entry.sha256
    if _blob_usable(blob, entry, verify_cached):
        return False
    key = location.file_key(entry.path)
    try:
        body = store.get_object(key, max_bytes=entry.size)
    except ObjectNotFound as exc:
        raise CheckpointError(Reason.SHARD_MISSING, f"{entry.path} is not in the store at {location.uri}") from exc
    except ObjectTooLarge as exc:
        raise CheckpointError(
            Reason.SHARD_HASH_MISMATCH, f"{entry.path} in the store is larger than the {entry.size} bytes listed"
        ) from exc
    actual = hashlib.sha256(body).hexdigest()
    if len(body) != entry.size or actual != entry.sha256:
        raise CheckpointError(
            Reason.SHARD_HASH_MISMATCH,
            f"{entry.path} from {location.uri} has sha256 {actual} ({len(body)} bytes), "
            f"the manifest lists {entry.sha256} ({entry.size} bytes)",
        )
    fd, partial = tempfile.mkstemp(prefix=_PARTIAL, dir=blobs)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(partial, _READ_ONLY)  # hard links share it: nobody edits a checkpoint in place
        os.replace(partial, blob)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
    return True


def _blob_usable(blob: Path, entry: ShardEntry, verify: bool) -> bool:
    """True when the cached blob can be used; a damaged one is deleted."""
    try:
        size = blob.stat().st_size
    except FileNotFoundError:
        return False
    if size == entry.size and (not verify or hash_file(blob)[0] == entry.sha256):
        return True
    blob.unlink(missing_ok=True)
    return False


def _assemble(manifest: CheckpointManifest, raw: bytes, blobs: Path, target: Path) -> Path:
    """Build the checkpoint directory in a temporary sibling and rename it to `target`."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if is_complete(target):  # another process finished it meanwhile
        return target
    if target.exists():  # an incomplete leftover (files deleted by hand): move it aside, then drop it
        stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=target.parent))
        target.rename(stale / target.name)
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for entry in manifest.files:
            _link_or_copy(blobs / entry.sha256, staging / entry.path)
        (staging / MANIFEST_NAME).write_bytes(raw)
        try:
            staging.rename(target)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not is_complete(target):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # gone after a rename; a loser's copy otherwise
    return target


def _link_or_copy(blob: Path, dest: Path) -> None:
    try:
        os.link(blob, dest)
    except OSError:  # another file system, or links not allowed: a copy costs disk, not trust
        shutil.copyfile(blob, dest)


def prune_cache(cache_dir: Path, keep: Iterable[bytes]) -> int:
    """Delete the checkpoints whose manifest hash is not in `keep`, the blobs only they used,
    and leftovers of interrupted fetches; return the number of bytes freed.

    A worker calls this after switching versions, keeping the current and the previous one.
    """
    root = Path(cache_dir)
    kept = {_check_digest(digest).hex() for digest in keep}
    freed = 0
    referenced: set[str] = set()
    checkpoints = root / CHECKPOINTS
    for directory in sorted(checkpoints.iterdir()) if checkpoints.is_dir() else []:
        if directory.name in kept and is_complete(directory):
            referenced |= {e.sha256 for e in parse_manifest((directory / MANIFEST_NAME).read_bytes()).files}
            continue
        freed += _tree_size(directory)
        shutil.rmtree(directory, ignore_errors=True)
    blobs = root / BLOBS
    for blob in sorted(blobs.iterdir()) if blobs.is_dir() else []:
        if blob.name not in referenced:
            freed += blob.stat().st_size if blob.stat().st_nlink == 1 else 0
            blob.unlink(missing_ok=True)
    return freed


def _tree_size(directory: Path) -> int:
    """Bytes a directory's files hold alone (hard-linked files free nothing when removed)."""
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(OSError):
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
                total += info.st_size
    return total
