"""Training pools on the real object store (SeaweedFS) and chain (anvil): the spec, base model and
dataset published and read back verified, and a round's checkpoint written, published on-chain
and fetched back with its weights, momentum and round record intact."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.spec import (
    CodecSpec,
    DilocoModel,
    DilocoSpec,
    InnerSpec,
    OuterSpec,
    ReplaySpec,
    RoundSpec,
)
from proofpool.core.diloco.update_file import UpdateMeta, encode_update, read_update
from proofpool.core.spec import SpecError
from proofpool.envs.published import spec_key
from proofpool.envs.spec import SpecMismatch
from proofpool.infra.chain.bindings import PoolParams
from proofpool.infra.checkpoint import CheckpointError, Reason, publish_checkpoint
from proofpool.infra.storage import ObjectStore
from proofpool.training.dataset import DatasetError, dataset_spec, load_dataset, write_dataset
from proofpool.training.inner import TrainJob, run_inner
from proofpool.training.published import (
    dataset_key,
    diloco_uri,
    fetch_dataset,
    fetch_diloco_spec,
    pool_diloco_spec,
    publish_diloco_spec,
)
from proofpool.training.rounds import (
    outer_round,
    read_momentum,
    read_round_record,
    read_weights,
    round_checkpoint,
    write_round_checkpoint,
)
from tests.fixtures.deployment import Deployment
from tests.unit.test_training_inner import SEQ_LEN, VOCAB, tiny_llama

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


NODES = ("0x" + "31" * 20, "0x" + "42" * 20)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_llama(tmp_path_factory.mktemp("llama") / "model", seed=3)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """48 random rows, 8 held out; a seed of its own, so its hash is this module's alone."""
    rows = torch.randint(0, VOCAB, (48, SEQ_LEN), generator=torch.Generator().manual_seed(11), dtype=torch.int32)
    path = tmp_path_factory.mktemp("data") / "data.safetensors"
    write_dataset(rows, path, name="integration")
    return path


@pytest.fixture(scope="module")
def spec(dataset: Path) -> DilocoSpec:
    """The spec before publishing (no locations yet)."""
    return DilocoSpec(
        model=DilocoModel("LlamaForCausalLM", VOCAB),
        dataset=dataset_spec(dataset, eval_sequences=8),
        inner=InnerSpec(steps=2, batch_size=4, lr=1e-3),
        outer=OuterSpec(lr=0.7, momentum=0.9, nesterov=True),
        codec=CodecSpec(),
        round=RoundSpec(deadline_seconds=60, min_contributors=1),
        validation=ReplaySpec(),
    )


@pytest.fixture(scope="module")
def stored(object_store: ObjectStore, spec: DilocoSpec, model_dir: Path, dataset: Path) -> DilocoSpec:
    return publish_diloco_spec(object_store, spec, model_dir, dataset)


def test_a_published_spec_its_dataset_and_base_model_read_back_verified(
    object_store: ObjectStore,
    deployment: Deployment,
    spec: DilocoSpec,
    stored: DilocoSpec,
    model_dir: Path,
    dataset: Path,
    tmp_path: Path,
) -> None:
    bucket = object_store.bucket
    assert stored.dataset.uri == f"s3://{bucket}/{dataset_key(spec.dataset.sha256)}"
    assert stored.model.uri is not None and stored.model.uri.startswith(f"s3://{bucket}/models/")
    assert replace(stored, model=spec.model, dataset=spec.dataset) == spec  # publishing adds locations only
    assert fetch_diloco_spec(object_store, stored.sha256()) == stored
    uri = diloco_uri(stored.sha256())
    assert pool_diloco_spec(object_store, uri, bytes.fromhex(stored.sha256())) == stored

    cache = tmp_path / "cache"
    local = fetch_dataset(object_store, stored, cache)
    assert local.is_relative_to(cache) and local.read_bytes() == dataset.read_bytes()
    assert torch.equal(load_dataset(local, stored.dataset.sha256), load_dataset(dataset))
    local.chmod(0o644)
    local.write_bytes(b"damaged")  # a damaged cache file is fetched again
    assert fetch_dataset(object_store, stored, cache).read_bytes() == dataset.read_bytes()

    v0 = round_checkpoint(None, object_store, stored, 1, 0, cache / "checkpoints")
    assert v0.is_relative_to(cache) and v0 != model_dir
    base, fetched = read_weights(model_dir), read_weights(v0)
    assert base.keys() == fetched.keys() and all(torch.equal(base[n], fetched[n]) for n in base)
    assert all(t.dtype == torch.float32 for t in fetched.values())
    assert round_checkpoint(deployment.admin, object_store, stored, 1, 0, cache / "checkpoints") == v0


def test_a_tampered_spec_dataset_or_commitment_is_refused(
    object_store: ObjectStore, stored: DilocoSpec, tmp_path: Path
) -> None:
    sha = stored.sha256()
    with pytest.raises(SpecMismatch):
        pool_diloco_spec(object_store, diloco_uri(sha), bytes(32))
    with pytest.raises(SpecError, match="not a training pool URI"):
        pool_diloco_spec(object_store, f"spec://{sha}", bytes.fromhex(sha))

    changed = replace(stored, inner=replace(stored.inner, lr=0.5))
    object_store.put_object(spec_key(changed.sha256()), stored.canonical())  # someone else's spec under its name
    with pytest.raises(SpecError, match="hashes to"):
        fetch_diloco_spec(object_store, changed.sha256())

    other = tmp_path / "other.safetensors"
    other_sha = write_dataset(torch.zeros((48, SEQ_LEN), dtype=torch.int32), other)
    object_store.put_object(dataset_key(other_sha), other.read_bytes())
    swapped = f"s3://{object_store.bucket}/{dataset_key(other_sha)}"  # another dataset where the spec's should be
    with pytest.raises(DatasetError) as raised:
        fetch_dataset(object_store, replace(stored, dataset=replace(stored.dataset, uri=swapped)), tmp_path / "fresh")
    assert raised.value.reason == "sha256_mismatch"
    elsewhere = f"s3://another-bucket/{dataset_key(stored.dataset.sha256)}"
    with pytest.raises(DatasetError) as raised:
        fetch_dataset(object_store, replace(stored, dataset=replace(stored.dataset, uri=elsewhere)), tmp_path / "fresh")
    assert raised.value.reason == "uri_invalid"


def test_a_round_checkpoint_published_on_chain_reads_back_equal(
    object_store: ObjectStore,
    deployment: Deployment,
    stored: DilocoSpec,
    dataset: Path,
    unique_prefix: str,
    tmp_path: Path,
) -> None:
    sha = stored.sha256()
    params = PoolParams(
        manager=deployment.manager.address,
        treasury=deployment.admin.address,
        model_uri=diloco_uri(sha),
        reward_per_unit=1,
        validator_fee=1,
        slash_amount=1,
        dispute_window=60,
        validator_slash_share_bps=5_000,
        spec_sha256=bytes.fromhex(sha),
    )
    pool_id, _ = deployment.admin.pool.create_pool(params)
    cache = tmp_path / "cache"
    v0 = round_checkpoint(deployment.admin, object_store, stored, pool_id, 0, cache)
    tokens = load_dataset(fetch_dataset(object_store, stored, cache), stored.dataset.sha256)

    updates = []
    for node in NODES:
        rows = node_rows(stored, pool_id, 0, node)
        result = run_inner(TrainJob(pool_id, 0, node, v0, tokens, rows, stored.inner))
        meta = UpdateMeta(
            pool_id=pool_id,
            node=node,
            round=0,
            base_manifest_sha256=str(stored.model.manifest_sha256),
            spec_sha256=sha,
            codec="int8",
            block_size=0,
            inner_steps=stored.inner.steps,
            tokens=result.tokens,
            losses=tuple(result.losses),
        )
        data = encode_update(result.pseudo_gradient, meta)
        updates.append((hashlib.sha256(data).hexdigest(), read_update(data)))
    weights, momentum, record = outer_round(v0, updates, stored, pool_id, 0, str(stored.model.manifest_sha256))
    out = tmp_path / "v1"
    write_round_checkpoint(v0, weights, momentum, record, out)
    published = publish_checkpoint(deployment.manager, object_store, pool_id, 1, out, prefix=unique_prefix)

    v1 = round_checkpoint(deployment.admin, object_store, stored, pool_id, 1, cache)
    assert v1.name == published.manifest_sha256.hex() and v1 != out
    fetched, stored_momentum = read_weights(v1), read_momentum(v1)
    assert fetched.keys() == weights.keys() and all(torch.equal(fetched[n], weights[n]) for n in weights)
    assert stored_momentum is not None and all(torch.equal(stored_momentum[n], momentum[n]) for n in momentum)
    assert read_round_record(v1) == record
    assert record.included == tuple(sorted(key for key, _ in updates))

    with pytest.raises(CheckpointError) as raised:
        round_checkpoint(deployment.admin, object_store, stored, pool_id, 2, cache)
    assert raised.value.reason == Reason.NOT_ON_CHAIN
