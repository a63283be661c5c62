"""The source picker: success rate x bandwidth, untried relays first, demotion of relays that fail
or lie, the store as last resort; the small parsers relays depend on; and the fetch loop over
sources (resume, fallback, errors) with in-memory sources."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from proofpool.core.errors import ConfigError, ServiceUnavailable
from proofpool.infra.checkpoint import (
    MANIFEST_NAME,
    CheckpointError,
    CheckpointLocation,
    CheckpointManifest,
    FetchProgress,
    Reason,
    ShardEntry,
    SourcePicker,
    fetch_checkpoint,
)
from proofpool.infra.checkpoint.fetch import MAX_RESUMES
from proofpool.infra.checkpoint.sources import SourceError, SourceMissing, check_relay_url, relay_coordinates

MB = 1_000_000


@dataclass(frozen=True)
class FakeSource:
    """Only the name matters to the picker."""

    name: str

    def fetch_manifest(self) -> bytes:
        raise NotImplementedError

    def read_file(self, name: str, size: int, start: int = 0) -> Iterator[bytes]:
        raise NotImplementedError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


A, B, STORE = FakeSource("http://a"), FakeSource("http://b"), FakeSource("s3://bucket/pools/1/checkpoints/1/")


def picker(relays=(A, B), store=STORE, **kwargs) -> SourcePicker:
    kwargs.setdefault("explore", 0.0)
    return SourcePicker(relays, store=store, rng=random.Random(0), **kwargs)


def transfer(p: SourcePicker, expected: FakeSource, nbytes: int = 10 * MB, seconds: float = 1.0) -> None:
    """Pick (asserting who is picked) and record a successful transfer."""
    chosen = p.pick()
    assert chosen == expected
    p.record_success(chosen, nbytes, seconds)


@pytest.mark.parametrize("seed", range(20))  # ties are broken at random: no seed may pick the measured one
def test_an_untried_relay_is_tried_before_a_measured_one(seed):
    p = SourcePicker((A, B), store=STORE, explore=0.0, rng=random.Random(seed))
    first = p.pick()
    assert first in (A, B)
    p.record_success(first, 10 * MB, 1.0)
    other = B if first == A else A
    transfer(p, other)  # as fast as the fastest measured one, and untried: its turn
    assert p.stats(A).bandwidth == p.stats(B).bandwidth == 10 * MB


def test_the_best_success_rate_times_bandwidth_wins():
    p = picker(failure_limit=3)
    for relay, seconds in ((A, 0.1), (B, 0.2)):  # A: 100 MB/s, B: 50 MB/s
        p.record_success(relay, 10 * MB, seconds)
    assert p.score(A) == pytest.approx(100 * MB) and p.score(B) == pytest.approx(50 * MB)
    transfer(p, A, seconds=0.1)
    for _ in range(2):  # A's success rate: 1.0 -> 0.7 -> 0.49; 0.49 x 100 < 1.0 x 50
        assert p.pick() == A
        p.record_failure(A)
    assert p.stats(A).success_rate == pytest.approx(0.49)
    assert p.order() == [B, A, STORE]
    transfer(p, B, seconds=0.2)


def test_the_store_comes_last_even_when_it_is_the_fastest():
    p = picker(relays=(A,))
    p.record_success(STORE, 1000 * MB, 1.0)
    p.record_success(A, 1 * MB, 1.0)
    assert p.order() == [A, STORE]
    transfer(p, A)


def test_a_relay_that_served_bad_bytes_is_demoted_until_its_cooldown_passes():
    clock = Clock()
    p = picker(clock=clock, corrupt_cooldown=600.0)
    p.record_success(A, 10 * MB, 0.1)
    p.record_success(B, 10 * MB, 1.0)
    assert p.pick() == A
    p.record_corrupt(A)
    stats = p.stats(A)
    assert (stats.corrupt, stats.demoted_until, stats.in_flight) == (1, 1600.0, 0)
    assert p.order() == [B, STORE]
    clock.now = 1599.0
    assert p.pick() == B
    p.record_corrupt(B)
    assert p.pick() == STORE  # both relays demoted: the last resort
    p.record_success(STORE, 10 * MB, 1.0)
    clock.now = 1600.0
    assert p.pick() == A  # served its time
    p.record_corrupt(A)
    assert p.stats(A).demoted_until == 1600.0 + 1200.0  # a repeat offence doubles the cooldown


def test_consecutive_failures_demote_a_relay_for_a_while_and_a_success_resets_the_streak():
    clock = Clock()
    p = picker(relays=(A,), clock=clock, failure_limit=2, failure_cooldown=30.0)
    p.record_failure(A)
    p.record_success(A, 1000, 0.01)  # too small to measure bandwidth, but a success
    assert p.stats(A).consecutive_failures == 0 and p.stats(A).bandwidth is None
    p.record_failure(A)
    assert p.pick() == A  # one failure in a row: still asked
    p.record_failure(A)
    assert p.stats(A).demoted_until == 1030.0
    assert p.pick() == STORE
    p.release(STORE)
    clock.now = 1030.0
    assert p.pick() == A


def test_the_store_is_never_demoted():
    p = picker(relays=(), failure_limit=1)
    for record in (p.record_failure, p.record_corrupt):
        assert p.pick() == STORE
        record(STORE)
    assert p.stats(STORE).demoted_until == 0.0
    assert p.pick() == STORE


def test_pick_skips_excluded_sources_and_returns_none_when_all_are():
    p = picker()
    assert p.pick([A, STORE]) == B
    p.release(B)
    assert p.pick([A, B]) == STORE
    p.release(STORE)
    assert p.pick([A, B, STORE]) is None


def test_transfers_in_flight_spread_over_relays_of_equal_bandwidth():
    p = picker()
    for relay in (A, B):
        p.record_success(relay, 10 * MB, 1.0)
    first, second = p.pick(), p.pick()
    assert {first, second} == {A, B}
    assert p.stats(first).in_flight == 1
    p.record_success(first, 10 * MB, 1.0)
    assert p.stats(first).in_flight == 0


@pytest.mark.parametrize("explore, picks_of_the_slower", [(0.0, 0), (1.0, 50)])
def test_exploration_sometimes_picks_a_relay_other_than_the_best(explore, picks_of_the_slower):
    p = picker(explore=explore)
    p.record_success(A, 10 * MB, 0.1)
    p.record_success(B, 10 * MB, 1.0)
    picks = []
    for _ in range(50):
        chosen = p.pick()
        picks.append(chosen)
        p.release(chosen)
    assert picks.count(B) == picks_of_the_slower


def test_a_few_exploring_picks_keep_the_best_relay_in_front():
    p = SourcePicker((A, B), store=STORE, explore=0.1, rng=random.Random(1))
    p.record_success(A, 10 * MB, 0.1)
    p.record_success(B, 10 * MB, 1.0)
    picks = []
    for _ in range(200):
        chosen = p.pick()
        picks.append(chosen)
        p.release(chosen)
    assert 5 <= picks.count(B) <= 40 and STORE not in picks


def test_without_a_store_a_demoted_relay_is_still_the_last_resort():
    p = picker(relays=(A,), store=None)
    assert p.pick() == A
    p.record_corrupt(A)
    assert p.pick() == A
    p.release(A)
    assert p.pick([A]) is None


def test_bandwidth_is_an_ewma_of_large_transfers_only():
    p = picker()
    p.record_success(A, 1 * MB, 1.0)
    p.record_success(A, 3 * MB, 1.0)
    assert p.stats(A).bandwidth == pytest.approx(0.7 * 1 * MB + 0.3 * 3 * MB)
    p.record_success(A, SourcePicker.MIN_SAMPLE_BYTES - 1, 1e-6)
    assert p.stats(A).bandwidth == pytest.approx(1.6 * MB)
    assert p.stats(A).bytes_fetched == 4 * MB + SourcePicker.MIN_SAMPLE_BYTES - 1


def test_the_snapshot_lists_relays_then_the_store():
    assert [s.name for s in picker().snapshot()] == ["http://a", "http://b", STORE.name]


@pytest.mark.parametrize(
    "kwargs",
    [{"alpha": 0.0}, {"alpha": 1.5}, {"explore": -0.1}, {"failure_limit": 0}, {"relays": (A, A)}, {"store": A}],
)
def test_nonsense_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        picker(**kwargs)


@pytest.mark.parametrize(
    "prefix, expected",
    [
        ("pools/1/checkpoints/2/", (1, 2)),
        ("test/abc/pools/17/checkpoints/0/", (17, 0)),
        ("pools/1/checkpoints/4294967296/", None),  # versions are uint32
        ("models/1/2/", None),
        ("pools/x/checkpoints/2/", None),
        ("pools/1/checkpoints/2/extra/", None),
    ],
)
def test_relays_name_a_checkpoint_by_pool_and_version_of_the_standard_layout(prefix, expected):
    assert relay_coordinates(CheckpointLocation("bucket", prefix)) == expected


@pytest.mark.parametrize(
    "url, expected",
    [
        ("http://127.0.0.1:8790", "http://127.0.0.1:8790"),
        ("https://relay.example/base/", "https://relay.example/base"),
    ],
)
def test_a_relay_url_is_an_http_base_url(url, expected):
    assert check_relay_url(url) == expected


@pytest.mark.parametrize("url", ["ftp://relay", "relay:8790", "http://", "http://relay?x=1", "", "http://[::1"])
def test_anything_else_is_refused_as_a_relay_url(url):
    with pytest.raises(ConfigError):
        check_relay_url(url)


# --- the fetch loop over sources, with in-memory sources ---


class MemorySource:
    """Serves files from a dict; `cut` maps a name to how many bytes each response delivers before
    the connection drops; `down` makes every request fail; records (name, start) per request."""

    def __init__(self, name: str, files: dict[str, bytes], *, cut: dict[str, int] | None = None, down: bool = False):
        self.name, self.files, self.cut, self.down = name, files, cut or {}, down
        self.requests: list[tuple[str, int]] = []

    def fetch_manifest(self) -> bytes:
        if self.down:
            raise SourceError(self.name, "connection refused")
        return self.files[MANIFEST_NAME]

    def read_file(self, name: str, size: int, start: int = 0) -> Iterator[bytes]:
        self.requests.append((name, start))
        if self.down:
            raise SourceError(self.name, "connection refused")
        if name not in self.files:
            raise SourceMissing(self.name, f"no {name}")
        body = self.files[name][start:]
        if name in self.cut:
            yield body[: self.cut[name]]
            raise SourceError(self.name, "connection reset")
        yield body


def memory_checkpoint(files: dict[str, bytes]) -> tuple[dict[str, bytes], bytes]:
    entries = tuple(
        ShardEntry(path=name, sha256=hashlib.sha256(body).hexdigest(), size=len(body)) for name, body in files.items()
    )
    raw = CheckpointManifest(pool_id=1, version=1, files=entries).to_bytes()
    return {**files, MANIFEST_NAME: raw}, raw


FILES = {"a.safetensors": b"a" * 5000, "b.safetensors": b"b" * 7000, "same.json": b"{}", "same-too.json": b"{}"}


def test_identical_files_are_fetched_once_and_reported_for_each_name(tmp_path):
    files, raw = memory_checkpoint(FILES)
    relay = MemorySource("http://r", files)
    seen: list[FetchProgress] = []
    path = fetch_checkpoint(picker((relay,), None), hashlib.sha256(raw).digest(), tmp_path, seen.append, parallel=2)
    assert all((path / name).read_bytes() == body for name, body in FILES.items())
    assert sorted(name for name, _ in relay.requests) == ["a.safetensors", "b.safetensors", "same-too.json"]
    assert sorted(p.path for p in seen) == sorted(FILES)
    assert [p.files_done for p in seen] == [1, 2, 3, 4]
    assert sum(p.downloaded for p in seen) == 3 and seen[-1].downloaded_bytes == 5000 + 7000 + 2


def test_a_transfer_cut_repeatedly_resumes_while_it_makes_progress(tmp_path):
    files, raw = memory_checkpoint(FILES)
    relay = MemorySource("http://r", files, cut={"b.safetensors": 1000})
    store = MemorySource("s3://b/p/", files)
    p = picker((relay,), store)
    fetch_checkpoint(p, hashlib.sha256(raw).digest(), tmp_path, parallel=1)
    assert [start for name, start in relay.requests if name == "b.safetensors"] == list(range(0, 7000, 1000))
    assert store.requests == [] and p.stats(relay).failures == 0


def test_a_transfer_cut_more_often_than_the_resume_budget_goes_to_the_next_source(tmp_path):
    files, raw = memory_checkpoint(FILES)
    relay = MemorySource("http://r", files, cut={"b.safetensors": 100})  # 70 pieces: over the budget
    store = MemorySource("s3://b/p/", files)
    path = fetch_checkpoint(picker((relay,), store), hashlib.sha256(raw).digest(), tmp_path, parallel=1)
    assert len([r for r in relay.requests if r[0] == "b.safetensors"]) == MAX_RESUMES + 1
    assert store.requests == [("b.safetensors", 0)]  # from the start: the relay's partial is not reused
    assert (path / "b.safetensors").read_bytes() == FILES["b.safetensors"]


def test_when_every_source_fails_the_stores_error_is_raised_and_nothing_is_left_behind(tmp_path):
    files, raw = memory_checkpoint(FILES)
    del files["b.safetensors"]
    with pytest.raises(CheckpointError) as missing:
        fetch_checkpoint(picker((), MemorySource("s3://b/p/", files)), hashlib.sha256(raw).digest(), tmp_path)
    assert missing.value.reason is Reason.SHARD_MISSING
    assert not [p for p in (tmp_path / "blobs").iterdir() if p.name.startswith(".")]

    down = MemorySource("s3://b/p/", files, down=True)
    with pytest.raises(SourceError) as unavailable:  # a ServiceUnavailable: the caller retries later
        fetch_checkpoint(picker((), down), hashlib.sha256(raw).digest(), tmp_path / "other")
    assert isinstance(unavailable.value, ServiceUnavailable)


def test_a_checkpoint_over_the_size_limit_is_refused_before_any_file_is_fetched(tmp_path):
    """A pool's manager writes the manifest: one declaring more than this process downloads (here
    12,004 bytes against 12,003) is refused on the manifest alone; at the limit it is fetched."""
    files, raw = memory_checkpoint(FILES)
    store = MemorySource("s3://b/p/", files)
    total = sum(len(body) for body in FILES.values())
    with pytest.raises(CheckpointError) as too_large:
        fetch_checkpoint(picker((), store), hashlib.sha256(raw).digest(), tmp_path, max_bytes=total - 1)
    assert too_large.value.reason is Reason.CHECKPOINT_TOO_LARGE
    assert f"{total} bytes in all, over the limit of {total - 1}" in str(too_large.value)
    assert store.requests == []
    path = fetch_checkpoint(picker((), store), hashlib.sha256(raw).digest(), tmp_path, max_bytes=total)
    assert (path / "a.safetensors").read_bytes() == FILES["a.safetensors"]
