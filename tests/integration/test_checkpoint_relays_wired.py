"""Relays wired into the nodes: a worker's `ModelResolver` (relays from PROOFPOOL_CHECKPOINT_RELAYS)
and a validator's `ModelCache` fetch a checkpoint published on anvil through a real relay (uvicorn
over SeaweedFS), and a relay whose cached shard went bad costs a detour to the store, never trust:
the node still ends with the checkpoint the chain vouches for."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from eth_account import Account
from proofpool.validator.models import ModelCache
from proofpool.worker.models import ModelResolver
from proofpool_arithmetic.build import init_model

from proofpool.infra.chain.anvil import ANVIL_KEYS, AnvilProcess
from proofpool.infra.chain.bindings import PoolParams
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.deploy import deploy_contracts
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.checkpoint import MANIFEST_NAME, PublishedCheckpoint, is_complete, publish_checkpoint
from proofpool.infra.checkpoint.fetch import BLOBS
from proofpool.infra.checkpoint.relay import Relay, StoreUpstream
from proofpool.infra.config import get_settings
from proofpool.infra.http.node_api import Assignment
from proofpool.infra.storage import ObjectStore
from tests.integration.test_checkpoint_relay import serve

ADMIN, MANAGER = ANVIL_KEYS[0], ANVIL_KEYS[1]
SHARD = 40_000
"""Bytes per shard: the tiny model's ~270 kB of weights make 8 shards."""


@pytest.fixture(scope="module")
def chain(anvil: AnvilProcess) -> Iterator[ChainClient]:
    """The contracts on the session's anvil (the manager's client), removed again after this module."""
    snapshot = anvil.rpc("evm_snapshot")
    w3 = connect(anvil.url)
    book = deploy_contracts(w3, TxSender(w3, Account.from_key(ADMIN)))
    yield ChainClient.build(w3, book, Account.from_key(ADMIN)).as_account(Account.from_key(MANAGER))
    anvil.rpc("evm_revert", [snapshot])


@pytest.fixture(scope="module")
def published(
    chain: ChainClient, object_store: ObjectStore, tmp_path_factory: pytest.TempPathFactory
) -> tuple[PublishedCheckpoint, str]:
    """Checkpoint 1 of a new pool, in the store below a unique prefix and anchored on-chain."""
    params = PoolParams(
        manager=chain.address,
        treasury=chain.address,
        model_uri="devnet://relay-wiring-test",
        reward_per_unit=1,
        validator_fee=1,
        slash_amount=1,
        dispute_window=60,
        validator_slash_share_bps=5_000,
    )
    pool_id, _ = chain.pool.create_pool(params)
    model = init_model(tmp_path_factory.mktemp("model") / "m", seed=9, hidden=64, layers=2, heads=2)
    prefix = f"test/relay-wiring-{uuid.uuid4().hex[:12]}/"
    return publish_checkpoint(chain, object_store, pool_id, 1, model, SHARD, prefix=prefix), prefix


@pytest.fixture
def relay(
    object_store: ObjectStore, published: tuple[PublishedCheckpoint, str], tmp_path: Path
) -> Iterator[tuple[str, Relay]]:
    """A fresh relay (empty cache) mirroring the store below the checkpoint's prefix."""
    relay = Relay(tmp_path / "relay", StoreUpstream(object_store, published[1]))
    with serve(relay) as url:
        yield url, relay


def assert_is_the_published_checkpoint(path: Path, checkpoint: PublishedCheckpoint) -> None:
    assert is_complete(path) and path.name == checkpoint.manifest_sha256.hex()
    assert hashlib.sha256((path / MANIFEST_NAME).read_bytes()).digest() == checkpoint.manifest_sha256
    for entry in checkpoint.manifest.files:
        assert hashlib.sha256((path / entry.path).read_bytes()).hexdigest() == entry.sha256, entry.path


def test_a_worker_fetches_through_the_relays_of_its_settings(
    chain, object_store, published, relay, tmp_path, monkeypatch
):
    checkpoint, _ = published
    url, served_by = relay
    monkeypatch.setenv("PROOFPOOL_CHECKPOINT_RELAYS", f"{url}/, ")  # as an operator might write it
    get_settings.cache_clear()
    try:
        resolver = ModelResolver(chain, lambda: object_store, tmp_path / "cache")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    pool_id = checkpoint.manifest.pool_id
    assignment = Assignment(pool_id, 1, checkpoint.manifest_sha256, checkpoint.uri, 0, (), 0, 8, 4, 1.0)

    path = resolver.resolve(assignment)

    assert_is_the_published_checkpoint(path, checkpoint)
    stats = served_by.stats()
    assert stats.mirror_jobs == 1
    # Every file and the manifest came through the relay, none from the store.
    assert stats.bytes_served == checkpoint.manifest.total_size + len(checkpoint.manifest.to_bytes())


def test_a_validator_refuses_a_corrupted_relay_shard_and_gets_it_from_the_store(
    chain, object_store, published, relay, tmp_path, caplog
):
    checkpoint, _ = published
    url, served_by = relay
    pool_id = checkpoint.manifest.pool_id
    warm = ModelCache(chain, object_store, tmp_path / "warm", relays=[url])
    assert_is_the_published_checkpoint(warm.model_dir(pool_id, 1), checkpoint)  # the relay mirrors it
    served_before = served_by.stats().bytes_served

    # The relay's copy of the largest shard rots on disk (same size): the relay serves it as is.
    bad = max(checkpoint.manifest.files, key=lambda entry: entry.size)
    blob = tmp_path / "relay" / BLOBS / bad.sha256
    os.chmod(blob, stat.S_IRUSR | stat.S_IWUSR)
    body = bytearray(blob.read_bytes())
    body[len(body) // 2] ^= 0x01
    blob.write_bytes(bytes(body))

    cache = ModelCache(chain, object_store, tmp_path / "validator", relays=[url])
    with caplog.at_level(logging.WARNING, logger="proofpool.infra.checkpoint"):
        path = cache.model_dir(pool_id, 1)

    assert_is_the_published_checkpoint(path, checkpoint)  # verified: the store's bytes, not the relay's
    assert any("fail verification" in record.getMessage() and url in record.getMessage() for record in caplog.records)
    assert served_by.stats().bytes_served - served_before >= bad.size  # the relay did serve the bad shard
    assert cache.get(pool_id, 1) is not None  # and the verified directory loads as a model
