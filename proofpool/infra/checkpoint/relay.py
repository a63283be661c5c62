"""A checkpoint relay: an HTTP mirror that spares the object store's egress.

Every worker and validator of a pool fetches each new checkpoint at about the same time; read
straight from S3 that is N copies of every shard leaving the bucket. A relay fetches a version
once from its upstream (the object store, or another relay: relays chain into a tree) and
serves it to any number of clients:

    GET /checkpoints/{pool}/{version}/proofpool-checkpoint.json   the manifest, as the upstream has it
    GET /checkpoints/{pool}/{version}/{file}                      one file (Range requests answered)
    GET /healthz                                                  liveness and byte counters

Mirroring is on demand: the first request for a version starts one mirror job (later requests
wait for it); the job reads the manifest, then downloads the files into the same
content-addressed cache as a client's (`fetch.py`), each verified against the manifest before
it becomes a blob, and each served as soon as its blob exists. A relay never serves unverified
bytes. It does not need the chain: it checks files against the manifest, and its clients check
the manifest against the chain, so a relay that lies is caught, demoted and routed around.

Names in requests never become paths: a file is found by looking its name up in the manifest
and serving the blob named by its sha256, so `..`, absolute paths or unknown names cannot reach
a file outside the cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import anyio
import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse

from proofpool.core.errors import ProofpoolError
from proofpool.infra.checkpoint.errors import CheckpointError, Reason
from proofpool.infra.checkpoint.fetch import (
    BLOBS,
    DEFAULT_PARALLEL,
    FetchProgress,
    checkpoint_dir,
    fetch_manifest,
    is_complete,
    materialize_checkpoint,
)
from proofpool.infra.checkpoint.manifest import (
    MANIFEST_NAME,
    MAX_POOL_ID,
    MAX_VERSION,
    CheckpointManifest,
    check_file_name,
    parse_manifest,
)
from proofpool.infra.checkpoint.sources import (
    MANIFEST_HINT_HEADER,
    RelaySource,
    ShardSource,
    SourceError,
    SourcePicker,
    StoreSource,
    check_relay_url,
)
from proofpool.infra.checkpoint.store import CheckpointLocation, checkpoint_prefix
from proofpool.infra.storage import ObjectStore

log = logging.getLogger(__name__)

VERSIONS: Final = "versions"
"""`{cache_dir}/versions/{pool}/{version}.json`: the manifest a relay mirrored for a version."""
_DIGITS = re.compile(r"[0-9]{1,78}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class RelayError(ProofpoolError):
    """A request the relay cannot answer with bytes; becomes `{"error": code, "detail": ...}`."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        self.status, self.code, self.detail = status, code, detail
        super().__init__(f"{code}: {detail}")


class Upstream(Protocol):
    """Where a relay mirrors from: one source per checkpoint version."""

    @property
    def name(self) -> str: ...

    def source(self, pool_id: int, version: int, manifest_sha256: bytes | None) -> ShardSource: ...


@dataclass(frozen=True)
class StoreUpstream:
    """The object store, in the standard layout below `prefix` (empty, or a tenant/test prefix)."""

    store: ObjectStore
    prefix: str = ""

    @property
    def name(self) -> str:
        return f"s3://{self.store.bucket}/{self.prefix}"

    def source(self, pool_id: int, version: int, manifest_sha256: bytes | None) -> ShardSource:
        return StoreSource(
            self.store, CheckpointLocation(self.store.bucket, checkpoint_prefix(pool_id, version, self.prefix))
        )


@dataclass(frozen=True)
class RelayUpstream:
    """Another relay; the client's manifest hint is passed on so the whole chain re-mirrors."""

    base_url: str
    client: httpx.Client

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", check_relay_url(self.base_url))

    @property
    def name(self) -> str:
        return self.base_url

    def source(self, pool_id: int, version: int, manifest_sha256: bytes | None) -> ShardSource:
        return RelaySource(self.base_url, pool_id, version, self.client, manifest_sha256=manifest_sha256)


@dataclass(frozen=True)
class RelayStats:
    """Counters for `/healthz`, operators and benchmarks."""

    upstream: str
    versions: int
    """Versions whose manifest the relay holds (mirrored or being mirrored)."""
    mirror_jobs: int
    """Mirror jobs started since the relay started (one per version, unless one failed)."""
    bytes_from_upstream: int
    bytes_served: int


class MirrorJob:
    """One version being (or having been) mirrored; request threads wait on its events."""

    def __init__(self, pool_id: int, version: int, started_at: float) -> None:
        self.pool_id, self.version = pool_id, version
        self.started_at = started_at
        self.finished_at: float | None = None
        self.raw: bytes | None = None
        self.manifest: CheckpointManifest | None = None
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._manifest_ready = threading.Event()
        self._blob_ready: dict[str, threading.Event] = {}
        self._verified: set[str] = set()

    @property
    def sha256(self) -> bytes | None:
        return hashlib.sha256(self.raw).digest() if self.raw is not None else None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def set_manifest(self, raw: bytes, manifest: CheckpointManifest, verified: set[str]) -> None:
        """The manifest is known; `verified` blobs are already in the cache and servable."""
        with self._lock:
            self.raw, self.manifest = raw, manifest
            self._blob_ready = {entry.sha256: threading.Event() for entry in manifest.files}
            for sha256 in verified & self._blob_ready.keys():
                self._verified.add(sha256)
                self._blob_ready[sha256].set()
        self._manifest_ready.set()

    def blob_done(self, sha256: str) -> None:
        with self._lock:
            self._verified.add(sha256)
            self._blob_ready[sha256].set()

    def finish(self, at: float) -> None:
        self.finished_at = at

    def fail(self, exc: BaseException, at: float) -> None:
        """Wake every waiter; blobs verified before the failure stay servable."""
        with self._lock:
            self.error, self.finished_at = exc, at
            events = list(self._blob_ready.values())
        self._manifest_ready.set()
        for event in events:
            event.set()

    def wait_manifest(self, timeout: float) -> tuple[bytes, CheckpointManifest]:
        if not self._manifest_ready.wait(timeout):
            raise RelayError(503, "mirror_pending", f"pool {self.pool_id} v{self.version} is still being mirrored")
        if self.raw is None or self.manifest is None:
            raise _as_relay_error(self.error)
        return self.raw, self.manifest

    def wait_blob(self, sha256: str, timeout: float) -> None:
        if not self._blob_ready[sha256].wait(timeout):
            raise RelayError(503, "mirror_pending", f"pool {self.pool_id} v{self.version} is still being mirrored")
        with self._lock:
            if sha256 in self._verified:
                return
        raise _as_relay_error(self.error)


def _as_relay_error(exc: BaseException | None) -> RelayError:
    """What a failed mirror means for a client: 404 when the upstream has no such version."""
    if isinstance(exc, RelayError):
        return exc
    if isinstance(exc, CheckpointError) and exc.reason is Reason.MANIFEST_MISSING:
        return RelayError(404, "not_found", f"the upstream has no such checkpoint ({exc.detail})")
    if isinstance(exc, CheckpointError):
        return RelayError(502, "upstream_invalid", str(exc))
    if isinstance(exc, SourceError):
        return RelayError(502, "upstream_unavailable", str(exc))
    return RelayError(500, "mirror_failed", f"mirroring failed: {exc.__class__.__name__}")


class Relay:
    """Mirrors checkpoint versions from `upstream` into `cache_dir` on demand and finds their bytes.

    Thread-safe; the HTTP layer (`create_relay_app`) calls it from worker threads. One process per
    cache directory (the blob cache itself is safe to share, the version index is not).
    """

    def __init__(
        self,
        cache_dir: Path,
        upstream: Upstream,
        *,
        parallel: int = DEFAULT_PARALLEL,
        wait_timeout: float = 50.0,
        retry_failed_after: float = 5.0,
        remirror_after: float = 60.0,
        max_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache_dir = Path(cache_dir)
        self.upstream = upstream
        self.parallel = parallel
        self.wait_timeout = wait_timeout
        """Longest a request waits for a mirror; below clients' 60 s read timeout, so they get a 503."""
        self.retry_failed_after = retry_failed_after
        """A failed mirror is answered from memory this long, so a down upstream is not hammered."""
        self.remirror_after = remirror_after
        """A client expecting another manifest triggers a new mirror only when the last is this old."""
        self.max_bytes = max_bytes
        """Largest checkpoint mirrored (its manifest's files in all); None: no limit."""
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[tuple[int, int], MirrorJob] = {}
        self._started = self._from_upstream = self._served = 0
        (self.cache_dir / BLOBS).mkdir(parents=True, exist_ok=True)

    # --- what the HTTP layer calls ---

    def manifest_path(self, pool_id: int, version: int, expected: bytes | None = None) -> Path:
        """The file holding the manifest mirrored for (pool, version). `expected`, the hash the
        client trusts, makes a relay holding another manifest for that version mirror it again."""
        job = self._job(pool_id, version, expected)
        job.wait_manifest(self.wait_timeout)
        return self._index_path(pool_id, version)

    def file_path(self, pool_id: int, version: int, name: str) -> tuple[Path, int]:
        """The verified blob holding file `name` of (pool, version), and its size."""
        job = self._job(pool_id, version, None)
        _, manifest = job.wait_manifest(self.wait_timeout)
        entry = manifest.entry(name)
        if entry is None:
            raise RelayError(404, "not_found", f"pool {pool_id} v{version} has no file {name!r}")
        job.wait_blob(entry.sha256, self.wait_timeout)
        blob = self.cache_dir / BLOBS / entry.sha256
        try:
            size = blob.stat().st_size
        except FileNotFoundError:
            size = -1
        if size != entry.size:  # pruned behind the relay's back: mirror again on the next request
            with self._lock:
                if self._jobs.get((pool_id, version)) is job:
                    del self._jobs[(pool_id, version)]
            raise RelayError(503, "mirror_pending", f"{name} left the cache; retry")
        return blob, entry.size

    def count_served(self, nbytes: int) -> None:
        with self._lock:
            self._served += nbytes

    def stats(self) -> RelayStats:
        with self._lock:
            return RelayStats(
                upstream=self.upstream.name,
                versions=sum(1 for job in self._jobs.values() if job.raw is not None),
                mirror_jobs=self._started,
                bytes_from_upstream=self._from_upstream,
                bytes_served=self._served,
            )

    # --- mirror jobs ---

    def _job(self, pool_id: int, version: int, expected: bytes | None) -> MirrorJob:
        key = (pool_id, version)
        with self._lock:
            now = self._clock()
            job = self._jobs.get(key)
            if job is not None and job.failed and now - (job.finished_at or now) >= self.retry_failed_after:
                job = None
            if job is not None and expected is not None and self._stale(job, expected, now):
                log.info("pool %d v%d: a client expects another manifest; mirroring again", pool_id, version)
                job = None
            if job is None:
                job = self._load(pool_id, version, expected)
            if job is None:
                job = MirrorJob(pool_id, version, now)
                self._started += 1
                thread = threading.Thread(
                    target=self._mirror, args=(job, expected), name=f"relay-mirror-{pool_id}-{version}", daemon=True
                )
                thread.start()
            self._jobs[key] = job
            return job

    def _stale(self, job: MirrorJob, expected: bytes, now: float) -> bool:
        """A finished job holding another manifest than `expected`, old enough to mirror again
        (a client cannot make the relay re-mirror in a loop by sending random hashes)."""
        return (
            job.raw is not None
            and job.sha256 != expected
            and job.finished_at is not None
            and now - job.started_at >= self.remirror_after
        )

    def _load(self, pool_id: int, version: int, expected: bytes | None) -> MirrorJob | None:
        """A finished job for a version mirrored before a restart, if its checkpoint is complete."""
        try:
            raw = self._index_path(pool_id, version).read_bytes()
            manifest = parse_manifest(raw)
        except (OSError, CheckpointError):
            return None
        digest = hashlib.sha256(raw).digest()
        if (expected is not None and digest != expected) or not is_complete(checkpoint_dir(self.cache_dir, digest)):
            return None
        job = MirrorJob(pool_id, version, self._clock())
        job.set_manifest(raw, manifest, {entry.sha256 for entry in manifest.files})
        job.finish(self._clock())
        return job

    def _mirror(self, job: MirrorJob, expected: bytes | None) -> None:
        """The job's thread: manifest, then files (each servable once verified), then assembly."""
        try:
            picker = SourcePicker(store=self.upstream.source(job.pool_id, job.version, expected))
            raw = fetch_manifest(picker, None)
            manifest = parse_manifest(raw)
            if (manifest.pool_id, manifest.version) != (job.pool_id, job.version):
                raise RelayError(
                    502,
                    "upstream_invalid",
                    f"the upstream's manifest for pool {job.pool_id} v{job.version} is that of "
                    f"pool {manifest.pool_id} v{manifest.version}",
                )
            self._write_index(job.pool_id, job.version, raw)
            blobs = self.cache_dir / BLOBS
            cached = {e.sha256 for e in manifest.files if _size(blobs / e.sha256) == e.size}
            job.set_manifest(raw, manifest, cached)
            with self._lock:
                self._from_upstream += len(raw)

            def on_file(done: FetchProgress) -> None:
                entry = manifest.entry(done.path)
                if entry is None:
                    return
                if done.downloaded:
                    with self._lock:
                        self._from_upstream += entry.size
                job.blob_done(entry.sha256)

            materialize_checkpoint(
                picker, raw, self.cache_dir, on_file, parallel=self.parallel, max_bytes=self.max_bytes
            )
            job.finish(self._clock())
            log.info("mirrored pool %d v%d (%d files)", job.pool_id, job.version, len(manifest.files))
        except Exception as exc:  # the thread's boundary: waiters turn it into a 4xx/5xx answer
            expected = isinstance(exc, ProofpoolError)  # upstream down or lying: one line; a bug: the traceback
            log.warning("mirroring pool %d v%d failed: %s", job.pool_id, job.version, exc, exc_info=not expected)
            job.fail(exc, self._clock())

    def _index_path(self, pool_id: int, version: int) -> Path:
        return self.cache_dir / VERSIONS / str(pool_id) / f"{version}.json"

    def _write_index(self, pool_id: int, version: int, raw: bytes) -> None:
        path = self._index_path(pool_id, version)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=".partial-", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(raw)
            os.replace(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


# --- HTTP ---


class _BlobResponse(FileResponse):
    """A file answer in 1 MiB chunks: Starlette's 64 KiB cost a thread hop per chunk."""

    chunk_size = 1 << 20


class _CountServed:
    """ASGI middleware counting the body bytes actually sent (partial answers included)."""

    def __init__(self, app: Any, relay: Relay) -> None:
        self.app, self.relay = app, relay

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counting(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                self.relay.count_served(len(message.get("body", b"")))
            await send(message)

        await self.app(scope, receive, counting)


def _coordinates(pool: str, version: str) -> tuple[int, int]:
    if not (_DIGITS.fullmatch(pool) and _DIGITS.fullmatch(version)):
        raise RelayError(400, "coordinates_invalid", "pool and version are decimal integers")
    pool_id, number = int(pool), int(version)
    if pool_id > MAX_POOL_ID or number > MAX_VERSION:
        raise RelayError(400, "coordinates_invalid", "pool or version out of range")
    return pool_id, number


def _hint(value: str | None) -> bytes | None:
    if value is None:
        return None
    if not _SHA256_HEX.fullmatch(value):
        raise RelayError(400, "hint_invalid", f"{MANIFEST_HINT_HEADER} is 64 lower-case hex digits")
    return bytes.fromhex(value)


def create_relay_app(relay: Relay, *, max_waiting: int = 256) -> FastAPI:
    """The relay's HTTP API. Requests wait for mirrors in worker threads (at most `max_waiting`
    at once), so the event loop keeps streaming files meanwhile."""
    limiter: dict[str, anyio.CapacityLimiter] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        limiter["waits"] = anyio.CapacityLimiter(max_waiting)
        yield

    async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, *args, limiter=limiter.get("waits"))

    router = APIRouter(tags=["relay"])

    @router.get("/healthz", operation_id="relay-healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", **asdict(relay.stats())}

    @router.get("/checkpoints/{pool}/{version}/{name}", operation_id="relay-file")
    @router.head("/checkpoints/{pool}/{version}/{name}", operation_id="relay-file-head")
    async def checkpoint_file(pool: str, version: str, name: str, request: Request) -> FileResponse:
        """A checkpoint's manifest or one of its files, mirrored from upstream on first request."""
        pool_id, number = _coordinates(pool, version)
        if name == MANIFEST_NAME:
            expected = _hint(request.headers.get(MANIFEST_HINT_HEADER))
            path = await in_thread(relay.manifest_path, pool_id, number, expected)
            return _BlobResponse(path, media_type="application/json")
        try:
            check_file_name(name)
        except CheckpointError as exc:
            raise RelayError(400, "name_invalid", exc.detail) from exc
        blob, _ = await in_thread(relay.file_path, pool_id, number, name)
        return _BlobResponse(blob, media_type="application/octet-stream")

    app = FastAPI(title="proofpool relay", lifespan=lifespan)

    @app.exception_handler(RelayError)
    async def relay_error(_: Request, exc: RelayError) -> JSONResponse:
        headers = {"Retry-After": "5"} if exc.status == 503 else None
        return JSONResponse({"error": exc.code, "detail": exc.detail}, status_code=exc.status, headers=headers)

    app.include_router(router)
    app.add_middleware(_CountServed, relay=relay)
    return app
