"""Writing checkpoints: sharded safetensors that load back to the same weights, a manifest
that lists every file, and deterministic shards (the same tensors give the same bytes)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from proofpool_arithmetic.build import ModelManifest, ModelSpec, create_model, init_model, save_model
from safetensors import safe_open

from proofpool.inference.model import load_model
from proofpool.infra.checkpoint import MANIFEST_NAME, CheckpointError, Reason, parse_manifest, write_checkpoint
from proofpool.infra.checkpoint.shards import INDEX_NAME, WEIGHTS_NAME

SPEC = ModelSpec(seed=3, hidden=64, layers=2, heads=2)
SHARD = 40_000
"""Bytes per shard: a third of the tiny model's ~320 kB of bf16 weights or less."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("model") / "tiny"
    return init_model(path, seed=SPEC.seed, hidden=SPEC.hidden, layers=SPEC.layers, heads=SPEC.heads)


@pytest.fixture(scope="module")
def sharded(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("ckpt") / "v1"
    return out, write_checkpoint(model_dir, out, SHARD, pool_id=1, version=1)


def weights_of(path: Path) -> dict[str, torch.Tensor]:
    return load_model(path, precision="bf16").state_dict()


def files_of(manifest) -> dict[str, str]:
    return {entry.path: entry.sha256 for entry in manifest.files}


def test_a_small_shard_size_gives_several_shards_that_load_to_the_same_weights(model_dir, sharded):
    out, _ = sharded
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 2
    assert not (out / WEIGHTS_NAME).exists()
    index = json.loads((out / INDEX_NAME).read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    for name in shards:
        with safe_open(str(out / name), framework="pt") as handle:
            keys = list(handle.keys())
        assert (out / name).stat().st_size <= SHARD + 2_000 or len(keys) == 1  # header + one oversized tensor
    source, loaded = weights_of(model_dir), weights_of(out)
    assert source.keys() == loaded.keys()
    assert all(torch.equal(source[name], loaded[name]) for name in source)


def test_the_manifest_lists_every_file_with_its_hash_and_size(sharded):
    out, manifest = sharded
    on_disk = sorted(p.name for p in out.iterdir() if p.name != MANIFEST_NAME)
    assert [entry.path for entry in manifest.files] == on_disk
    assert {"config.json", "tokenizer.json", "proofpool-model.json", INDEX_NAME} <= set(on_disk)
    for entry in manifest.files:
        body = (out / entry.path).read_bytes()
        assert (entry.sha256, entry.size) == (hashlib.sha256(body).hexdigest(), len(body))
    assert (out / MANIFEST_NAME).read_bytes() == manifest.to_bytes()
    assert parse_manifest((out / MANIFEST_NAME).read_bytes()) == manifest
    assert (manifest.pool_id, manifest.version) == (1, 1)


def test_a_large_shard_size_writes_one_model_safetensors_without_index(model_dir, sharded, tmp_path):
    manifest = write_checkpoint(model_dir, tmp_path / "one", 10**9, pool_id=1, version=1)
    assert [p for p in files_of(manifest) if p.endswith(".safetensors")] == [WEIGHTS_NAME]
    assert INDEX_NAME not in files_of(manifest)
    source, loaded = weights_of(model_dir), weights_of(tmp_path / "one")
    assert all(torch.equal(source[name], loaded[name]) for name in source)


def test_shards_are_deterministic_whatever_the_source_layout(model_dir, sharded, tmp_path):
    _, first = sharded
    again = write_checkpoint(model_dir, tmp_path / "again", SHARD, pool_id=1, version=1)
    assert again.sha256() == first.sha256()
    resharded = write_checkpoint(sharded[0], tmp_path / "from-shards", SHARD, pool_id=1, version=1)
    assert resharded.sha256() == first.sha256()  # a fetched checkpoint re-publishes to the same bytes


def test_an_in_memory_model_gives_the_same_checkpoint_and_is_left_untouched(model_dir, sharded, tmp_path):
    model = create_model(SPEC)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    config_dtype = model.config.dtype
    manifest = write_checkpoint(model, tmp_path / "mem", SHARD, pool_id=1, version=1, assets_dir=model_dir)
    assert manifest.sha256() == sharded[1].sha256()
    assert next(model.parameters()).dtype == torch.float32
    assert model.config.dtype == config_dtype
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())


def test_changing_one_tensor_changes_only_the_shard_that_holds_it(model_dir, sharded, tmp_path):
    out, first = sharded
    model = load_model(model_dir)
    with torch.no_grad():
        model.lm_head.weight.add_(0.5)
    trained = save_model(model, tmp_path / "trained", ModelManifest(spec=SPEC))
    second = write_checkpoint(trained, tmp_path / "v2", SHARD, pool_id=1, version=2)
    changed = {path for path, sha in files_of(second).items() if files_of(first).get(path) != sha}
    holder = json.loads((out / INDEX_NAME).read_text())["weight_map"]["lm_head.weight"]
    assert changed == {holder}


def test_pickled_weights_and_hidden_files_are_never_published(model_dir, tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for path in model_dir.iterdir():
        (source / path.name).write_bytes(path.read_bytes())
    (source / "pytorch_model.bin").write_bytes(b"pickle")
    (source / ".DS_Store").write_bytes(b"junk")
    (source / "notes").mkdir()
    manifest = write_checkpoint(source, tmp_path / "out", SHARD, pool_id=1, version=1)
    assert not {"pytorch_model.bin", ".DS_Store", "notes"} & set(files_of(manifest))


def copy_model(model_dir: Path, dest: Path) -> Path:
    dest.mkdir()
    for path in model_dir.iterdir():
        (dest / path.name).write_bytes(path.read_bytes())
    return dest


def no_config(src: Path) -> None:
    (src / "config.json").unlink()


def no_weights(src: Path) -> None:
    (src / WEIGHTS_NAME).unlink()


def garbage_weights(src: Path) -> None:
    (src / WEIGHTS_NAME).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}")


def truncated_weights(src: Path) -> None:
    body = (src / WEIGHTS_NAME).read_bytes()
    (src / WEIGHTS_NAME).write_bytes(body[: len(body) // 2])


def unlistable_name(src: Path) -> None:
    (src / "read me.txt").write_text("a space is not a plain file name")


def hostile_index(src: Path) -> None:
    (src / INDEX_NAME).write_text(json.dumps({"weight_map": {"w": "../../etc/passwd"}}))


@pytest.mark.parametrize(
    "damage", [no_config, no_weights, garbage_weights, truncated_weights, unlistable_name, hostile_index]
)
def test_a_bad_source_is_refused_and_leaves_nothing_behind(model_dir, tmp_path, damage):
    source = copy_model(model_dir, tmp_path / "src")
    damage(source)
    out_parent = tmp_path / "outs"
    with pytest.raises(CheckpointError) as refused:
        write_checkpoint(source, out_parent / "ckpt", SHARD, pool_id=1, version=1)
    assert refused.value.reason is Reason.SOURCE_INVALID
    assert list(out_parent.iterdir()) == []  # no output, no staging leftovers


def test_an_existing_output_and_a_model_without_assets_are_refused(model_dir, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("mine")
    with pytest.raises(CheckpointError) as taken:
        write_checkpoint(model_dir, tmp_path / "taken", SHARD, pool_id=1, version=1)
    assert taken.value.reason is Reason.SOURCE_INVALID
    assert (tmp_path / "taken" / "x").read_text() == "mine"
    with pytest.raises(CheckpointError) as no_assets:
        write_checkpoint(create_model(SPEC), tmp_path / "mem", SHARD, pool_id=1, version=1)
    assert no_assets.value.reason is Reason.SOURCE_INVALID
