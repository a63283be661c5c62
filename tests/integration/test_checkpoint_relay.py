"""Checkpoint broadcast on the real object store: clients fetch through relays (in-process uvicorn,
and the `proofpool relay serve` command), relays chain, and whatever a relay does wrong (dies,
serves flipped bytes, cuts a transfer, answers another manifest) costs time, never trust."""

from __future__ import annotations

import hashlib
import http.client
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from proofpool_arithmetic.build import init_model

from proofpool.infra.chain.anvil import free_port
from proofpool.infra.checkpoint import (
    MANIFEST_NAME,
    CheckpointManifest,
    SourcePicker,
    build_picker,
    ensure_checkpoint,
    fetch_checkpoint,
    is_complete,
    parse_checkpoint_uri,
    upload_checkpoint,
    write_checkpoint,
)
from proofpool.infra.checkpoint.relay import Relay, RelayUpstream, StoreUpstream, create_relay_app
from proofpool.infra.checkpoint.sources import MANIFEST_HINT_HEADER, relay_client
from proofpool.infra.storage import ObjectStore
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.backend import serve_app

POOL, VERSION = 7, 1
SHARD = 40_000
"""Bytes per shard: the tiny model's ~270 kB of weights make 8 shards."""


@dataclass(frozen=True)
class Published:
    """A checkpoint in the store, and the directory it was uploaded from (the expected bytes)."""

    uri: str
    prefix: str
    manifest: CheckpointManifest
    raw: bytes
    out_dir: Path

    @property
    def sha256(self) -> bytes:
        return hashlib.sha256(self.raw).digest()


def publish(store: ObjectStore, model: Path, out_dir: Path, prefix: str) -> Published:
    manifest = write_checkpoint(model, out_dir, SHARD, pool_id=POOL, version=VERSION)
    uri = upload_checkpoint(store, out_dir, manifest, prefix)
    return Published(uri, prefix, manifest, manifest.to_bytes(), out_dir)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("relay-model") / "model", seed=3, hidden=64, layers=2, heads=2)


@pytest.fixture(scope="module")
def published(object_store: ObjectStore, model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Published:
    prefix = f"test/relay-{os.urandom(8).hex()}/"
    return publish(object_store, model_dir, tmp_path_factory.mktemp("relay-ckpt") / "out", prefix)


@contextmanager
def serve(relay: Relay) -> Iterator[str]:
    """The relay's app under uvicorn on a free loopback port, in a thread; yields its base URL."""
    with serve_app(create_relay_app(relay), free_port()) as url:
        yield url


@pytest.fixture
def store_relay(object_store: ObjectStore, published: Published, tmp_path: Path) -> Iterator[tuple[str, Relay]]:
    """A fresh relay (empty cache) mirroring from the test store below the checkpoint's prefix."""
    relay = Relay(tmp_path / "relay", StoreUpstream(object_store, published.prefix))
    with serve(relay) as url:
        yield url, relay


@contextmanager
def client_picker(store: ObjectStore, published: Published, relays: list[str]) -> Iterator[SourcePicker]:
    """What `ensure_checkpoint` builds, kept so a test can read what each source delivered."""
    with relay_client(4) as client:
        yield build_picker(store, parse_checkpoint_uri(published.uri), relays, client, manifest_sha256=published.sha256)


def assert_same_files(path: Path, published: Published) -> None:
    assert is_complete(path)
    for entry in published.manifest.files:
        assert (path / entry.path).read_bytes() == (published.out_dir / entry.path).read_bytes(), entry.path
    assert (path / MANIFEST_NAME).read_bytes() == published.raw


def no_leftovers(cache: Path) -> bool:
    return not [p for p in (cache / "blobs").iterdir() if p.name.startswith(".")]


def test_a_client_fetches_through_a_relay_and_gets_the_same_files(object_store, published, store_relay, tmp_path):
    url, relay = store_relay
    path = ensure_checkpoint(object_store, published.uri, published.sha256, tmp_path / "a", relays=[url])
    assert_same_files(path, published)
    total = published.manifest.total_size
    mirrored = relay.stats()
    assert (mirrored.mirror_jobs, mirrored.bytes_from_upstream) == (1, total + len(published.raw))

    with client_picker(object_store, published, [url]) as picker:
        second = fetch_checkpoint(picker, published.sha256, tmp_path / "b")
        assert_same_files(second, published)
        relay_stats, store_stats = picker.snapshot()
    assert store_stats.attempts == 0  # the store was never asked
    assert relay_stats.bytes_fetched == total + len(published.raw)
    after = relay.stats()
    assert (after.mirror_jobs, after.bytes_from_upstream) == (1, mirrored.bytes_from_upstream)  # served from cache
    assert after.bytes_served == 2 * (total + len(published.raw))


def test_the_relay_answers_range_requests_with_their_length(published, store_relay):
    url, _ = store_relay
    entry = max(published.manifest.files, key=lambda e: e.size)
    whole = (published.out_dir / entry.path).read_bytes()
    target = f"{url}/checkpoints/{POOL}/{VERSION}/{entry.path}"
    full = httpx.get(target, timeout=30)
    assert full.status_code == 200 and full.headers["content-length"] == str(entry.size) and full.content == whole
    tail = httpx.get(target, headers={"Range": "bytes=1000-"}, timeout=30)
    assert tail.status_code == 206 and tail.content == whole[1000:]
    assert tail.headers["content-range"] == f"bytes 1000-{entry.size - 1}/{entry.size}"
    assert tail.headers["content-length"] == str(entry.size - 1000)
    beyond = httpx.get(target, headers={"Range": f"bytes={entry.size}-"}, timeout=30)
    assert beyond.status_code == 416
    head = httpx.head(target, timeout=30)
    assert head.status_code == 200 and head.headers["content-length"] == str(entry.size) and head.content == b""


def test_a_relay_chained_to_another_relay_serves_the_same_checkpoint(object_store, published, store_relay, tmp_path):
    first_url, first = store_relay
    with relay_client(4) as upstream_client:
        second = Relay(tmp_path / "second", RelayUpstream(first_url, upstream_client))
        with serve(second) as second_url, client_picker(object_store, published, [second_url]) as picker:
            path = fetch_checkpoint(picker, published.sha256, tmp_path / "client")
            assert_same_files(path, published)
            assert picker.snapshot()[1].attempts == 0
    whole = published.manifest.total_size + len(published.raw)
    assert second.stats().bytes_from_upstream == whole == first.stats().bytes_served
    assert first.stats().bytes_from_upstream == whole


def test_a_relay_whose_disk_flipped_a_byte_is_demoted_and_the_store_serves_that_file(
    object_store, published, store_relay, tmp_path
):
    url, relay = store_relay
    ensure_checkpoint(object_store, published.uri, published.sha256, tmp_path / "warm", relays=[url])
    last = published.manifest.files[-1]  # fetched last when one file is fetched at a time
    blob = relay.cache_dir / "blobs" / last.sha256
    blob.chmod(0o644)
    body = bytearray(blob.read_bytes())
    body[len(body) // 2] ^= 0x01
    blob.write_bytes(bytes(body))

    cache = tmp_path / "client"
    with client_picker(object_store, published, [url]) as picker:
        path = fetch_checkpoint(picker, published.sha256, cache, parallel=1)
        relay_stats, store_stats = picker.snapshot()
    assert_same_files(path, published)
    assert relay_stats.corrupt == 1 and relay_stats.demoted_until > time.monotonic()
    assert store_stats.bytes_fetched == last.size  # only the file the relay got wrong
    assert no_leftovers(cache)


class StubRelay:
    """A fake relay serving a checkpoint directory over stdlib HTTP, misbehaving as told; it
    records what it sent: (file name, Range header, body bytes written)."""

    def __init__(self, published: Published, misbehave: str = "", target: str = "", cut_at: int = 0) -> None:
        self.published, self.misbehave, self.target, self.cut_at = published, misbehave, target, cut_at
        self.sent: list[tuple[str, str | None, int]] = []
        self.release = threading.Event()
        """With `misbehave="hold"`: the target is sent only once this is set."""
        self._lock = threading.Lock()
        self._cut_done = False

    def body(self, name: str) -> bytes:
        raw = self.published.raw if name == MANIFEST_NAME else (self.published.out_dir / name).read_bytes()
        if name != self.target:
            return raw
        if self.misbehave == "other_manifest":
            return raw.replace(b'"version":1', b'"version":2')
        if self.misbehave == "flipped_byte":
            return raw[:100] + bytes([raw[100] ^ 0x80]) + raw[101:]
        if self.misbehave == "longer":
            return raw + b"\x00" * 64
        if self.misbehave == "shorter":
            return raw[:-64]
        return raw

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        name = handler.path.rsplit("/", 1)[-1]
        prefix = f"/checkpoints/{POOL}/{VERSION}/"
        if not handler.path.startswith(prefix) or not (
            name == MANIFEST_NAME or (self.published.out_dir / name).is_file()
        ):
            handler.send_error(404)
            return
        if self.misbehave == "hold" and name == self.target:
            self.release.wait(timeout=60)
        body, ranged = self.body(name), handler.headers.get("Range")
        start = int(ranged.removeprefix("bytes=").rstrip("-")) if ranged else 0
        handler.send_response(206 if ranged else 200)
        if ranged:
            handler.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        handler.send_header("Content-Length", str(len(body) - start))
        handler.end_headers()
        payload = body[start:]
        with self._lock:
            cut = self.misbehave == "cut" and name == self.target and not self._cut_done
            self._cut_done |= cut
        if cut:  # promise the whole file, send part of it, drop the connection
            payload = payload[: self.cut_at]
            handler.close_connection = True
        with self._lock:
            self.sent.append((name, ranged, len(payload)))
        handler.wfile.write(payload)
        handler.wfile.flush()

    @contextmanager
    def running(self) -> Iterator[str]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                stub.handle(self)

            def log_message(self, *_: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, name="stub-relay", daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


def test_an_interrupted_download_resumes_with_a_range_request(object_store, published, tmp_path):
    entry = max(published.manifest.files, key=lambda e: e.size)
    stub = StubRelay(published, "cut", entry.path, cut_at=entry.size // 3)
    with stub.running() as url, client_picker(object_store, published, [url]) as picker:
        path = fetch_checkpoint(picker, published.sha256, tmp_path / "cache")
        stub_stats, store_stats = picker.snapshot()
    assert_same_files(path, published)
    assert [(r, n) for name, r, n in stub.sent if name == entry.path] == [
        (None, entry.size // 3),
        (f"bytes={entry.size // 3}-", entry.size - entry.size // 3),  # the rest, not a byte twice
    ]
    assert store_stats.attempts == 0 and stub_stats.failures == 0
    assert no_leftovers(tmp_path / "cache")


@pytest.mark.parametrize(
    "misbehave, target",
    [
        ("other_manifest", MANIFEST_NAME),
        ("flipped_byte", "model-00003-of-00008.safetensors"),
        ("longer", "config.json"),
        ("shorter", "model-00008-of-00008.safetensors"),
    ],
)
def test_a_lying_relay_is_demoted_and_the_store_serves_instead(object_store, published, tmp_path, misbehave, target):
    assert target == MANIFEST_NAME or published.manifest.entry(target) is not None
    stub = StubRelay(published, misbehave, target)
    with stub.running() as url, client_picker(object_store, published, [url]) as picker:
        path = fetch_checkpoint(picker, published.sha256, tmp_path / "cache", parallel=1)
        stub_stats, store_stats = picker.snapshot()
    assert_same_files(path, published)
    assert stub_stats.corrupt == 1 and stub_stats.demoted_until > time.monotonic()
    served = [name for name, _, _ in stub.sent]
    assert served[-1] == target  # asked for nothing after it lied
    assert store_stats.bytes_fetched > 0 and no_leftovers(tmp_path / "cache")


def test_a_dead_relay_falls_back_to_the_store(object_store, published, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"
    with client_picker(object_store, published, [dead]) as picker:
        path = fetch_checkpoint(picker, published.sha256, tmp_path / "cache")
        dead_stats, store_stats = picker.snapshot()
    assert_same_files(path, published)
    assert dead_stats.bytes_fetched == 0 and dead_stats.failures >= picker.failure_limit
    assert dead_stats.demoted_until > time.monotonic()
    assert store_stats.bytes_fetched == published.manifest.total_size + len(published.raw)


def raw_get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """GET a path exactly as written: httpx would normalize `..` and encodings away."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        connection.endheaders()
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


@pytest.mark.parametrize(
    "path, statuses",
    [
        (f"/checkpoints/{POOL}/{VERSION}/../../../etc/passwd", {404}),
        (f"/checkpoints/{POOL}/{VERSION}/..%2F..%2F..%2Fetc%2Fpasswd", {404}),
        (f"/checkpoints/{POOL}/{VERSION}/%2Fetc%2Fpasswd", {404}),
        (f"/checkpoints/{POOL}/{VERSION}/..", {400}),
        (f"/checkpoints/{POOL}/{VERSION}/.hidden", {400}),
        (f"/checkpoints/{POOL}/{VERSION}/config.json%00", {400}),
        (f"/checkpoints/{POOL}/{VERSION}/not-in-the-manifest.bin", {404}),
        (f"/checkpoints/{POOL}/{VERSION}/versions", {404}),
        ("/checkpoints/-1/1/config.json", {400}),
        ("/checkpoints/seven/1/config.json", {400}),
        (f"/checkpoints/{POOL}/4294967296/config.json", {400}),
        (f"/checkpoints/{POOL}/99/config.json", {404}),  # no such version upstream
    ],
)
def test_hostile_paths_are_refused(published, store_relay, path, statuses):
    url, _ = store_relay
    status, body = raw_get(url, path)
    assert status in statuses, body
    assert b"root:" not in body


def test_a_malformed_manifest_hint_is_refused(published, store_relay):
    url, _ = store_relay
    status, body = raw_get(url, f"/checkpoints/{POOL}/{VERSION}/{MANIFEST_NAME}", {MANIFEST_HINT_HEADER: "zz"})
    assert status == 400 and b"hint_invalid" in body


def test_concurrent_requests_for_a_new_version_share_one_mirror_job(published, store_relay):
    url, relay = store_relay
    names = [MANIFEST_NAME] + [entry.path for entry in published.manifest.files]

    def get(name: str) -> bytes:
        reply = httpx.get(f"{url}/checkpoints/{POOL}/{VERSION}/{name}", timeout=60)
        reply.raise_for_status()
        return reply.content

    with ThreadPoolExecutor(8) as pool:
        bodies = list(pool.map(get, names * 2))
    expected = [published.raw] + [(published.out_dir / n).read_bytes() for n in names[1:]]
    assert bodies == expected * 2
    stats = relay.stats()
    assert stats.mirror_jobs == 1
    assert stats.bytes_from_upstream == published.manifest.total_size + len(published.raw)


def test_a_relay_serves_each_file_as_soon_as_it_is_verified_not_when_the_whole_version_is(published, tmp_path):
    slow = published.manifest.files[0]
    quick = published.manifest.files[-1]
    upstream = StubRelay(published, "hold", slow.path)
    with upstream.running() as upstream_url, relay_client(4) as client:
        relay = Relay(tmp_path / "relay", RelayUpstream(upstream_url, client))
        with serve(relay) as url:
            try:
                reply = httpx.get(f"{url}/checkpoints/{POOL}/{VERSION}/{quick.path}", timeout=30)
                assert reply.status_code == 200 and reply.content == (published.out_dir / quick.path).read_bytes()
                assert slow.path not in [name for name, _, _ in upstream.sent]  # still held upstream
            finally:
                upstream.release.set()
            reply = httpx.get(f"{url}/checkpoints/{POOL}/{VERSION}/{slow.path}", timeout=30)
            assert reply.status_code == 200 and reply.content == (published.out_dir / slow.path).read_bytes()


def test_a_relay_holding_another_manifest_mirrors_again_for_a_client_that_expects_the_new_one(
    object_store, model_dir, tmp_path
):
    prefix = f"test/relay-{os.urandom(8).hex()}/"
    old = publish(object_store, model_dir, tmp_path / "old", prefix)
    relay = Relay(tmp_path / "relay", StoreUpstream(object_store, prefix), remirror_after=0.0)
    with serve(relay) as url:
        ensure_checkpoint(object_store, old.uri, old.sha256, tmp_path / "early", relays=[url])
        other = init_model(tmp_path / "other-model", seed=4, hidden=64, layers=2, heads=2)
        new = publish(object_store, other, tmp_path / "new", prefix)  # same version, overwritten in the store
        assert new.sha256 != old.sha256
        with client_picker(object_store, new, [url]) as picker:
            path = fetch_checkpoint(picker, new.sha256, tmp_path / "late")
            relay_stats, store_stats = picker.snapshot()
    assert_same_files(path, new)
    assert store_stats.attempts == 0 and relay_stats.corrupt == 0
    assert relay.stats().mirror_jobs == 2


def test_the_relay_command_serves_a_checkpoint_from_the_store(
    seaweed: SeaweedProcess, object_store, published, tmp_path
):
    port = free_port()
    env = {**os.environ, **seaweed.env(), "PROOFPOOL_STATE_DIR": str(tmp_path / "state")}
    log = tmp_path / "relay.log"
    args = ["relay", "serve", "--port", str(port), "--prefix", published.prefix, "--cache-dir", str(tmp_path / "c")]
    with log.open("wb") as out:
        process = subprocess.Popen([sys.executable, "-m", "proofpool.cli.main", *args], env=env, stdout=out, stderr=out)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        with client_picker(object_store, published, [url]) as picker:
            path = fetch_checkpoint(picker, published.sha256, tmp_path / "cache")
            assert picker.snapshot()[1].attempts == 0
        assert_same_files(path, published)
        health = httpx.get(f"{url}/healthz", timeout=5).json()
        assert health["status"] == "ok" and health["mirror_jobs"] == 1
        assert health["upstream"] == f"s3://{object_store.bucket}/{published.prefix}"
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_the_relay_command_refuses_a_malformed_upstream(tmp_path):
    env = {**os.environ, "PROOFPOOL_STATE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "relay", "serve", "--upstream", "ftp://somewhere"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert b"is not an http or https base URL" in done.stderr and b"Traceback" not in done.stderr
