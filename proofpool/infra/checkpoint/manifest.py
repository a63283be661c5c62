"""The checkpoint manifest: every file of a checkpoint with its sha256 and size.

The manifest is the root of the trust chain. Its own sha256 is published on-chain
(`ComputePool.publishCheckpoint`); a worker that checks the downloaded manifest against that
hash, and every downloaded file against the manifest, runs exactly the weights the pool
manager published, whatever the object store or the network did in between.

The manifest is written as canonical JSON (sorted keys, no whitespace, ASCII only), so a given
checkpoint always has one byte form and one hash. Parsing is strict: a manifest comes from the
network, so anything but the exact shape below is refused with `manifest_malformed`, and file
paths are plain file names (no directories, no `..`, no absolute paths), so a hostile manifest
cannot make a worker write outside its cache.

    {"files":[{"path":"config.json","sha256":"<64 hex>","size":714},...],
     "pool_id":1,"schema_version":1,"version":3}
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from proofpool.infra.checkpoint.errors import CheckpointError, Reason

SCHEMA_VERSION: Final = 1
"""Bump when the manifest's shape or meaning changes; older readers then refuse it by name."""
MANIFEST_NAME: Final = "proofpool-checkpoint.json"
"""File name of the manifest next to the checkpoint's files, in the store and in local copies."""
MAX_MANIFEST_BYTES: Final = 1 << 20
"""Largest manifest a reader accepts (10,000 entries take about 1 MB)."""
MAX_FILES: Final = 10_000
MAX_FILE_SIZE: Final = 1 << 40
"""1 TiB: far above any real shard, low enough that a hostile size cannot overflow anything."""
MAX_POOL_ID: Final = (1 << 256) - 1
MAX_VERSION: Final = (1 << 32) - 1
"""Checkpoint versions are `uint32` on-chain."""

_FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_TOP_KEYS: Final = frozenset({"schema_version", "pool_id", "version", "files"})
_ENTRY_KEYS: Final = frozenset({"path", "sha256", "size"})
_HASH_CHUNK: Final = 1 << 20
_MAX_DEPTH: Final = 8
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(rb"[\[\]{}]")


def _malformed(detail: str) -> CheckpointError:
    return CheckpointError(Reason.MANIFEST_MALFORMED, detail)


def check_file_name(path: object) -> str:
    """`path` if it is a plain file name a manifest may list; `manifest_malformed` otherwise.

    Only letters, digits, `.`, `_` and `-`, starting with a letter or digit: this excludes
    `..`, absolute paths, separators of any OS, hidden files, NUL bytes and the manifest's own
    name, so joining it to a directory always names a file directly inside that directory.
    """
    if not isinstance(path, str) or not _FILE_NAME.fullmatch(path):
        raise _malformed(f"file path {path!r} is not a plain file name (letters, digits, '.', '_', '-')")
    if path.casefold() == MANIFEST_NAME.casefold():
        raise _malformed(f"file path {path!r} is reserved for the manifest itself")
    return path


def _check_int(name: str, value: object, high: int) -> int:
    if type(value) is not int or not 0 <= value <= high:  # bool is an int subclass: refused too
        raise _malformed(f"{name} must be an integer in 0..{high}, not {value!r}")
    return value


@dataclass(frozen=True, order=True)
class ShardEntry:
    """One file of a checkpoint: its name in the checkpoint directory, sha256 (hex) and size."""

    path: str
    sha256: str
    """Lower-case hex sha256 of the file's bytes; also its blob name in a fetch cache."""
    size: int

    def __post_init__(self) -> None:
        check_file_name(self.path)
        if not isinstance(self.sha256, str) or not _SHA256_HEX.fullmatch(self.sha256):
            raise _malformed(f"sha256 of {self.path!r} must be 64 lower-case hex digits, not {self.sha256!r}")
        _check_int(f"size of {self.path!r}", self.size, MAX_FILE_SIZE)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}


@dataclass(frozen=True)
class CheckpointManifest:
    """Checkpoint `version` of pool `pool_id`: its files, sorted by path, each listed once."""

    pool_id: int
    version: int
    files: tuple[ShardEntry, ...]
    schema_version: int = field(default=SCHEMA_VERSION)

    def __post_init__(self) -> None:
        _check_int("pool_id", self.pool_id, MAX_POOL_ID)
        _check_int("version", self.version, MAX_VERSION)
        if self.schema_version != SCHEMA_VERSION:
            raise CheckpointError(
                Reason.MANIFEST_UNSUPPORTED,
                f"schema_version {self.schema_version!r}; this proofpool reads {SCHEMA_VERSION}",
            )
        for entry in self.files:
            if not isinstance(entry, ShardEntry):
                raise _malformed(f"files must be ShardEntry values, not {type(entry).__name__}")
        files = tuple(sorted(self.files))
        if not files:
            raise _malformed("a checkpoint lists at least one file")
        if len(files) > MAX_FILES:
            raise _malformed(f"{len(files)} files, over the limit of {MAX_FILES}")
        seen: set[str] = set()
        for entry in files:
            folded = entry.path.casefold()  # names that collide on case-insensitive file systems
            if folded in seen:
                raise _malformed(f"file {entry.path!r} is listed twice (names are compared ignoring case)")
            seen.add(folded)
        object.__setattr__(self, "files", files)

    @property
    def total_size(self) -> int:
        """Bytes of all files together."""
        return sum(entry.size for entry in self.files)

    def entry(self, path: str) -> ShardEntry | None:
        """The entry for `path`, if the checkpoint has that file."""
        return next((entry for entry in self.files if entry.path == path), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "pool_id": self.pool_id,
            "version": self.version,
            "files": [entry.to_json() for entry in self.files],
        }

    def to_bytes(self) -> bytes:
        """The canonical JSON bytes: sorted keys, no whitespace, ASCII. What is hashed and stored."""
        return canonical_bytes(self.to_json())

    def sha256(self) -> bytes:
        """sha256 of `to_bytes()`: the 32 bytes published on-chain."""
        return hashlib.sha256(self.to_bytes()).digest()

    def sha256_hex(self) -> str:
        return self.sha256().hex()


def parse_manifest(raw: bytes) -> CheckpointManifest:
    """The manifest in `raw`; `CheckpointError` (`manifest_malformed` / `manifest_unsupported`)
    for anything but a well-formed manifest of a known schema, never another exception."""
    data = strict_json(raw, "manifest", MAX_MANIFEST_BYTES, _malformed)
    if not isinstance(data, dict):
        raise _malformed(f"top level must be an object, not {type(data).__name__}")
    if "schema_version" not in data:
        raise _malformed("no schema_version")
    schema = data["schema_version"]
    if type(schema) is not int:
        raise _malformed(f"schema_version must be an integer, not {schema!r}")
    if schema != SCHEMA_VERSION:
        raise CheckpointError(
            Reason.MANIFEST_UNSUPPORTED, f"schema_version {schema}; this proofpool reads {SCHEMA_VERSION}"
        )
    _exact_keys("manifest", data, _TOP_KEYS)
    files = data["files"]
    if not isinstance(files, list):
        raise _malformed(f"files must be a list, not {type(files).__name__}")
    if len(files) > MAX_FILES:
        raise _malformed(f"{len(files)} files, over the limit of {MAX_FILES}")
    entries = []
    for index, item in enumerate(files):
        if not isinstance(item, dict):
            raise _malformed(f"files[{index}] must be an object, not {type(item).__name__}")
        _exact_keys(f"files[{index}]", item, _ENTRY_KEYS)
        entries.append(ShardEntry(path=item["path"], sha256=item["sha256"], size=item["size"]))
    return CheckpointManifest(pool_id=data["pool_id"], version=data["version"], files=tuple(entries))


def strict_json(raw: object, what: str, max_bytes: int, malformed: Callable[[str], CheckpointError]) -> Any:
    """`raw` (at most `max_bytes` of UTF-8 JSON) parsed, for the small JSON files of a checkpoint that
    come from the network (the manifest, the metrics file); anything else is `malformed(detail)`,
    never another exception: repeated keys (readers would disagree on which counts), NaN and
    Infinity (not JSON), and nesting deeper than 8 levels, refused before parsing (see
    `_nesting_depth`)."""
    if not isinstance(raw, bytes | bytearray):
        raise malformed(f"{what} must be bytes, not {type(raw).__name__}")
    if len(raw) > max_bytes:
        raise malformed(f"{len(raw)} bytes, over the limit of {max_bytes}")
    if _nesting_depth(bytes(raw)) > _MAX_DEPTH:
        raise malformed(f"nested deeper than {_MAX_DEPTH} levels")
    try:
        return json.loads(bytes(raw).decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise malformed(f"not UTF-8: {exc.reason} at byte {exc.start}") from exc
    except RecursionError as exc:
        raise malformed("nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, duplicate keys, NaN, integers too long to parse
        raise malformed(f"not valid JSON: {exc}") from exc


def canonical_bytes(data: dict[str, Any]) -> bytes:
    """Canonical JSON: sorted keys, no whitespace, ASCII only; one byte form, so one sha256."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def _nesting_depth(raw: bytes) -> int:
    """How deeply arrays and objects nest in `raw`, counted outside strings, before any parsing.

    `json.loads` recurses in C once per level, and web3's dependency py_ecc raises Python's
    recursion limit to 100,000 on import: in our processes a document of 100 KB of `[` would
    overflow the C stack and kill the worker instead of raising. A manifest nests 3 levels.
    """
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub(b"", raw)):
        depth += 1 if bracket in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


def _exact_keys(where: str, data: dict[str, Any], expected: frozenset[str]) -> None:
    missing, extra = expected - data.keys(), data.keys() - expected
    if missing or extra:
        raise _malformed(f"{where}: missing keys {sorted(missing)}, unknown keys {sorted(extra)}")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON objects with a repeated key are refused: readers would disagree on which one counts."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key {key!r} appears twice")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def hash_file(path: Path) -> tuple[str, int]:
    """sha256 hex and size of a file, read in 1 MiB chunks (shards may be large)."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def manifest_of_files(pool_id: int, version: int, paths: Iterable[Path]) -> CheckpointManifest:
    """A manifest listing `paths` (files of one directory) by name, hashed from disk."""
    entries = []
    for path in paths:
        sha256, size = hash_file(path)
        entries.append(ShardEntry(path=path.name, sha256=sha256, size=size))
    return CheckpointManifest(pool_id=pool_id, version=version, files=tuple(entries))
