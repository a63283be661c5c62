"""The checkpoint manifest: one canonical byte form, and strict parsing of hostile input."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from proofpool.core.errors import ProofpoolError
from proofpool.infra.checkpoint import (
    MANIFEST_NAME,
    CheckpointError,
    CheckpointManifest,
    Reason,
    ShardEntry,
    parse_manifest,
)
from proofpool.infra.checkpoint.manifest import MAX_FILES, MAX_MANIFEST_BYTES

A, B = "a" * 64, "0123456789abcdef" * 4


def sample() -> CheckpointManifest:
    return CheckpointManifest(
        pool_id=7,
        version=3,
        files=(ShardEntry("tokenizer.json", B, 2079), ShardEntry("config.json", A, 714)),
    )


def test_canonical_bytes_are_sorted_compact_ascii_and_hashed():
    manifest = sample()
    expected = (
        '{"files":[{"path":"config.json","sha256":"' + A + '","size":714},'
        '{"path":"tokenizer.json","sha256":"' + B + '","size":2079}],'
        '"pool_id":7,"schema_version":1,"version":3}'
    ).encode()
    assert manifest.to_bytes() == expected
    assert manifest.sha256() == hashlib.sha256(expected).digest()
    assert manifest.sha256_hex() == hashlib.sha256(expected).hexdigest()
    assert [entry.path for entry in manifest.files] == ["config.json", "tokenizer.json"]
    assert manifest.total_size == 714 + 2079


def test_the_order_files_are_given_in_does_not_change_the_bytes():
    reversed_order = CheckpointManifest(pool_id=7, version=3, files=tuple(reversed(sample().files)))
    assert reversed_order == sample()
    assert reversed_order.to_bytes() == sample().to_bytes()


def test_parsing_round_trips_and_ignores_formatting():
    manifest = sample()
    assert parse_manifest(manifest.to_bytes()) == manifest
    pretty = json.dumps(dict(reversed(list(manifest.to_json().items()))), indent=4).encode()
    parsed = parse_manifest(pretty)
    assert parsed == manifest
    assert parsed.to_bytes() == manifest.to_bytes()
    assert parsed.entry("config.json") == ShardEntry("config.json", A, 714)
    assert parsed.entry("missing.json") is None


def test_pool_and_version_are_part_of_the_hash():
    other_pool = CheckpointManifest(pool_id=8, version=3, files=sample().files)
    other_version = CheckpointManifest(pool_id=7, version=4, files=sample().files)
    assert len({sample().sha256(), other_pool.sha256(), other_version.sha256()}) == 3


# --------------------------------------------------------------------------- hostile input


def valid() -> dict[str, Any]:
    return sample().to_json()


def with_top(key: str, value: Any) -> Callable[[], bytes]:
    def build() -> bytes:
        data = valid()
        data[key] = value
        return json.dumps(data).encode()

    return build


def without_top(key: str) -> Callable[[], bytes]:
    def build() -> bytes:
        data = valid()
        del data[key]
        return json.dumps(data).encode()

    return build


def with_entry(key: str, value: Any) -> Callable[[], bytes]:
    def build() -> bytes:
        data = valid()
        data["files"][0][key] = value
        return json.dumps(data).encode()

    return build


def with_files(files: Any) -> Callable[[], bytes]:
    return with_top("files", files)


def raw(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def entry(path: str, sha256: str = A, size: int = 1) -> dict[str, Any]:
    return {"path": path, "sha256": sha256, "size": size}


MALFORMED = Reason.MANIFEST_MALFORMED
HOSTILE: list[tuple[str, Callable[[], bytes], Reason]] = [
    ("not json", raw(b"not json"), MALFORMED),
    ("empty", raw(b""), MALFORMED),
    ("not utf-8", raw(b'{"files":"\xff\xfe"}'), MALFORMED),
    ("a list", raw(b"[]"), MALFORMED),
    ("a string", raw(b'"manifest"'), MALFORMED),
    ("nested very deeply", raw(b"[" * 100_000 + b"]" * 100_000), MALFORMED),
    ("over the size limit", raw(b" " * (MAX_MANIFEST_BYTES + 1)), MALFORMED),
    ("duplicate key", raw(sample().to_bytes()[:-1] + b',"version":4}'), MALFORMED),
    ("NaN size", raw(sample().to_bytes().replace(b'"size":714', b'"size":NaN')), MALFORMED),
    ("integer too long to parse", raw(sample().to_bytes().replace(b'"size":714', b'"size":' + b"9" * 5000)), MALFORMED),
    ("newer schema", with_top("schema_version", 2), Reason.MANIFEST_UNSUPPORTED),
    ("schema as string", with_top("schema_version", "1"), MALFORMED),
    ("no schema", without_top("schema_version"), MALFORMED),
    ("no files", without_top("files"), MALFORMED),
    ("no pool", without_top("pool_id"), MALFORMED),
    ("unknown key", with_top("signature", "0x00"), MALFORMED),
    ("negative pool", with_top("pool_id", -1), MALFORMED),
    ("pool as string", with_top("pool_id", "7"), MALFORMED),
    ("pool as bool", with_top("pool_id", True), MALFORMED),
    ("pool as float", with_top("pool_id", 7.0), MALFORMED),
    ("pool over uint256", with_top("pool_id", 2**256), MALFORMED),
    ("version over uint32", with_top("version", 2**32), MALFORMED),
    ("version null", with_top("version", None), MALFORMED),
    ("files an object", with_files({"config.json": A}), MALFORMED),
    ("files empty", with_files([]), MALFORMED),
    ("file not an object", with_files([1]), MALFORMED),
    ("file entry missing size", with_files([{"path": "config.json", "sha256": A}]), MALFORMED),
    ("file entry extra key", with_files([{**entry("config.json"), "mode": 0o777}]), MALFORMED),
    ("too many files", with_files([entry(f"f{i}") for i in range(MAX_FILES + 1)]), MALFORMED),
    ("parent traversal", with_entry("path", "../../.bashrc"), MALFORMED),
    ("dot dot", with_entry("path", ".."), MALFORMED),
    ("dot", with_entry("path", "."), MALFORMED),
    ("absolute path", with_entry("path", "/etc/passwd"), MALFORMED),
    ("subdirectory", with_entry("path", "weights/model.safetensors"), MALFORMED),
    ("backslash", with_entry("path", "..\\evil.dll"), MALFORMED),
    ("drive letter", with_entry("path", "C:evil"), MALFORMED),
    ("hidden file", with_entry("path", ".bashrc"), MALFORMED),
    ("empty path", with_entry("path", ""), MALFORMED),
    ("NUL byte", with_entry("path", "config.json\x00.txt"), MALFORMED),
    ("space", with_entry("path", "config 2.json"), MALFORMED),
    ("non-ascii", with_entry("path", "cönfig.json"), MALFORMED),
    ("path too long", with_entry("path", "a" * 201), MALFORMED),
    ("path a number", with_entry("path", 12), MALFORMED),
    ("manifest's own name", with_entry("path", MANIFEST_NAME), MALFORMED),
    ("manifest's own name in capitals", with_entry("path", MANIFEST_NAME.upper()), MALFORMED),
    ("sha256 upper case", with_entry("sha256", A.upper()), MALFORMED),
    ("sha256 with 0x", with_entry("sha256", "0x" + A[2:]), MALFORMED),
    ("sha256 short", with_entry("sha256", A[:63]), MALFORMED),
    ("sha256 a number", with_entry("sha256", 1), MALFORMED),
    ("negative size", with_entry("size", -1), MALFORMED),
    ("size as string", with_entry("size", "714"), MALFORMED),
    ("size as float", with_entry("size", 714.0), MALFORMED),
    ("size as bool", with_entry("size", True), MALFORMED),
    ("size over 1 TiB", with_entry("size", 2**41), MALFORMED),
    ("same path twice", with_files([entry("config.json"), entry("config.json", B)]), MALFORMED),
    ("same path ignoring case", with_files([entry("config.json"), entry("CONFIG.json")]), MALFORMED),
]


@pytest.mark.parametrize(("build", "reason"), [(b, r) for _, b, r in HOSTILE], ids=[n for n, _, _ in HOSTILE])
def test_hostile_manifest_is_refused_with_a_reason(build: Callable[[], bytes], reason: Reason):
    with pytest.raises(CheckpointError) as refused:
        parse_manifest(build())
    assert refused.value.reason is reason
    assert isinstance(refused.value, ProofpoolError)
    assert str(refused.value).startswith(reason.value + ": ")


def test_mutated_manifests_parse_or_raise_checkpoint_error_never_anything_else():
    rng = random.Random(20240601)
    good = bytearray(sample().to_bytes())
    outcomes = {"parsed": 0, "refused": 0}
    for _ in range(2000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(data))
            action = rng.random()
            if action < 0.5:
                data[position] = rng.randrange(256)
            elif action < 0.75:
                del data[position]
            else:
                data.insert(position, rng.choice(b'{}[]",:0123456789.-/\\ ae'))
        try:
            parsed = parse_manifest(bytes(data))
        except CheckpointError:
            outcomes["refused"] += 1
        else:
            outcomes["parsed"] += 1
            assert all(not e.path.startswith(".") and "/" not in e.path for e in parsed.files)
    assert outcomes["refused"] > 1000  # most mutations break the manifest; none crashes the parser


@pytest.mark.parametrize(
    "build",
    [
        lambda: ShardEntry("../x", A, 1),
        lambda: ShardEntry("x", "zz", 1),
        lambda: ShardEntry("x", A, -5),
        lambda: CheckpointManifest(pool_id=1, version=1, files=()),
        lambda: CheckpointManifest(pool_id=-1, version=1, files=(ShardEntry("x", A, 1),)),
        lambda: CheckpointManifest(pool_id=1, version=1, files=("x",)),  # type: ignore[arg-type]
    ],
)
def test_values_built_in_code_are_checked_like_parsed_ones(build: Callable[[], object]):
    with pytest.raises(CheckpointError) as refused:
        build()
    assert refused.value.reason is Reason.MANIFEST_MALFORMED
