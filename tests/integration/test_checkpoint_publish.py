"""Checkpoints end to end on the real services: publish to SeaweedFS and anvil, fetch into a
cache that downloads only what it lacks, and refuse anything the chain does not vouch for."""

from __future__ import annotations

import hashlib
import json
import uuid
from pathlib import Path

import pytest
import torch
from eth_account import Account
from proofpool.cli.main import app
from proofpool_arithmetic.build import ModelManifest, ModelSpec, init_model, save_model
from typer.testing import CliRunner

from proofpool.inference.model import load_model
from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.bindings import PoolParams
from proofpool.infra.chain.deploy import write_address_book
from proofpool.infra.checkpoint import (
    MANIFEST_NAME,
    CheckpointError,
    FetchProgress,
    PublishedCheckpoint,
    Reason,
    checkpoint_dir,
    ensure_checkpoint,
    ensure_published_checkpoint,
    is_complete,
    onchain_checkpoint,
    onchain_manifest_sha256,
    prune_cache,
    publish_checkpoint,
)
from proofpool.infra.checkpoint.shards import INDEX_NAME
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.deployment import MANAGER, Deployment

OUTSIDER = ANVIL_KEYS[8]
SPEC = ModelSpec(seed=5, hidden=64, layers=2, heads=2)
SHARD = 40_000
"""Bytes per shard: the tiny model's ~270 kB of weights make 8 shards."""


@pytest.fixture
def pool_id(deployment: Deployment) -> int:
    """A new pool managed by MANAGER, so every test starts at checkpoint version 0."""
    params = PoolParams(
        manager=deployment.manager.address,
        treasury=deployment.admin.address,
        model_uri="devnet://checkpoint-test",
        reward_per_unit=1,
        validator_fee=1,
        slash_amount=1,
        dispute_window=60,
        validator_slash_share_bps=5_000,
    )
    created, _ = deployment.admin.pool.create_pool(params)
    return created


@pytest.fixture(scope="module")
def model_v1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("models") / "v1"
    return init_model(path, seed=SPEC.seed, hidden=SPEC.hidden, layers=SPEC.layers, heads=SPEC.heads)


@pytest.fixture(scope="module")
def model_v2(model_v1: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """v1 after a 'training step' that moved only the output head."""
    model = load_model(model_v1)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)
    return save_model(model, tmp_path_factory.mktemp("models") / "v2", ModelManifest(spec=SPEC))


def publish(deployment: Deployment, store: ObjectStore, pool: int, version: int, model: Path, prefix: str):
    return publish_checkpoint(deployment.manager, store, pool, version, model, SHARD, prefix=prefix)


def same_weights(a: Path, b: Path) -> bool:
    left, right = load_model(a, "bf16").state_dict(), load_model(b, "bf16").state_dict()
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


def test_a_published_checkpoint_is_anchored_and_fetches_to_the_same_weights(
    deployment, pool_id, object_store, unique_prefix, model_v1, tmp_path
):
    published = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)

    base = f"{unique_prefix}pools/{pool_id}/checkpoints/1/"
    assert published.uri == f"s3://{object_store.bucket}/{base}"
    latest = deployment.admin.pool.latest_checkpoint(pool_id)
    assert (latest.version, latest.manifest_sha256, latest.uri) == (1, published.manifest_sha256, published.uri)
    stored = {info.key.removeprefix(base) for info in object_store.list_objects(base)}
    assert stored == {entry.path for entry in published.manifest.files} | {MANIFEST_NAME}
    manifest_bytes = object_store.get_object(base + MANIFEST_NAME)
    assert hashlib.sha256(manifest_bytes).digest() == published.manifest_sha256

    cache = tmp_path / "cache"
    seen: list[FetchProgress] = []
    path = ensure_checkpoint(object_store, published.uri, published.manifest_sha256, cache, seen.append)
    assert path == checkpoint_dir(cache, published.manifest_sha256) and is_complete(path)
    assert same_weights(path, model_v1)
    assert [p.files_done for p in seen] == list(range(1, len(published.manifest.files) + 1))
    assert all(p.downloaded for p in seen)
    assert seen[-1].bytes_done == seen[-1].bytes_total == seen[-1].downloaded_bytes == published.manifest.total_size
    blobs = {p.name for p in (cache / "blobs").iterdir()}
    assert blobs == {entry.sha256 for entry in published.manifest.files}
    config = path / "config.json"
    assert config.stat().st_ino == (cache / "blobs" / published.manifest.entry("config.json").sha256).stat().st_ino

    again: list[FetchProgress] = []
    assert ensure_checkpoint(object_store, published.uri, published.manifest_sha256, cache, again.append) == path
    assert again == []  # a complete cached checkpoint costs no request


def test_a_new_version_downloads_only_the_files_that_changed(
    deployment, pool_id, object_store, unique_prefix, model_v1, model_v2, tmp_path
):
    first = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)
    second = publish(deployment, object_store, pool_id, 2, model_v2, unique_prefix)
    cache = tmp_path / "cache"
    ensure_checkpoint(object_store, first.uri, first.manifest_sha256, cache)

    seen: list[FetchProgress] = []
    path = ensure_checkpoint(object_store, second.uri, second.manifest_sha256, cache, seen.append)
    old_hashes = {entry.sha256 for entry in first.manifest.files}
    changed = {entry.path for entry in second.manifest.files if entry.sha256 not in old_hashes}
    downloaded = {p.path for p in seen if p.downloaded}
    assert downloaded == changed
    index = json.loads((path / INDEX_NAME).read_text())
    assert changed == {index["weight_map"]["lm_head.weight"]}  # config, tokenizer, other shards reused
    assert seen[-1].downloaded_bytes == second.manifest.entry(index["weight_map"]["lm_head.weight"]).size
    assert same_weights(path, model_v2)

    freed = prune_cache(cache, keep=[second.manifest_sha256])
    assert freed > 0
    assert not checkpoint_dir(cache, first.manifest_sha256).exists()
    assert is_complete(path) and same_weights(path, model_v2)
    assert {p.name for p in (cache / "blobs").iterdir()} == {entry.sha256 for entry in second.manifest.files}


def test_a_damaged_cache_is_repaired(deployment, pool_id, object_store, unique_prefix, model_v1, model_v2, tmp_path):
    first = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)
    second = publish(deployment, object_store, pool_id, 2, model_v2, unique_prefix)
    cache = tmp_path / "cache"
    path = ensure_checkpoint(object_store, first.uri, first.manifest_sha256, cache)

    (path / "tokenizer.json").unlink()  # a file deleted by hand: rebuilt from the blobs, nothing downloaded
    assert not is_complete(path)
    seen: list[FetchProgress] = []
    assert ensure_checkpoint(object_store, first.uri, first.manifest_sha256, cache, seen.append) == path
    assert is_complete(path) and not any(p.downloaded for p in seen)

    config = first.manifest.entry("config.json")
    blob = cache / "blobs" / config.sha256
    blob.chmod(0o644)
    blob.write_bytes(b"x" * config.size)  # same size, other bytes: only a re-hash can tell
    seen.clear()
    fixed = ensure_checkpoint(object_store, second.uri, second.manifest_sha256, cache, seen.append, verify_cached=True)
    assert {p.path for p in seen if p.downloaded} >= {"config.json"}
    assert hashlib.sha256((fixed / "config.json").read_bytes()).hexdigest() == config.sha256


def test_the_chain_gives_the_manifest_hash_of_the_latest_and_of_older_versions(
    deployment, pool_id, object_store, unique_prefix, model_v1, model_v2
):
    chain = deployment.admin
    assert onchain_manifest_sha256(chain, pool_id, 0) is None  # nothing published yet
    first = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)
    second = publish(deployment, object_store, pool_id, 5, model_v2, unique_prefix)

    assert onchain_manifest_sha256(chain, pool_id, 5) == second.manifest_sha256  # latest: one view call
    assert onchain_manifest_sha256(chain, pool_id, 1) == first.manifest_sha256  # older: from the event
    older = onchain_checkpoint(chain, pool_id, 1)
    assert older is not None and (older.uri, older.tx_hash) == (first.uri, first.tx_hash)
    assert older.block_number == first.receipt["blockNumber"]
    for absent in (2, 4, 6):
        assert onchain_manifest_sha256(chain, pool_id, absent) is None
    assert onchain_manifest_sha256(chain, pool_id + 1000, 1) is None
    in_small_windows = onchain_checkpoint(chain, pool_id, 1, log_window=2)  # many eth_getLogs calls, newest first
    assert in_small_windows == older


def test_fetching_by_pool_and_version_trusts_only_the_chain(
    deployment, pool_id, object_store, unique_prefix, model_v1, tmp_path
):
    published = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)
    path = ensure_published_checkpoint(deployment.admin, object_store, pool_id, 1, tmp_path / "cache")
    assert path.name == published.manifest_sha256.hex() and same_weights(path, model_v1)
    with pytest.raises(CheckpointError) as refused:
        ensure_published_checkpoint(deployment.admin, object_store, pool_id, 2, tmp_path / "cache")
    assert refused.value.reason is Reason.NOT_ON_CHAIN


def flip_a_byte(body: bytes) -> bytes:
    return body[:100] + bytes([body[100] ^ 0x01]) + body[101:]


def append_bytes(body: bytes) -> bytes:
    return body + b"\x00" * 16


@pytest.mark.parametrize("tamper", [flip_a_byte, append_bytes])
def test_a_tampered_shard_in_the_store_is_refused_and_never_cached(
    deployment, pool_id, object_store, unique_prefix, model_v1, tmp_path, tamper
):
    published = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)
    shard = next(e for e in published.manifest.files if e.path.endswith(".safetensors"))
    key = f"{unique_prefix}pools/{pool_id}/checkpoints/1/{shard.path}"
    object_store.put_object(key, tamper(object_store.get_object(key)))

    cache = tmp_path / "cache"
    with pytest.raises(CheckpointError) as refused:
        ensure_checkpoint(object_store, published.uri, published.manifest_sha256, cache)
    assert refused.value.reason is Reason.SHARD_HASH_MISMATCH
    assert shard.path in refused.value.detail
    assert not (cache / "blobs" / shard.sha256).exists()
    assert not [p for p in (cache / "blobs").iterdir() if p.name.startswith(".")]  # no partial download left
    assert not checkpoint_dir(cache, published.manifest_sha256).exists()


def test_a_missing_shard_is_refused(deployment, pool_id, object_store, unique_prefix, model_v1, tmp_path):
    published = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)
    object_store.delete(f"{unique_prefix}pools/{pool_id}/checkpoints/1/tokenizer.json")
    with pytest.raises(CheckpointError) as refused:
        ensure_checkpoint(object_store, published.uri, published.manifest_sha256, tmp_path / "cache")
    assert refused.value.reason is Reason.SHARD_MISSING
    assert not checkpoint_dir(tmp_path / "cache", published.manifest_sha256).exists()


def test_a_manifest_other_than_the_expected_one_is_refused_before_any_download(
    deployment, pool_id, object_store, unique_prefix, model_v1, tmp_path
):
    published = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)
    cache = tmp_path / "cache"
    with pytest.raises(CheckpointError) as wrong:
        ensure_checkpoint(object_store, published.uri, hashlib.sha256(b"another manifest").digest(), cache)
    assert wrong.value.reason is Reason.MANIFEST_HASH_MISMATCH
    assert not (cache / "blobs").exists()

    empty = f"s3://{object_store.bucket}/{unique_prefix}nothing-here/"
    with pytest.raises(CheckpointError) as missing:
        ensure_checkpoint(object_store, empty, published.manifest_sha256, cache)
    assert missing.value.reason is Reason.MANIFEST_MISSING
    elsewhere = published.uri.replace(object_store.bucket, "another-bucket", 1)
    with pytest.raises(CheckpointError) as foreign:
        ensure_checkpoint(object_store, elsewhere, published.manifest_sha256, cache)
    assert foreign.value.reason is Reason.URI_INVALID


def test_a_publication_the_chain_would_refuse_fails_before_uploading(
    deployment, pool_id, object_store, unique_prefix, model_v1
):
    outsider = deployment.admin.as_account(Account.from_key(OUTSIDER))
    with pytest.raises(CheckpointError) as not_manager:
        publish_checkpoint(outsider, object_store, pool_id, 1, model_v1, SHARD, prefix=unique_prefix)
    assert not_manager.value.reason is Reason.PUBLISH_REFUSED
    publish(deployment, object_store, pool_id, 3, model_v1, unique_prefix)
    with pytest.raises(CheckpointError) as old_version:
        publish(deployment, object_store, pool_id, 2, model_v1, unique_prefix)
    assert old_version.value.reason is Reason.PUBLISH_REFUSED
    keys = [info.key.removeprefix(unique_prefix).split("/") for info in object_store.list_objects(unique_prefix)]
    assert {key[3] for key in keys if key[2] == "checkpoints"} == {"3"}
    assert {key[2] for key in keys} == {"checkpoints", "checkpoint-metrics"}  # version 3's metrics record


def test_the_cli_publishes_a_model_directory_and_reads_the_anchor_back(
    deployment, pool_id, seaweed: SeaweedProcess, object_store, model_v1, tmp_path, monkeypatch
):
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"  # the CLI writes under pools/..., so isolate by bucket
    ObjectStore(object_store.client, bucket, object_store.endpoint_url).ensure_bucket()
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PROOFPOOL_S3_BUCKET", bucket)
    monkeypatch.setenv("PROOFPOOL_RPC_URL", deployment.admin.w3.provider.endpoint_uri)
    write_address_book(deployment.admin.book, tmp_path / "deployments")
    monkeypatch.setenv("PROOFPOOL_DEPLOYMENTS_DIR", str(tmp_path / "deployments"))
    get_settings.cache_clear()
    runner = CliRunner()
    try:
        args = ["pool", "publish-checkpoint", "--pool", str(pool_id), "--version", "1", str(model_v1)]
        done = runner.invoke(app, [*args, "--shard-mb", "1", "--key", MANAGER])
        assert done.exit_code == 0, f"{done.output}\n{done.exception!r}"
        assert "CheckpointPublished" in done.output

        shown = runner.invoke(app, ["pool", "checkpoint", "--pool", str(pool_id), "--json"])
        assert shown.exit_code == 0, shown.output
        data = json.loads(shown.output)
        anchored = onchain_checkpoint(deployment.admin, pool_id)
        assert data["version"] == 1
        assert data["manifest_sha256"] == "0x" + anchored.manifest_sha256.hex()
        assert data["uri"] == f"s3://{bucket}/pools/{pool_id}/checkpoints/1/" == anchored.uri
        assert f"manifest sha256 {data['manifest_sha256']}" in " ".join(done.output.split())  # rich wraps lines

        store = ObjectStore(object_store.client, bucket, object_store.endpoint_url)
        path = ensure_checkpoint(store, anchored.uri, anchored.manifest_sha256, tmp_path / "cache")
        assert same_weights(path, model_v1)

        missing = runner.invoke(app, ["pool", "checkpoint", "--pool", str(pool_id), "--version", "7"])
        assert missing.exit_code != 0 and "has not published checkpoint 7" in str(missing.exception)

        digest = hashlib.sha256(b"made elsewhere").hexdigest()
        anchor = ["pool", "anchor-checkpoint", str(pool_id), "2", digest, "s3://elsewhere/ckpt/2/", "--key", MANAGER]
        assert runner.invoke(app, anchor).exit_code == 0
        assert onchain_manifest_sha256(deployment.admin, pool_id, 2) == bytes.fromhex(digest)
        older = json.loads(
            runner.invoke(app, ["pool", "checkpoint", "--pool", str(pool_id), "--version", "1", "--json"]).output
        )
        assert older == {**data, "block_number": older["block_number"], "tx_hash": older["tx_hash"]}
        assert older["tx_hash"].startswith("0x") and older["block_number"] > 0
        not_hex = runner.invoke(app, [*anchor[:4], "zz" * 32, *anchor[5:]])
        assert "32 bytes of hex" in str(not_hex.exception)
    finally:
        get_settings.cache_clear()


def test_published_checkpoint_value_carries_the_transaction(deployment, pool_id, object_store, unique_prefix, model_v1):
    published = publish(deployment, object_store, pool_id, 1, model_v1, unique_prefix)
    assert isinstance(published, PublishedCheckpoint)
    receipt = deployment.admin.w3.eth.get_transaction_receipt(published.tx_hash)
    events = deployment.admin.decoder().decode_receipt(receipt)
    assert [(e.name, e["version"], bytes(e["manifestSha256"])) for e in events] == [
        ("CheckpointPublished", 1, published.manifest_sha256)
    ]
