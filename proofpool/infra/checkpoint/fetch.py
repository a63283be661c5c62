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

Files come from relays or the object store (`sources.py`), several at a time (`parallel`
threads). Each download streams into a partial file next to the blobs; a transfer cut short
resumes from the bytes already written with a ranged request to the same source, so a
mismatch is always the fault of one source: that source is demoted, the partial deleted, and
the file fetched again from another source. The manifest is checked against the expected hash
whichever source served it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from proofpool.infra.checkpoint.errors import CheckpointError, Reason
from proofpool.infra.checkpoint.manifest import MANIFEST_NAME, CheckpointManifest, ShardEntry, hash_file, parse_manifest
from proofpool.infra.checkpoint.sources import (
    ShardSource,
    SourceCorrupt,
    SourceError,
    SourceMissing,
    SourcePicker,
    build_picker,
    relay_client,
)
from proofpool.infra.checkpoint.store import parse_checkpoint_uri
from proofpool.infra.storage import ObjectStore

log = logging.getLogger(__name__)

BLOBS: Final = "blobs"
CHECKPOINTS: Final = "checkpoints"
DEFAULT_PARALLEL: Final = 4
"""Files downloaded at once: enough to fill a link with 50 MB shards, few enough for 2 cores."""
MAX_RESUMES: Final = 8
"""Ranged re-requests per file and source, each after a transfer that delivered some bytes."""
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
    """True when it was downloaded, False when the cache already had its blob."""
    downloaded_bytes: int
    """Bytes downloaded so far in this call."""


ProgressCallback = Callable[[FetchProgress], None]


class _Cancelled(Exception):
    """Another file of the same fetch failed: stop this one (never leaves the module)."""


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
    relays: Sequence[str] = (),
    parallel: int = DEFAULT_PARALLEL,
    max_bytes: int | None = None,
) -> Path:
    """A local model directory holding exactly the checkpoint whose manifest hashes to
    `expected_manifest_sha256` (the hash published on-chain), fetched from `uri` as needed.

    Returns at once when the cache already has it complete. Otherwise: the manifest is read
    and checked against the expected hash (`manifest_missing`, `manifest_hash_mismatch`,
    `manifest_malformed`), files the cache lacks are downloaded and checked (`shard_missing`,
    `shard_hash_mismatch`; a bad download never becomes a blob), and the directory is
    assembled atomically. `verify_cached` re-hashes reused blobs too and replaces a damaged one.

    `relays` are base URLs of `proofpool relay serve` instances, asked before the store (the
    last resort) by their observed success rate and bandwidth; `parallel` files download at once.
    A relay that fails or lies costs time, never trust: the reasons above are those of the store.
    A manifest whose files add up to more than `max_bytes` is refused before any file is fetched
    (`checkpoint_too_large`): the pool's manager writes the manifest and may declare any size.
    """
    target = checkpoint_dir(cache_dir, expected_manifest_sha256)
    if is_complete(target):
        return target
    location = parse_checkpoint_uri(uri)
    if location.bucket != store.bucket:
        raise CheckpointError(
            Reason.URI_INVALID, f"checkpoint is in bucket {location.bucket!r}, the store serves {store.bucket!r}"
        )
    with relay_client(parallel) as client:
        picker = build_picker(store, location, relays, client, manifest_sha256=expected_manifest_sha256)
        return fetch_checkpoint(
            picker,
            expected_manifest_sha256,
            cache_dir,
            progress,
            verify_cached=verify_cached,
            parallel=parallel,
            max_bytes=max_bytes,
        )


def fetch_checkpoint(
    picker: SourcePicker,
    expected_manifest_sha256: bytes,
    cache_dir: Path,
    progress: ProgressCallback | None = None,
    *,
    verify_cached: bool = False,
    parallel: int = DEFAULT_PARALLEL,
    max_bytes: int | None = None,
) -> Path:
    """`ensure_checkpoint` over the sources of `picker` (kept by the caller to read its stats)."""
    target = checkpoint_dir(cache_dir, expected_manifest_sha256)
    if is_complete(target):
        return target
    raw = fetch_manifest(picker, expected_manifest_sha256)
    return materialize_checkpoint(
        picker, raw, cache_dir, progress, verify_cached=verify_cached, parallel=parallel, max_bytes=max_bytes
    )


def fetch_manifest(picker: SourcePicker, expected_sha256: bytes | None) -> bytes:
    """The manifest's bytes from the best source that serves the expected ones.

    A source serving other bytes is demoted and the next one asked. With `expected_sha256`
    None (a relay, which has no chain) the first well-formed manifest is taken; the clients of
    that relay check it against the chain.
    """
    tried: list[ShardSource] = []
    last: SourceError | CheckpointError | None = None
    while (source := picker.pick(tried)) is not None:
        tried.append(source)
        started = time.monotonic()
        try:
            raw = source.fetch_manifest()
        except SourceCorrupt as exc:
            picker.record_corrupt(source)
            last = CheckpointError(Reason.MANIFEST_MALFORMED, str(exc))
            continue
        except SourceError as exc:
            picker.record_failure(source)
            last = exc
            continue
        actual = hashlib.sha256(raw).digest()
        if expected_sha256 is not None and actual != expected_sha256:
            picker.record_corrupt(source)
            last = CheckpointError(
                Reason.MANIFEST_HASH_MISMATCH,
                f"manifest at {source.name} has sha256 0x{actual.hex()}, expected 0x{expected_sha256.hex()}",
            )
            continue
        if expected_sha256 is None:
            try:
                parse_manifest(raw)
            except CheckpointError as exc:
                picker.record_corrupt(source)
                last = exc
                continue
        picker.record_success(source, len(raw), time.monotonic() - started)
        return raw
    if isinstance(last, SourceMissing):
        raise CheckpointError(Reason.MANIFEST_MISSING, last.detail) from last
    raise last if last is not None else SourceError("fetch", "no source to fetch the manifest from")


def materialize_checkpoint(
    picker: SourcePicker,
    raw_manifest: bytes,
    cache_dir: Path,
    progress: ProgressCallback | None = None,
    *,
    verify_cached: bool = False,
    parallel: int = DEFAULT_PARALLEL,
    max_bytes: int | None = None,
) -> Path:
    """Download the files of a manifest the caller already trusts (checked against the chain by
    a client, taken from its upstream by a relay) and assemble its checkpoint directory.

    Files download `parallel` at a time; `progress` is called in this thread after each file, in
    the order they complete. The first file that cannot be fetched stops the others and raises.
    """
    if parallel < 1:
        raise ValueError(f"parallel must be >= 1, not {parallel}")
    manifest = parse_manifest(raw_manifest)
    if max_bytes is not None and manifest.total_size > max_bytes:
        raise CheckpointError(
            Reason.CHECKPOINT_TOO_LARGE,
            f"the manifest lists {len(manifest.files)} files of {manifest.total_size} bytes in all, over the "
            f"limit of {max_bytes} (PROOFPOOL_CHECKPOINT_MAX_BYTES)",
        )
    target = checkpoint_dir(cache_dir, hashlib.sha256(raw_manifest).digest())
    blobs = Path(cache_dir) / BLOBS
    blobs.mkdir(parents=True, exist_ok=True)
    by_hash: dict[str, list[ShardEntry]] = {}
    for entry in manifest.files:  # identical files are one blob, fetched once
        by_hash.setdefault(entry.sha256, []).append(entry)
    cancel = threading.Event()
    done = downloaded_bytes = bytes_done = 0
    executor = ThreadPoolExecutor(max_workers=min(parallel, len(by_hash)), thread_name_prefix="checkpoint-fetch")
    try:
        pending: set[Future[bool]] = set()
        entries_of: dict[Future[bool], list[ShardEntry]] = {}
        for entries in by_hash.values():
            future = executor.submit(_ensure_blob, picker, entries[0], blobs, verify_cached, cancel)
            pending.add(future)
            entries_of[future] = entries
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=lambda f: entries_of[f][0].path):
                fetched = future.result()  # the first failure raises here and cancels the rest
                for index, entry in enumerate(entries_of[future]):
                    downloaded = fetched and index == 0
                    done, bytes_done = done + 1, bytes_done + entry.size
                    downloaded_bytes += entry.size if downloaded else 0
                    if progress is not None:
                        progress(
                            FetchProgress(
                                files_done=done,
                                files_total=len(manifest.files),
                                bytes_done=bytes_done,
                                bytes_total=manifest.total_size,
                                path=entry.path,
                                downloaded=downloaded,
                                downloaded_bytes=downloaded_bytes,
                            )
                        )
    except BaseException:
        cancel.set()
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return _assemble(manifest, raw_manifest, blobs, target)


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


def _ensure_blob(
    picker: SourcePicker, entry: ShardEntry, blobs: Path, verify_cached: bool, cancel: threading.Event
) -> bool:
    """Make `blobs/<sha256>` hold the entry's verified bytes; True when they were downloaded.

    Each source gets one transfer (with resumes) per file, best first; the error of the last one
    tried (the store, when there is one) is the one raised when none delivers.
    """
    blob = blobs / entry.sha256
    if _blob_usable(blob, entry, verify_cached):
        return False
    tried: list[ShardSource] = []
    last: SourceError | None = None
    while (source := picker.pick(tried)) is not None:
        tried.append(source)
        started = time.monotonic()
        try:
            partial = _download(source, entry, blobs, cancel)
        except SourceCorrupt as exc:
            picker.record_corrupt(source)
            last = exc
            continue
        except SourceError as exc:
            picker.record_failure(source)
            last = exc
            log.info("fetching %s from %s failed: %s", entry.path, source.name, exc.detail)
            continue
        except BaseException:  # cancelled, or a local fault (disk full): no verdict on the source
            picker.release(source)
            raise
        picker.record_success(source, entry.size, time.monotonic() - started)
        _install(partial, blob)
        return True
    if isinstance(last, SourceMissing):
        raise CheckpointError(Reason.SHARD_MISSING, last.detail) from last
    if isinstance(last, SourceCorrupt):
        raise CheckpointError(Reason.SHARD_HASH_MISMATCH, f"{entry.path} from {last.source}: {last.detail}") from last
    raise last if last is not None else SourceError("fetch", f"no source left for {entry.path}")


def _download(source: ShardSource, entry: ShardEntry, blobs: Path, cancel: threading.Event) -> Path:
    """The entry's bytes from `source` in a partial file, verified; resumed with a ranged request
    after a transfer cut short that delivered some bytes. The partial is deleted on any failure."""
    fd, name = tempfile.mkstemp(prefix=_PARTIAL, dir=blobs)
    partial = Path(name)
    digest, written, resumes = hashlib.sha256(), 0, 0
    try:
        with os.fdopen(fd, "wb") as handle:
            while True:
                before = written
                try:
                    with contextlib.closing(source.read_file(entry.path, entry.size, written)) as chunks:
                        for chunk in chunks:
                            if cancel.is_set():
                                raise _Cancelled
                            if written + len(chunk) > entry.size:
                                raise SourceCorrupt(source.name, f"sent more than the {entry.size} bytes listed")
                            handle.write(chunk)
                            digest.update(chunk)
                            written += len(chunk)
                    if written < entry.size:
                        raise SourceError(source.name, f"ended {entry.path} after {written} of {entry.size} bytes")
                    break
                except (SourceMissing, SourceCorrupt):
                    raise
                except SourceError as exc:
                    if written == entry.size:  # cut after the last byte: nothing to resume, the hash decides
                        break
                    if written == before or resumes >= MAX_RESUMES:
                        raise
                    resumes += 1
                    log.info("resuming %s from %s at byte %d: %s", entry.path, source.name, written, exc.detail)
            handle.flush()
            os.fsync(handle.fileno())
        actual = digest.hexdigest()
        if actual != entry.sha256:
            raise SourceCorrupt(
                source.name,
                f"has sha256 {actual} ({written} bytes), the manifest lists {entry.sha256} ({entry.size} bytes)",
            )
        return partial
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def _install(partial: Path, blob: Path) -> None:
    """Make a verified partial the blob: read-only (hard links share it, nobody edits a
    checkpoint in place) and renamed atomically."""
    try:
        os.chmod(partial, _READ_ONLY)
        os.replace(partial, blob)
    finally:
        partial.unlink(missing_ok=True)


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
