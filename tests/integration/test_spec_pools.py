"""`spec://<sha256>` pools: the spec, its index list and the base model published to the real
object store (SeaweedFS), and every role's environment rebuilt from them, trusting nothing the
hash does not vouch for (`proofpool.envs.published`, `proofpool.envs.environment_for`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from proofpool.devnet.tiny_model import build_tiny_qwen3

from proofpool.core.spec import PoolSpec, SpecError
from proofpool.envs import environment_for, forget_environments
from proofpool.envs.published import (
    fetch_spec,
    indices_key,
    publish_spec,
    spec_hash_of,
    spec_key,
    spec_pool_environment,
    spec_uri,
)
from proofpool.envs.spec import build_spec
from proofpool.infra.checkpoint.errors import CheckpointError
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectNotFound, ObjectStore
from proofpool.infra.storage.seaweed import SeaweedProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SETTINGS = {"batch_size": 2, "group_size": 2, "max_prompt_tokens": 1024, "max_tokens": 2048, "temperature": 1.0}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("qwen") / "model")


def _publish(store: ObjectStore, model: Path, config: dict, indices: list[int] | None = None) -> PoolSpec:
    spec = build_spec("math", config, model, indices=indices, golden=2, **SETTINGS)
    return publish_spec(store, spec, model, indices)


def test_a_published_spec_builds_the_same_environment_on_another_machine(
    object_store: ObjectStore, model: Path, tmp_path: Path
) -> None:
    chosen = [4, 0, 17, 9, 30]
    stored = _publish(object_store, model, {"families": ["linear"]}, chosen)
    assert stored.model.uri is not None and stored.model.uri.startswith(f"s3://{object_store.bucket}/models/")
    spec, indices = fetch_spec(object_store, stored.sha256())
    assert spec == stored and indices == chosen
    pool = spec_pool_environment(object_store, stored.sha256(), tmp_path / "cache")
    assert pool.model_dir.is_relative_to(tmp_path / "cache")  # fetched and verified, not the creator's copy
    assert pool.taskset.indices == tuple(chosen) and set(pool.taskset.draw(1, 50)) <= {str(i) for i in chosen}
    local = build_spec("math", {"families": ["linear"]}, model, indices=chosen, golden=2, **SETTINGS)
    assert local.golden == stored.golden and local.model.uri is None  # publishing adds only the model's location


def test_every_role_resolves_a_spec_uri_with_its_settings(
    object_store: ObjectStore, seaweed: SeaweedProcess, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored = _publish(object_store, model, {"families": ["percent"], "levels": [2]})
    for name, value in {**seaweed.env(), "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    forget_environments()
    try:
        uri = spec_uri(stored.sha256())
        assert spec_hash_of(uri.upper().replace("SPEC", "spec")) == stored.sha256()
        environment = environment_for(uri)
        assert environment.tokens.stop_ids == set(stored.generation.stop_ids)
        assert environment.base_model(uri).is_relative_to(tmp_path / "cache")
    finally:
        get_settings.cache_clear()
        forget_environments()


def test_a_tampered_spec_or_index_list_is_refused(object_store: ObjectStore, model: Path) -> None:
    stored = _publish(object_store, model, {"families": ["counting"]}, [1, 2, 3])
    sha = stored.sha256()
    object_store.put_object(indices_key(sha), b"[1,2,4]")
    with pytest.raises(SpecError, match=r"index list .* does not hash"):
        fetch_spec(object_store, sha)
    raw = stored.to_json()
    raw["generation"]["temperature"] = 0.5
    object_store.put_object(spec_key(sha), json.dumps(raw).encode())
    with pytest.raises(SpecError, match="hashes to"):
        fetch_spec(object_store, sha)
    pretty = json.dumps(stored.to_json(), indent=1).encode()  # same content, not canonical
    object_store.put_object(spec_key(hashlib.sha256(pretty).hexdigest()), pretty)
    with pytest.raises(SpecError, match="not in canonical form"):
        fetch_spec(object_store, hashlib.sha256(pretty).hexdigest())
    with pytest.raises(ObjectNotFound):
        fetch_spec(object_store, "ab" * 32)
    with pytest.raises(SpecError, match="not a spec URI"):
        spec_hash_of("spec://not-a-hash")


def test_a_tampered_base_model_file_is_refused(object_store: ObjectStore, model: Path, tmp_path: Path) -> None:
    stored = _publish(object_store, model, {"families": ["probability"]})
    assert stored.model.uri is not None
    prefix = stored.model.uri.removeprefix(f"s3://{object_store.bucket}/")
    weights = next(o.key for o in object_store.list_objects(prefix) if o.key.endswith(".safetensors"))
    object_store.put_object(weights, b"not the weights")
    with pytest.raises(CheckpointError):
        spec_pool_environment(object_store, stored.sha256(), tmp_path / "fresh-cache")


def test_pool_create_with_a_spec_commits_its_hash_on_chain(
    anvil, seaweed: SeaweedProcess, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`proofpool pool create --spec`: this machine checks the spec, publishes it with its base model,
    and the pool's on-chain model URI is spec://<sha256>, which resolves to the same environment."""
    from proofpool.cli.main import app
    from typer.testing import CliRunner

    from proofpool.core.spec import canonical_json
    from proofpool.infra.chain.anvil import ANVIL_KEYS
    from proofpool.infra.chain.client import ChainClient

    spec = build_spec("math", {"families": ["fraction"], "levels": [3]}, model, golden=2, **SETTINGS)
    spec_file = tmp_path / "spec.json"
    spec_file.write_bytes(canonical_json(spec.to_json()))
    env = {
        **seaweed.env(),
        "PROOFPOOL_RPC_URL": anvil.url,
        "PROOFPOOL_DEPLOYMENTS_DIR": str(tmp_path / "deployments"),
        "PROOFPOOL_STATE_DIR": str(tmp_path / "state"),
        "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(tmp_path / "cache"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    forget_environments()
    snapshot = anvil.rpc("evm_snapshot")
    runner = CliRunner()
    try:
        for args in (["contracts", "deploy", "--key", ANVIL_KEYS[0]], ["pool", "create", "--key", ANVIL_KEYS[0]]):
            if args[1] == "create":
                args += ["--spec", str(spec_file), "--model", str(model)]
            result = runner.invoke(app, args)
            assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
        client = ChainClient.from_settings()
        pool_id = client.pool.pool_count()
        model_uri = client.pool.get_pool(pool_id).model_uri
        assert model_uri.startswith("spec://") and f"spec {spec_hash_of(model_uri)} published" in result.output
        stored, _ = fetch_spec(ObjectStore.from_settings(get_settings()), spec_hash_of(model_uri))
        assert stored.golden == spec.golden and stored.model.manifest_sha256 is not None
        assert environment_for(model_uri).taskset.indices == tuple(range(stored.indices.count))
        refused = runner.invoke(app, ["pool", "create", "--key", ANVIL_KEYS[0], "--spec", str(spec_file)])
        assert refused.exit_code == 2 and "--spec needs --model" in refused.output
    finally:
        anvil.rpc("evm_revert", [snapshot])
        get_settings.cache_clear()
        forget_environments()
