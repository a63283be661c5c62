"""The rollout file: exact schema, round trip, deterministic bytes, and rejection with reasons."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proofpool.core.rollout import (
    ROLLOUT_SCHEMA,
    RolloutFileError,
    RolloutFileMeta,
    RolloutSample,
    read_rollouts,
    rollouts_bytes,
    schema_error,
    validate_schema,
    write_rollouts,
)
from proofpool.core.rollout.schema import (
    META_NODE,
    META_POOL_ID,
    META_SCHEMA_VERSION,
    META_SPEC_SHA256,
    SCHEMA_VERSION,
)
from proofpool.core.spec import NO_SPEC

NODE = "0x" + "ab" * 20
SPEC = hashlib.sha256(b"a pool spec").digest()
META = RolloutFileMeta(pool_id=2**200 + 7, node=NODE, spec_sha256=SPEC)


def _sample(i: int, **changes) -> RolloutSample:
    values = {
        "problem_id": f"add-{i}-{i + 1}",
        "group_id": i // 4,
        "prompt_tokens": (1, 2, 3, i),
        "completion_tokens": tuple(range(i % 5 + 1)),
        "reward": float(i % 2),
        "advantage": 0.1 * i,  # not float32-exact: normalised on construction
        "sampling_seed": 2**64 - 1 - i,
        "temperature": 0.7,
        "model_version": 3,
        "proofs": bytes([i]) * 258,
    }
    values.update(changes)
    return RolloutSample(**values)


SAMPLES = [_sample(i) for i in range(8)]


def test_round_trip_through_bytes_and_path(tmp_path: Path) -> None:
    data = rollouts_bytes(META, SAMPLES)
    assert read_rollouts(data) == (META, SAMPLES)
    path = tmp_path / "r.parquet"
    write_rollouts(path, META, SAMPLES)
    assert read_rollouts(path) == (META, SAMPLES)
    assert read_rollouts(str(path)) == (META, SAMPLES)
    assert path.read_bytes() == data


def test_bytes_are_deterministic() -> None:
    first = hashlib.sha256(rollouts_bytes(META, SAMPLES)).hexdigest()
    again = hashlib.sha256(rollouts_bytes(RolloutFileMeta(META.pool_id, NODE, SPEC), [_sample(i) for i in range(8)]))
    assert again.hexdigest() == first
    assert hashlib.sha256(rollouts_bytes(META, SAMPLES[:-1])).hexdigest() != first
    other_spec = RolloutFileMeta(META.pool_id, NODE, NO_SPEC)  # the spec hash is part of the bytes
    assert hashlib.sha256(rollouts_bytes(other_spec, SAMPLES)).hexdigest() != first


def test_file_has_exactly_the_design_schema() -> None:
    parquet = pq.ParquetFile(io.BytesIO(rollouts_bytes(META, SAMPLES)))
    schema = parquet.schema_arrow
    assert [(f.name, str(f.type)) for f in schema] == [
        ("problem_id", "string"),
        ("group_id", "int64"),
        ("prompt_tokens", "list<element: int32>"),
        ("completion_tokens", "list<element: int32>"),
        ("reward", "float"),
        ("advantage", "float"),
        ("sampling_seed", "uint64"),
        ("temperature", "float"),
        ("model_version", "int64"),
        ("proofs", "binary"),
    ]
    assert schema.metadata == {
        META_POOL_ID: str(2**200 + 7).encode(),
        META_NODE: NODE.encode(),
        META_SCHEMA_VERSION: b"2",
        META_SPEC_SHA256: SPEC.hex().encode(),
    }
    assert parquet.metadata.num_rows == 8
    validate_schema(schema)


def test_samples_hold_what_the_file_stores() -> None:
    s = _sample(3)
    assert s.advantage == pytest.approx(0.3) and s.advantage != 0.3  # float32-rounded
    assert s.completion_tokens == (0, 1, 2, 3) and isinstance(s.prompt_tokens, tuple)
    assert _sample(3, proofs=bytearray(b"ab")).proofs == b"ab"


def test_empty_file_round_trips() -> None:
    assert read_rollouts(rollouts_bytes(META, [])) == (META, [])


def test_a_file_of_a_pool_without_spec_carries_64_zeros() -> None:
    meta = RolloutFileMeta(pool_id=1, node=NODE)
    assert meta.spec_sha256 == NO_SPEC == bytes(32)
    assert meta.to_metadata()[META_SPEC_SHA256] == b"0" * 64
    assert read_rollouts(rollouts_bytes(meta, SAMPLES))[0] == meta


def test_a_version_1_file_is_refused_as_predating_the_spec_hash() -> None:
    """A file written before version 2: no spec hash, version 1."""
    assert SCHEMA_VERSION == 2
    v1 = {k: v for k, v in META.to_metadata().items() if k != META_SPEC_SHA256} | {META_SCHEMA_VERSION: b"1"}
    with pytest.raises(RolloutFileError) as exc:
        read_rollouts(_file(_table(metadata=v1)))
    assert exc.value.reason == "wrong_schema_version"
    assert "version 1 files predate the pool spec hash" in str(exc.value)
    assert "expected 2" in str(exc.value)


@pytest.mark.parametrize(
    "changes",
    [
        {"prompt_tokens": (2**31,)},
        {"completion_tokens": (-(2**31) - 1,)},
        {"sampling_seed": -1},
        {"sampling_seed": 2**64},
        {"group_id": 2**63},
        {"model_version": -(2**63) - 1},
    ],
)
def test_values_out_of_range_are_refused_when_writing(changes) -> None:
    with pytest.raises(RolloutFileError) as exc:
        _sample(0, **changes)
    assert exc.value.reason == "value_out_of_range"


@pytest.mark.parametrize(
    "kwargs, reason",
    [
        ({"pool_id": -1, "node": NODE}, "bad_metadata"),
        ({"pool_id": 2**256, "node": NODE}, "bad_metadata"),
        ({"pool_id": 1, "node": "0x1234"}, "bad_metadata"),
        ({"pool_id": 1, "node": NODE, "schema_version": 1}, "wrong_schema_version"),
        ({"pool_id": 1, "node": NODE, "schema_version": 3}, "wrong_schema_version"),
        ({"pool_id": 1, "node": NODE, "spec_sha256": SPEC[:31]}, "bad_metadata"),
        ({"pool_id": 1, "node": NODE, "spec_sha256": SPEC.hex()}, "bad_metadata"),
    ],
)
def test_bad_meta_is_refused(kwargs, reason: str) -> None:
    with pytest.raises(RolloutFileError) as exc:
        RolloutFileMeta(**kwargs)
    assert exc.value.reason == reason


# --- foreign files: each rejected with the first difference -----------------------------------


def _table(**overrides) -> pa.Table:
    """A valid table with columns replaced/removed (value None removes) and metadata overrides."""
    meta = overrides.pop("metadata", META.to_metadata())
    data = pq.read_table(io.BytesIO(rollouts_bytes(META, SAMPLES[:2])))
    columns = {name: data.column(name) for name in data.column_names}
    for name, value in overrides.items():
        if value is None:
            columns.pop(name)
        else:
            columns[name] = value
    return pa.table(columns).replace_schema_metadata(meta)


def _file(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


def _meta_without(key: bytes) -> dict[bytes, bytes]:
    return {k: v for k, v in META.to_metadata().items() if k != key}


FOREIGN = [
    ("missing column", {"proofs": None}, "missing_column", "proofs"),
    ("missing first of two", {"reward": None, "proofs": None}, "missing_column", "reward"),
    ("extra column", {"logprobs": pa.array([1.0, 2.0])}, "extra_column", "logprobs"),
    ("reward as float64", {"reward": pa.array([1.0, 0.0], pa.float64())}, "wrong_type", "reward"),
    ("seed as int64", {"sampling_seed": pa.array([1, 2], pa.int64())}, "wrong_type", "sampling_seed"),
    ("tokens as int64", {"prompt_tokens": pa.array([[1], [2]], pa.list_(pa.int64()))}, "wrong_type", "prompt_tokens"),
    ("large string", {"problem_id": pa.array(["a", "b"], pa.large_string())}, "wrong_type", "problem_id"),
    ("proofs as string", {"proofs": pa.array(["x", "y"])}, "wrong_type", "proofs"),
    ("no metadata", {"metadata": {}}, "missing_metadata", "proofpool.pool_id"),
    ("no node", {"metadata": _meta_without(META_NODE)}, "missing_metadata", "proofpool.node"),
    ("no version", {"metadata": _meta_without(META_SCHEMA_VERSION)}, "missing_metadata", "schema_version"),
    ("no spec hash", {"metadata": _meta_without(META_SPEC_SHA256)}, "missing_metadata", "proofpool.spec_sha256"),
    ("version 3", {"metadata": {**META.to_metadata(), META_SCHEMA_VERSION: b"3"}}, "wrong_schema_version", "3"),
    (
        "spec hash 0x",
        {"metadata": {**META.to_metadata(), META_SPEC_SHA256: b"0x" + SPEC.hex().encode()}},
        "bad_metadata",
        "spec_sha256",
    ),
    (
        "spec hash upper",
        {"metadata": {**META.to_metadata(), META_SPEC_SHA256: SPEC.hex().upper().encode()}},
        "bad_metadata",
        "spec_sha256",
    ),
    (
        "spec hash short",
        {"metadata": {**META.to_metadata(), META_SPEC_SHA256: b"00" * 31}},
        "bad_metadata",
        "spec_sha256",
    ),
    ("bad pool id", {"metadata": {**META.to_metadata(), META_POOL_ID: b"01"}}, "bad_metadata", "pool_id"),
    ("bad node", {"metadata": {**META.to_metadata(), META_NODE: b"alice"}}, "bad_metadata", "node"),
    ("null reward", {"reward": pa.array([None, 1.0], pa.float32())}, "null_value", "reward"),
    ("null token", {"completion_tokens": pa.array([[1, None], [2]], pa.list_(pa.int32()))}, "null_value", "completion"),
    ("null list", {"prompt_tokens": pa.array([None, [2]], pa.list_(pa.int32()))}, "null_value", "prompt_tokens"),
]


@pytest.mark.parametrize("overrides, reason, named", [f[1:] for f in FOREIGN], ids=[f[0] for f in FOREIGN])
def test_foreign_file_is_rejected_with_first_difference(overrides, reason: str, named: str) -> None:
    with pytest.raises(RolloutFileError) as exc:
        read_rollouts(_file(_table(**overrides)))
    assert exc.value.reason == reason
    assert named in str(exc.value)


def test_schema_error_returns_instead_of_raising() -> None:
    assert schema_error(ROLLOUT_SCHEMA.with_metadata(META.to_metadata())) is None
    error = schema_error(ROLLOUT_SCHEMA)
    assert error is not None and error.reason == "missing_metadata"
    other_version = pa.schema([pa.field("x", pa.int8())], metadata={META_SCHEMA_VERSION: b"9"})
    assert schema_error(other_version).reason == "wrong_schema_version"  # before the column diffs


@pytest.mark.parametrize(
    "data",
    [b"", b"not parquet at all", b"PAR1", b"PAR1" + b"\x00" * 100 + b"PAR1", b'{"json": true}'],
    ids=["empty", "text", "magic only", "magic pair", "json"],
)
def test_not_parquet_is_a_rollout_file_error(data: bytes) -> None:
    with pytest.raises(RolloutFileError) as exc:
        read_rollouts(data)
    assert exc.value.reason == "not_parquet"


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fuzz_damaged_files_raise_only_rollout_file_errors(data: st.DataObject) -> None:
    raw = bytearray(rollouts_bytes(META, SAMPLES))
    cut = data.draw(st.integers(0, len(raw)))
    edits = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), max_size=4))
    for offset, value in edits:
        raw[offset] = value
    try:
        meta, samples = read_rollouts(bytes(raw[:cut] if data.draw(st.booleans()) else raw))
    except RolloutFileError:
        return
    assert isinstance(meta, RolloutFileMeta) and all(isinstance(s, RolloutSample) for s in samples)
