"""The trainer's metrics file in a checkpoint (`proofpool-metrics.json`): one canonical byte form,
bounds, strict parsing; written and listed by `write_checkpoint`; and the verified read of a
checkpoint's figures (manifest against the chain's hash, file against the manifest), whose every
failure is a status, never an exception. The store here is in memory: the real one is exercised in
tests/integration/test_checkpoint_metrics.py."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from proofpool_arithmetic.build import init_model

from proofpool.infra.checkpoint import (
    MANIFEST_NAME,
    METRICS_NAME,
    CheckpointError,
    CheckpointManifest,
    CheckpointMetrics,
    MetricsStatus,
    Reason,
    ShardEntry,
    metrics_record_prefix,
    parse_manifest,
    parse_metrics,
    publishable_figures,
    read_published_metrics,
    write_checkpoint,
)
from proofpool.infra.checkpoint.metrics import MAX_FIGURES, MAX_METRICS_BYTES
from proofpool.infra.storage import ObjectNotFound, ObjectTooLarge

GOLDEN = b'{"figures":{"loss":-0.0123,"mean_reward":0.4375,"samples":256},"pool_id":1,"schema_version":1,"version":3}'


def test_the_file_has_one_canonical_byte_form_whatever_the_order_of_the_figures():
    a = CheckpointMetrics(1, 3, {"samples": 256, "mean_reward": 0.4375, "loss": -0.0123})
    b = CheckpointMetrics(1, 3, {"loss": -0.0123, "samples": 256, "mean_reward": 0.4375})
    assert a.to_bytes() == b.to_bytes() == GOLDEN
    assert a.sha256_hex() == hashlib.sha256(GOLDEN).hexdigest()
    assert parse_metrics(GOLDEN) == a
    assert type(parse_metrics(GOLDEN).figures["samples"]) is int  # integers stay integers


@pytest.mark.parametrize(
    "figures",
    [
        {"loss": math.nan},
        {"loss": math.inf},
        {"loss": True},
        {"loss": "0.5"},
        {"loss": None},
        {"Loss": 0.5},
        {"1loss": 0.5},
        {"a" * 65: 0.5},
        {"samples": 2**53 + 1},
        {f"f{i}": 1.0 for i in range(MAX_FIGURES + 1)},
    ],
    ids=lambda f: next(iter(f)) if len(f) == 1 else f"{len(f)} figures",
)
def test_a_figure_out_of_bounds_is_refused(figures):
    with pytest.raises(CheckpointError) as refused:
        CheckpointMetrics(1, 1, figures)
    assert refused.value.reason is Reason.METRICS_MALFORMED


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b"not json",
        b'{"figures":{},"pool_id":1,"schema_version":1}',
        b'{"figures":{},"pool_id":1,"schema_version":1,"version":1,"extra":0}',
        b'{"figures":[],"pool_id":1,"schema_version":1,"version":1}',
        b'{"figures":{"a":{"b":1}},"pool_id":1,"schema_version":1,"version":1}',
        b'{"figures":{"a":NaN},"pool_id":1,"schema_version":1,"version":1}',
        b'{"figures":{"a":1e999},"pool_id":1,"schema_version":1,"version":1}',
        b'{"figures":{"a":1,"a":2},"pool_id":1,"schema_version":1,"version":1}',
        b'{"figures":{},"pool_id":-1,"schema_version":1,"version":1}',
        b'{"figures":{},"pool_id":1,"schema_version":2,"version":1}',
        b'{"figures":{},"pool_id":1,"schema_version":1,"version":4294967296}',
        b"\xff\xfe",
        b"[" * 100_000,
        b'{"figures":{"a":' + b"1" * 5000 + b'},"pool_id":1,"schema_version":1,"version":1}',
        b" " * (MAX_METRICS_BYTES + 1),
    ],
    ids=range(17),
)
def test_anything_but_a_metrics_file_is_refused_by_reason(raw):
    with pytest.raises(CheckpointError) as refused:
        parse_metrics(raw)
    assert refused.value.reason is Reason.METRICS_MALFORMED


def test_publishable_figures_keep_the_finite_numbers_a_file_can_carry():
    values = {
        "loss": math.nan,
        "mean_reward": np.float32(0.25),
        "samples": np.int64(12),
        "tokens": 340,
        "stepped": True,
        "grad_norm": math.inf,
        "Bad Name": 1.0,
        "note": "x",
    }
    figures = publishable_figures(values)
    assert figures == {"mean_reward": 0.25, "samples": 12, "tokens": 340}
    assert type(figures["mean_reward"]) is float and type(figures["samples"]) is int
    CheckpointMetrics(1, 1, figures)  # accepted as is


# --- written with the checkpoint ------------------------------------------------------------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("model") / "tiny", seed=3, hidden=32, layers=1, heads=2)


def test_write_checkpoint_writes_and_lists_the_metrics_file(model_dir, tmp_path):
    metrics = CheckpointMetrics(7, 2, {"loss": 0.5, "samples": 8})
    manifest = write_checkpoint(model_dir, tmp_path / "v2", pool_id=7, version=2, metrics=metrics)
    entry = manifest.entry(METRICS_NAME)
    assert entry is not None and (entry.sha256, entry.size) == (metrics.sha256_hex(), len(metrics.to_bytes()))
    assert (tmp_path / "v2" / METRICS_NAME).read_bytes() == metrics.to_bytes()


def test_a_metrics_file_in_the_source_is_not_carried_into_the_next_checkpoint(model_dir, tmp_path):
    old = CheckpointMetrics(7, 2, {"loss": 0.5})
    write_checkpoint(model_dir, tmp_path / "v2", pool_id=7, version=2, metrics=old)
    without = write_checkpoint(tmp_path / "v2", tmp_path / "v3", pool_id=7, version=3)
    assert without.entry(METRICS_NAME) is None and not (tmp_path / "v3" / METRICS_NAME).exists()
    new = CheckpointMetrics(7, 4, {"loss": 0.25})
    with_new = write_checkpoint(tmp_path / "v2", tmp_path / "v4", pool_id=7, version=4, metrics=new)
    assert with_new.entry(METRICS_NAME).sha256 == new.sha256_hex()


def test_metrics_of_another_version_are_refused(model_dir, tmp_path):
    with pytest.raises(ValueError, match="version 3"):
        write_checkpoint(model_dir, tmp_path / "v2", pool_id=7, version=2, metrics=CheckpointMetrics(7, 3, {}))


# --- the verified read ----------------------------------------------------------------------------


@dataclass
class MemoryStore:
    """The `ObjectStore` calls the read makes, over a dict of keys."""

    bucket: str = "bucket"
    objects: dict[str, bytes] = field(default_factory=dict)

    def get_object(self, key: str, *, max_bytes: int | None = None) -> bytes:
        if key not in self.objects:
            raise ObjectNotFound(self.bucket, key)
        if max_bytes is not None and len(self.objects[key]) > max_bytes:
            raise ObjectTooLarge(f"{key} is over {max_bytes} bytes")
        return self.objects[key]


POOL, VERSION = 5, 9
CHECKPOINT = f"pools/{POOL}/checkpoints/{VERSION}/"
URI = f"s3://bucket/{CHECKPOINT}"
METRICS = CheckpointMetrics(POOL, VERSION, {"mean_reward": 0.5, "loss": -0.25, "samples": 64})


def manifest_of(metrics: bytes | None, pool: int = POOL, version: int = VERSION) -> CheckpointManifest:
    files = [ShardEntry("model.safetensors", "ab" * 32, 100)]
    if metrics is not None:
        files.append(ShardEntry(METRICS_NAME, hashlib.sha256(metrics).hexdigest(), len(metrics)))
    return CheckpointManifest(pool, version, tuple(files))


def published(metrics: bytes | None = METRICS.to_bytes(), *, where: str = "record") -> tuple[MemoryStore, bytes]:
    """A store holding a checkpoint's manifest and metrics file at `where` (record, checkpoint, or
    both), and the manifest hash the chain anchored."""
    manifest = manifest_of(metrics)
    store = MemoryStore()
    places = {"record": [metrics_record_prefix(POOL, manifest.sha256_hex())], "checkpoint": [CHECKPOINT]}
    places["both"] = places["record"] + places["checkpoint"]
    for place in places[where]:
        store.objects[place + MANIFEST_NAME] = manifest.to_bytes()
        if metrics is not None:
            store.objects[place + METRICS_NAME] = metrics
    return store, manifest.sha256()


def read(store: MemoryStore, digest: bytes, uri: str = URI):
    return read_published_metrics(store, POOL, VERSION, digest, uri)  # type: ignore[arg-type]


@pytest.mark.parametrize("where", ["record", "checkpoint", "both"])
def test_the_figures_verify_from_the_record_or_the_checkpoint(where):
    store, digest = published(where=where)
    reading = read(store, digest)
    assert (reading.status, reading.detail, reading.metrics) == (MetricsStatus.VERIFIED, None, METRICS)


def test_the_record_is_found_below_the_prefix_of_the_checkpoint_uri():
    store, digest = published()
    store.objects = {f"tenant/{key}": value for key, value in store.objects.items()}
    assert read(store, digest, f"s3://bucket/tenant/{CHECKPOINT}").status is MetricsStatus.VERIFIED


def test_a_manifest_other_than_the_anchored_one_is_a_mismatch():
    store, digest = published()
    reading = read(store, hashlib.sha256(b"another manifest").digest())
    assert reading.status is MetricsStatus.MISSING  # the record is keyed by the anchored hash: not there
    store, digest = published(where="checkpoint")
    reading = read(store, hashlib.sha256(b"another manifest").digest())
    assert reading.status is MetricsStatus.MISMATCH and digest.hex() in reading.detail


def test_a_tampered_metrics_file_is_a_mismatch():
    store, digest = published()
    key = next(k for k in store.objects if k.endswith(METRICS_NAME))
    store.objects[key] = store.objects[key].replace(b"0.5", b"0.9")
    reading = read(store, digest)
    assert reading.status is MetricsStatus.MISMATCH and reading.metrics is None
    store.objects[key] = b" " * (MAX_METRICS_BYTES + 1)
    assert read(store, digest).status is MetricsStatus.MISMATCH


def test_a_manifest_without_a_metrics_file_is_unlisted():
    store, digest = published(None)
    assert read(store, digest).status is MetricsStatus.UNLISTED


@pytest.mark.parametrize("lost", [MANIFEST_NAME, METRICS_NAME])
def test_a_lost_object_is_missing(lost):
    store, digest = published()
    store.objects = {k: v for k, v in store.objects.items() if not k.endswith(lost)}
    assert read(store, digest).status is MetricsStatus.MISSING


@pytest.mark.parametrize(
    "metrics",
    [
        b"not json",
        CheckpointMetrics(POOL, VERSION + 1, {"loss": 1.0}).to_bytes(),
        CheckpointMetrics(POOL + 1, VERSION, {"loss": 1.0}).to_bytes(),
    ],
    ids=["not json", "another version", "another pool"],
)
def test_a_file_that_hashes_right_but_is_no_metrics_file_of_this_checkpoint_is_malformed(metrics):
    store, digest = published(metrics)
    reading = read(store, digest)
    assert reading.status is MetricsStatus.MALFORMED and reading.metrics is None


def test_a_manifest_of_another_version_or_not_a_manifest_is_malformed():
    manifest = manifest_of(METRICS.to_bytes(), version=VERSION + 1)
    store = MemoryStore(objects={CHECKPOINT + MANIFEST_NAME: manifest.to_bytes()})
    assert read(store, manifest.sha256()).status is MetricsStatus.MALFORMED
    garbage = b'{"files":[]}'
    store = MemoryStore(objects={CHECKPOINT + MANIFEST_NAME: garbage})
    assert read(store, hashlib.sha256(garbage).digest()).status is MetricsStatus.MALFORMED


@pytest.mark.parametrize(
    "uri, status",
    [
        ("not a uri", MetricsStatus.MALFORMED),
        ("s3://other-bucket/pools/5/checkpoints/9/", MetricsStatus.MISSING),
    ],
)
def test_a_uri_this_store_cannot_serve_is_a_status(uri, status):
    store, digest = published()
    assert read(store, digest, uri).status is status


def test_the_record_holds_a_parseable_copy_of_the_manifest():
    store, digest = published()
    record = metrics_record_prefix(POOL, digest.hex())
    assert record == f"pools/{POOL}/checkpoint-metrics/{digest.hex()}/"
    assert parse_manifest(store.objects[record + MANIFEST_NAME]).sha256() == digest
