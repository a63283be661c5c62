"""Which model directories a running engine may serve by loading new weights (`same_model`)."""

from __future__ import annotations

from pathlib import Path

from proofpool.worker.models import same_model


def model_dir(root: Path, name: str, weights: bytes, **extra: bytes) -> Path:
    path = root / name
    path.mkdir()
    (path / "config.json").write_bytes(b'{"hidden_size": 128}')
    (path / "tokenizer.json").write_bytes(b'{"vocab": ["a", "b"]}')
    (path / "model.safetensors").write_bytes(weights)
    for file, data in extra.items():
        (path / file).write_bytes(data)
    return path


def test_checkpoints_that_differ_in_weights_only_are_the_same_model(tmp_path: Path) -> None:
    a = model_dir(tmp_path, "a", b"weights 1", **{"proofpool-checkpoint.json": b'{"version": 1}'})
    b = model_dir(tmp_path, "b", b"weights 2", **{"proofpool-checkpoint.json": b'{"version": 2}'})
    assert same_model(a, b) and same_model(b, a)


def test_sharded_weights_and_their_index_may_differ(tmp_path: Path) -> None:
    a = model_dir(tmp_path, "a", b"one file")
    shards = {"model-00001-of-00002.safetensors": b"x", "model.safetensors.index.json": b"{}"}
    b = model_dir(tmp_path, "b", b"", **shards)
    assert same_model(a, b)


def test_another_config_tokenizer_or_extra_file_is_another_model(tmp_path: Path) -> None:
    a = model_dir(tmp_path, "a", b"w")
    config = model_dir(tmp_path, "config", b"w")
    (config / "config.json").write_bytes(b'{"hidden_size": 256}')
    tokenizer = model_dir(tmp_path, "tokenizer", b"w")
    (tokenizer / "tokenizer.json").write_bytes(b'{"vocab": ["a", "c"]}')
    template = model_dir(tmp_path, "template", b"w", **{"chat_template.jinja": b"{{ messages }}"})
    for other in (config, tokenizer, template):
        assert not same_model(a, other), other.name


def test_a_directory_is_not_reloaded_into_itself_and_a_missing_one_is_not_the_same(tmp_path: Path) -> None:
    a = model_dir(tmp_path, "a", b"w")
    assert not same_model(a, a)
    assert not same_model(a, tmp_path / "gone")
