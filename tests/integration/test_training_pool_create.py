"""`proofpool pool create --spec diloco.json --model DIR --dataset FILE` on anvil and SeaweedFS: the
base model (checkpoint 0), the dataset and the spec go to the object store, and the pool commits
on-chain to the published spec's sha256 twice, as `diloco://<sha256>` and as its `specSha256`; every
role then reads back exactly the spec and dataset the creator published."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from proofpool.core.diloco.spec import parse_diloco_spec
from proofpool.envs import check_spec_commitment
from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore
from proofpool.infra.storage.seaweed import SeaweedProcess
from proofpool.training.dataset import write_dataset
from proofpool.training.published import diloco_spec_hash_of, fetch_dataset, pool_diloco_spec

pytestmark = pytest.mark.timeout(180)

ADMIN = ANVIL_KEYS[0]
VOCAB = 256


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A tiny Llama (hidden 32, 2 layers, vocabulary 256)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "model")
    return tmp_path / "model"


def test_pool_create_publishes_a_training_spec_and_commits_its_hash(
    cli: Callable[..., Any],
    seaweed: SeaweedProcess,
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {**seaweed.env(), "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    dataset = tmp_path / "data.safetensors"
    generator = torch.Generator().manual_seed(1)
    write_dataset(torch.randint(0, VOCAB, (40, 32), generator=generator, dtype=torch.int32), dataset, "random")
    spec_file = tmp_path / "diloco.json"
    cli("training", "spec", "--model", str(model), "--dataset", str(dataset), "--out", str(spec_file), "--steps", "4")

    cli("contracts", "deploy", "--key", ADMIN)
    args = ["--spec", str(spec_file), "--model", str(model), "--dataset", str(dataset)]
    result = cli("pool", "create", "--key", ADMIN, *args)

    client = ChainClient.from_settings()
    pool = client.pool.get_pool(client.pool.pool_count())
    sha = diloco_spec_hash_of(pool.model_uri)
    assert pool.model_uri == f"diloco://{sha}" and pool.spec_sha256 == bytes.fromhex(sha)
    assert f"training spec {sha} published" in " ".join(result.output.split())  # as wrapped at 80 columns
    check_spec_commitment(pool.model_uri, pool.spec_sha256)

    store = ObjectStore.from_settings(get_settings())
    stored = pool_diloco_spec(store, pool.model_uri, pool.spec_sha256)
    written = parse_diloco_spec(spec_file.read_bytes())
    assert stored.sha256() == sha != written.sha256()  # the published spec names where the files are
    assert (stored.inner, stored.outer, stored.round) == (written.inner, written.outer, written.round)
    assert stored.model.uri is not None and stored.model.manifest_sha256 is not None
    assert stored.dataset.sha256 == written.dataset.sha256 == hashlib.sha256(dataset.read_bytes()).hexdigest()
    assert fetch_dataset(store, stored, tmp_path / "fetched").read_bytes() == dataset.read_bytes()


def test_pool_create_refuses_a_dataset_other_than_the_specs(
    cli: Callable[..., Any],
    seaweed: SeaweedProcess,
    model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in seaweed.env().items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    dataset, other = tmp_path / "data.safetensors", tmp_path / "other.safetensors"
    write_dataset(torch.zeros((8, 16), dtype=torch.int32), dataset)
    write_dataset(torch.ones((8, 16), dtype=torch.int32), other)
    spec_file = tmp_path / "diloco.json"
    cli("training", "spec", "--model", str(model), "--dataset", str(dataset), "--out", str(spec_file))

    cli("contracts", "deploy", "--key", ADMIN)
    args = ["--spec", str(spec_file), "--model", str(model), "--dataset", str(other)]
    error = cli("pool", "create", "--key", ADMIN, *args, fails=True)
    assert hashlib.sha256(other.read_bytes()).hexdigest() in str(error)
    assert ChainClient.from_settings().pool.pool_count() == 0  # refused before createPool
