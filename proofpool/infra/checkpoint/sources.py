"""Where a checkpoint's bytes come from (the object store or HTTP relays), and whom to ask next.

A worker or validator needs one checkpoint: its manifest and its files. The object store that the
on-chain URI names has them all, but every node reading from it multiplies the store's egress;
relays (`proofpool relay serve`) mirror versions from the store, or from another relay, and serve
them instead. No source is trusted: the fetch checks the manifest against the on-chain hash and
each file against the manifest, whoever served it. What a source can do wrong is be slow, fail,
or lie, and the `SourcePicker` learns which from what it observed:

    score(relay) = success rate (EWMA) x bandwidth (EWMA, bytes/s) / (1 + transfers in flight)

Untried relays are tried first, a small share of picks explores a relay other than the best, a
relay that served bytes failing the sha256 check is demoted (not asked again for a while), and
the object store is always the last resort: asked only when no relay is usable.

Both kinds of source speak the same small protocol (`ShardSource`): the manifest's bytes, and one
file's bytes as a stream from a byte offset, which is how an interrupted download resumes
(an HTTP `Range` request to a relay, a ranged GET to S3).
"""

from __future__ import annotations

import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final, Protocol

import httpx

from proofpool.core.errors import ConfigError, ServiceUnavailable
from proofpool.infra.checkpoint.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, MAX_POOL_ID, MAX_VERSION
from proofpool.infra.checkpoint.store import CheckpointLocation
from proofpool.infra.storage import ObjectNotFound, ObjectStore, ObjectTooLarge, RangeNotSatisfiable, StorageError

log = logging.getLogger(__name__)

CHUNK_SIZE: Final = 1 << 20
"""Bytes per read from the store: large enough to keep Python's per-chunk cost small."""
MANIFEST_HINT_HEADER: Final = "X-Proofpool-Manifest-Sha256"
"""Sent with a manifest request: the hash the client expects, so a relay holding an older copy
of that version (overwritten in the store before it was anchored) mirrors it again."""
DEFAULT_TIMEOUT: Final = httpx.Timeout(connect=5.0, read=60.0, write=30.0, pool=60.0)
"""Relay timeouts; the read timeout covers a relay mirroring a shard from its upstream first."""
RELAY_PATH: Final = "/checkpoints/{pool}/{version}/{name}"
_LAYOUT = re.compile(r"(?:.+/)?pools/([0-9]{1,78})/checkpoints/([0-9]{1,10})/")


class SourceError(ServiceUnavailable):
    """One source could not deliver (unreachable, refused, cut short). The fetch asks another
    source; a caller that sees it after every source failed retries later."""

    def __init__(self, source: str, detail: str) -> None:
        self.source = source
        self.detail = detail
        super().__init__(f"{source}: {detail}")


class SourceMissing(SourceError):
    """The source says it has no such checkpoint or file."""


class SourceCorrupt(SourceError):
    """The source sent bytes that cannot be what was asked for (wrong length, wrong hash, a
    range it was not asked for): it is broken or hostile, and the picker demotes it."""


class ShardSource(Protocol):
    """One place that can serve one checkpoint: its manifest and its files, by name."""

    @property
    def name(self) -> str:
        """How logs and stats name the source (a URI or a base URL)."""
        ...

    def fetch_manifest(self) -> bytes:
        """The manifest's bytes, unchecked (at most `MAX_MANIFEST_BYTES`, else `SourceCorrupt`)."""
        ...

    def read_file(self, name: str, size: int, start: int = 0) -> Iterator[bytes]:
        """The bytes of file `name` (listed with `size` bytes) from offset `start` to its end, in
        chunks; `SourceMissing`, `SourceCorrupt` or `SourceError` as it goes. Close it when done."""
        ...


class StoreSource:
    """A checkpoint in the object store, at the location its on-chain URI names."""

    def __init__(self, store: ObjectStore, location: CheckpointLocation, *, chunk_size: int = CHUNK_SIZE) -> None:
        self.store = store
        self.location = location
        self.chunk_size = chunk_size

    @property
    def name(self) -> str:
        return self.location.uri

    def fetch_manifest(self) -> bytes:
        try:
            return self.store.get_object(self.location.manifest_key, max_bytes=MAX_MANIFEST_BYTES)
        except ObjectNotFound as exc:
            raise SourceMissing(self.name, f"no manifest at {self.location.uri}{MANIFEST_NAME}") from exc
        except ObjectTooLarge as exc:
            raise SourceCorrupt(self.name, f"the manifest is too large: {exc}") from exc
        except StorageError as exc:
            raise SourceError(self.name, str(exc)) from exc

    def read_file(self, name: str, size: int, start: int = 0) -> Iterator[bytes]:
        """A ranged GET (`Range: bytes=start-`) streamed in chunks."""
        key = self.location.file_key(name)
        try:
            stream = self.store.open_range(key, start)
        except ObjectNotFound as exc:
            raise SourceMissing(self.name, f"{name} is not in the store at {self.location.uri}") from exc
        except RangeNotSatisfiable as exc:
            raise SourceCorrupt(self.name, f"{name} in the store is shorter than {start + 1} bytes") from exc
        except StorageError as exc:
            raise SourceError(self.name, str(exc)) from exc
        with stream:
            if start + stream.length > size:
                raise SourceCorrupt(self.name, f"{name} in the store is larger than the {size} bytes listed")
            try:
                yield from stream.chunks(self.chunk_size)
            except StorageError as exc:
                raise SourceError(self.name, f"reading {key} failed: {exc}") from exc


class RelaySource:
    """A checkpoint served by a relay at `GET {base_url}/checkpoints/{pool}/{version}/{name}`."""

    def __init__(
        self,
        base_url: str,
        pool_id: int,
        version: int,
        client: httpx.Client,
        *,
        manifest_sha256: bytes | None = None,
    ) -> None:
        self.base_url = check_relay_url(base_url)
        if not (0 <= pool_id <= MAX_POOL_ID and 0 <= version <= MAX_VERSION):
            raise ValueError(f"pool id {pool_id} or version {version} out of range")
        self.pool_id, self.version = pool_id, version
        self.client = client
        self.manifest_sha256 = manifest_sha256

    @property
    def name(self) -> str:
        return self.base_url

    def url(self, name: str) -> str:
        return self.base_url + RELAY_PATH.format(pool=self.pool_id, version=self.version, name=name)

    def fetch_manifest(self) -> bytes:
        headers = {MANIFEST_HINT_HEADER: self.manifest_sha256.hex()} if self.manifest_sha256 else {}
        body = bytearray()
        for chunk in self._stream(MANIFEST_NAME, headers, MAX_MANIFEST_BYTES, 0):
            body += chunk
            if len(body) > MAX_MANIFEST_BYTES:
                raise SourceCorrupt(self.name, f"the manifest is over {MAX_MANIFEST_BYTES} bytes")
        return bytes(body)

    def read_file(self, name: str, size: int, start: int = 0) -> Iterator[bytes]:
        headers = {"Range": f"bytes={start}-"} if start else {}
        return self._stream(name, headers, size, start)

    def _stream(self, name: str, headers: dict[str, str], size: int, start: int) -> Iterator[bytes]:
        url = self.url(name)
        try:
            with self.client.stream("GET", url, headers=headers) as reply:
                self._check_reply(reply, name, size, start)
                yield from reply.iter_bytes()  # as received: a buffered chunk would be lost when the peer cuts
        except httpx.HTTPError as exc:
            raise SourceError(self.name, f"GET {url} failed: {exc.__class__.__name__}: {exc}") from exc

    def _check_reply(self, reply: httpx.Response, name: str, size: int, start: int) -> None:
        """Refuse an answer before reading its body unless it is the bytes asked for."""
        status = reply.status_code
        if status == 404:
            raise SourceMissing(self.name, f"the relay has no {name} for pool {self.pool_id} v{self.version}")
        if status == 416:
            raise SourceCorrupt(self.name, f"the relay says {name} is shorter than {start + 1} bytes")
        if status != (206 if start else 200):
            raise SourceError(self.name, f"GET {name} answered {status} {reply.reason_phrase}")
        if start:
            expected = f"bytes {start}-{size - 1}/{size}"
            if reply.headers.get("content-range") != expected:
                raise SourceCorrupt(
                    self.name, f"{name}: Content-Range {reply.headers.get('content-range')!r}, asked {expected!r}"
                )
        length = reply.headers.get("content-length")
        if name != MANIFEST_NAME and length is not None and length != str(size - start):
            raise SourceCorrupt(self.name, f"{name}: Content-Length {length}, the manifest lists {size - start}")


def check_relay_url(url: str) -> str:
    """`url` without a trailing slash if it is an http(s) base URL; `ConfigError` otherwise."""
    try:
        parsed = httpx.URL(url) if isinstance(url, str) else None
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host or parsed.query:
        # No square brackets: the CLI prints error messages as rich markup.
        raise ConfigError(f"relay URL {url!r} is not an http or https base URL such as http://10.0.0.5:8790")
    return url.rstrip("/")


def relay_coordinates(location: CheckpointLocation) -> tuple[int, int] | None:
    """(pool, version) of a checkpoint stored in the standard layout (`.../pools/P/checkpoints/V/`),
    which is how relays name it; None for a URI in another layout (then only the store serves it)."""
    match = _LAYOUT.fullmatch(location.prefix)
    if match is None:
        return None
    pool_id, version = int(match.group(1)), int(match.group(2))
    return (pool_id, version) if pool_id <= MAX_POOL_ID and version <= MAX_VERSION else None


def relay_client(parallel: int) -> httpx.Client:
    """One HTTP client for all relays of a fetch, with a connection per download thread."""
    limits = httpx.Limits(max_connections=max(4, 2 * parallel), max_keepalive_connections=max(4, 2 * parallel))
    return httpx.Client(timeout=DEFAULT_TIMEOUT, limits=limits, follow_redirects=False)


def build_picker(
    store: ObjectStore,
    location: CheckpointLocation,
    relays: Sequence[str],
    client: httpx.Client,
    *,
    manifest_sha256: bytes | None = None,
    rng: random.Random | None = None,
) -> SourcePicker:
    """A picker over `relays` (base URLs) for this checkpoint, with the store as last resort."""
    coordinates = relay_coordinates(location)
    if relays and coordinates is None:
        log.warning("checkpoint %s is not in the pools/P/checkpoints/V/ layout: relays skipped", location.uri)
    sources: list[ShardSource] = []
    if coordinates is not None:
        pool_id, version = coordinates
        sources = [RelaySource(url, pool_id, version, client, manifest_sha256=manifest_sha256) for url in relays]
    return SourcePicker(sources, store=StoreSource(store, location), rng=rng)


@dataclass(frozen=True)
class SourceStats:
    """What a picker observed of one source."""

    name: str
    success_rate: float
    """EWMA of outcomes (1 delivered, 0 failed or corrupt), starting at 1."""
    bandwidth: float | None
    """EWMA of bytes/s over transfers of at least `MIN_SAMPLE_BYTES`; None until measured."""
    attempts: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    corrupt: int = 0
    bytes_fetched: int = 0
    in_flight: int = 0
    demoted_until: float = 0.0
    """Clock time before which the source is not picked (0: never demoted)."""


class SourcePicker:
    """Chooses the source of each transfer from what earlier transfers observed. Thread-safe.

    `pick` returns the best usable relay, then the store; every pick is closed by exactly one of
    `record_success`, `record_failure`, `record_corrupt` or (no verdict) `release`. A relay is usable unless excluded by
    the caller or demoted: after `failure_limit` consecutive failures for `failure_cooldown`
    seconds (a dead relay costs a few quick refusals, not one per file), after serving bad bytes
    for `corrupt_cooldown` seconds, doubled at each repeat offence. Without a store (a relay's own
    upstream), demoted relays are still asked when nothing else is left.
    """

    MIN_SAMPLE_BYTES: Final = 256 * 1024
    """Smaller transfers measure latency, not bandwidth: they update the success rate only."""

    def __init__(
        self,
        relays: Sequence[ShardSource] = (),
        *,
        store: ShardSource | None = None,
        alpha: float = 0.3,
        explore: float = 0.05,
        failure_limit: int = 2,
        failure_cooldown: float = 30.0,
        corrupt_cooldown: float = 600.0,
        default_bandwidth: float = 100e6,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < alpha <= 1 or not 0 <= explore <= 1 or failure_limit < 1:
            raise ValueError("alpha must be in (0, 1], explore in [0, 1], failure_limit >= 1")
        names = [source.name for source in relays] + ([store.name] if store is not None else [])
        if len(set(names)) != len(names):
            raise ValueError(f"sources must have distinct names, got {names}")
        self.relays = tuple(relays)
        self.store = store
        self.alpha, self.explore = alpha, explore
        self.failure_limit = failure_limit
        self.failure_cooldown, self.corrupt_cooldown = failure_cooldown, corrupt_cooldown
        self.default_bandwidth = default_bandwidth
        self._rng = rng or random.Random()
        self._clock = clock
        self._lock = threading.Lock()
        self._stats = {name: SourceStats(name=name, success_rate=1.0, bandwidth=None) for name in names}

    @property
    def sources(self) -> tuple[ShardSource, ...]:
        return (*self.relays, *([self.store] if self.store is not None else []))

    def stats(self, source: ShardSource) -> SourceStats:
        with self._lock:
            return self._stats[source.name]

    def snapshot(self) -> list[SourceStats]:
        """Every source's stats, relays first, for logs and benchmarks."""
        with self._lock:
            return [self._stats[source.name] for source in self.sources]

    def score(self, source: ShardSource) -> float:
        """success rate x bandwidth / (1 + in flight); an unmeasured relay counts as fast as the
        fastest measured one (so it gets tried), or `default_bandwidth` when none is measured."""
        with self._lock:
            return self._score(self._stats[source.name], self._best_bandwidth())

    def order(self, exclude: Sequence[ShardSource] = ()) -> list[ShardSource]:
        """Usable relays best first, then the store (or, without one, demoted relays)."""
        with self._lock:
            return self._order({source.name for source in exclude}, explore=False)

    def pick(self, exclude: Sequence[ShardSource] = ()) -> ShardSource | None:
        """The source for the next transfer (counted in flight), or None when all are excluded."""
        with self._lock:
            ordered = self._order({source.name for source in exclude}, explore=True)
            if not ordered:
                return None
            chosen = ordered[0]
            stats = self._stats[chosen.name]
            self._stats[chosen.name] = replace(stats, attempts=stats.attempts + 1, in_flight=stats.in_flight + 1)
            return chosen

    def release(self, source: ShardSource) -> None:
        """The transfer ended without a verdict on the source (cancelled, or a local fault)."""
        with self._lock:
            stats = self._stats[source.name]
            self._stats[source.name] = replace(stats, in_flight=max(0, stats.in_flight - 1))

    def record_success(self, source: ShardSource, nbytes: int, seconds: float) -> None:
        """The transfer delivered `nbytes` verified bytes in `seconds`."""
        with self._lock:
            stats = self._stats[source.name]
            bandwidth = stats.bandwidth
            if nbytes >= self.MIN_SAMPLE_BYTES:
                sample = nbytes / max(seconds, 1e-6)
                bandwidth = sample if bandwidth is None else (1 - self.alpha) * bandwidth + self.alpha * sample
            self._stats[source.name] = replace(
                stats,
                success_rate=(1 - self.alpha) * stats.success_rate + self.alpha,
                bandwidth=bandwidth,
                consecutive_failures=0,
                bytes_fetched=stats.bytes_fetched + nbytes,
                in_flight=max(0, stats.in_flight - 1),
            )

    def record_failure(self, source: ShardSource) -> None:
        """The transfer failed (unreachable, missing, cut short for good)."""
        with self._lock:
            stats = self._stats[source.name]
            streak = stats.consecutive_failures + 1
            demoted = stats.demoted_until
            if streak >= self.failure_limit and source is not self.store:
                demoted = max(demoted, self._clock() + self.failure_cooldown)
            self._stats[source.name] = replace(
                stats,
                success_rate=(1 - self.alpha) * stats.success_rate,
                failures=stats.failures + 1,
                consecutive_failures=streak,
                in_flight=max(0, stats.in_flight - 1),
                demoted_until=demoted,
            )
            if demoted > stats.demoted_until:
                log.warning("relay %s demoted for %.0f s after %d failures", source.name, self.failure_cooldown, streak)

    def record_corrupt(self, source: ShardSource) -> None:
        """The transfer delivered bytes that failed verification: demote the source."""
        with self._lock:
            stats = self._stats[source.name]
            cooldown = self.corrupt_cooldown * 2**stats.corrupt
            self._stats[source.name] = replace(
                stats,
                success_rate=(1 - self.alpha) * stats.success_rate,
                failures=stats.failures + 1,
                corrupt=stats.corrupt + 1,
                in_flight=max(0, stats.in_flight - 1),
                demoted_until=self._clock() + cooldown if source is not self.store else 0.0,
            )
        if source is not self.store:
            log.warning("relay %s served bytes that fail verification: demoted for %.0f s", source.name, cooldown)

    # --- internals (called with the lock held) ---

    def _best_bandwidth(self) -> float:
        measured = [s.bandwidth for s in self._stats.values() if s.bandwidth is not None]
        return max(measured, default=self.default_bandwidth)

    def _score(self, stats: SourceStats, best_bandwidth: float) -> float:
        bandwidth = stats.bandwidth if stats.bandwidth is not None else best_bandwidth
        return stats.success_rate * bandwidth / (1 + stats.in_flight)

    def _order(self, excluded: set[str], *, explore: bool) -> list[ShardSource]:
        now = self._clock()
        candidates = [r for r in self.relays if r.name not in excluded]
        usable = [r for r in candidates if self._stats[r.name].demoted_until <= now]
        best = self._best_bandwidth()

        def rank(relay: ShardSource) -> tuple[float, bool, float]:
            # Untried relays first among equals; ties broken at random so parallel first picks spread.
            stats = self._stats[relay.name]
            return (self._score(stats, best), stats.attempts == 0, self._rng.random())

        usable.sort(key=rank, reverse=True)
        if explore and len(usable) > 1 and self._rng.random() < self.explore:
            usable.insert(0, usable.pop(self._rng.randrange(1, len(usable))))
        if self.store is not None:
            return usable + ([self.store] if self.store.name not in excluded else [])
        demoted = sorted((r for r in candidates if r not in usable), key=lambda r: self._stats[r.name].demoted_until)
        return usable + demoted
