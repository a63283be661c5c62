"""The rollout file's schema (version 2): one Parquet file per submission, one row per sample.

The validator rejects any other schema, so this module is the single definition: the Arrow
schema, the file-level metadata keys, the value types workers write and validators read, and the
comparison that names the first way a file departs from it.

Version 2 added the `proofpool.spec_sha256` key: the pool's on-chain `specSha256`, so a file names
the pool spec it was made for. Version 1 files lack it and are rejected (`wrong_schema_version`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import pyarrow as pa

from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import NO_SPEC

SCHEMA_VERSION: Final = 2

META_POOL_ID: Final = b"proofpool.pool_id"
"""uint256 pool id as a decimal string."""
META_NODE: Final = b"proofpool.node"
"""The submitting node's address, 0x + 40 hex digits."""
META_SCHEMA_VERSION: Final = b"proofpool.schema_version"
"""Decimal schema version; this module reads and writes only SCHEMA_VERSION."""
META_SPEC_SHA256: Final = b"proofpool.spec_sha256"
"""The pool's on-chain `specSha256` as 64 lowercase hex digits (no 0x): the sha256 of the pool spec
a `spec://` pool runs, 64 zeros for a pool without a spec."""
METADATA_KEYS: Final = (META_POOL_ID, META_NODE, META_SCHEMA_VERSION, META_SPEC_SHA256)


ROLLOUT_SCHEMA: Final = pa.schema(
    [
        pa.field("problem_id", pa.string(), nullable=False),
        pa.field("group_id", pa.int64(), nullable=False),
        pa.field("prompt_tokens", pa.list_(pa.int32()), nullable=False),
        pa.field("completion_tokens", pa.list_(pa.int32()), nullable=False),
        pa.field("reward", pa.float32(), nullable=False),
        pa.field("advantage", pa.float32(), nullable=False),
        pa.field("sampling_seed", pa.uint64(), nullable=False),
        pa.field("temperature", pa.float32(), nullable=False),
        pa.field("model_version", pa.int64(), nullable=False),
        pa.field("proofs", pa.binary(), nullable=False),
    ]
)
"""Column names, order and types. Nullability is not compared (other writers may declare columns
nullable); an actual null anywhere is rejected when reading."""

_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]{40}")
_SHA256_HEX: Final = re.compile(r"[0-9a-f]{64}")
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]{0,77}")
_INT32: Final = (-(2**31), 2**31 - 1)
_INT64: Final = (-(2**63), 2**63 - 1)
_UINT64: Final = (0, 2**64 - 1)
_UINT256_MAX: Final = 2**256 - 1

RolloutFileReason = Literal[
    "not_parquet",
    "wrong_schema_version",
    "missing_column",
    "extra_column",
    "wrong_type",
    "missing_metadata",
    "bad_metadata",
    "null_value",
    "value_out_of_range",
]


class RolloutFileError(ProofpoolError):
    """A rollout file (or the values to write into one) does not follow the schema.

    `reason` is a stable code for verdicts and metrics; the message names the column or key.
    """

    def __init__(self, reason: RolloutFileReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: RolloutFileReason = reason
        self.detail = detail


@dataclass(frozen=True)
class RolloutFileMeta:
    """File-level key/value metadata: who submitted the file, for which pool and pool spec, in
    which format."""

    pool_id: int
    node: str
    spec_sha256: bytes = NO_SPEC
    """The pool's on-chain `specSha256` (`NO_SPEC`: the pool runs no spec)."""
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not 0 <= self.pool_id <= _UINT256_MAX:
            raise RolloutFileError("bad_metadata", f"pool_id {self.pool_id} is not a uint256")
        if not _ADDRESS.fullmatch(self.node):
            raise RolloutFileError("bad_metadata", f"node {self.node!r} is not a 0x-prefixed 20-byte address")
        if not isinstance(self.spec_sha256, bytes) or len(self.spec_sha256) != 32:
            raise RolloutFileError("bad_metadata", f"spec_sha256 {self.spec_sha256!r} is not 32 bytes")
        if self.schema_version != SCHEMA_VERSION:
            raise RolloutFileError("wrong_schema_version", _version_detail(str(self.schema_version)))

    def to_metadata(self) -> dict[bytes, bytes]:
        """The Parquet key/value metadata for this file."""
        return {
            META_POOL_ID: str(self.pool_id).encode(),
            META_NODE: self.node.encode(),
            META_SCHEMA_VERSION: str(self.schema_version).encode(),
            META_SPEC_SHA256: self.spec_sha256.hex().encode(),
        }

    @classmethod
    def from_metadata(cls, metadata: dict[bytes, bytes] | None) -> RolloutFileMeta:
        """Parse file metadata; raises RolloutFileError naming the first missing or bad key."""
        error = metadata_error(metadata)
        if error is not None:
            raise error
        assert metadata is not None  # metadata_error rejects None
        return cls(
            pool_id=int(metadata[META_POOL_ID]),
            node=metadata[META_NODE].decode(),
            spec_sha256=bytes.fromhex(metadata[META_SPEC_SHA256].decode()),
        )


@dataclass(frozen=True)
class RolloutSample:
    """One row: a completion of a prompt, its reward and group advantage, and its proofs.

    Values are normalised on construction to exactly what the file stores (token tuples, floats
    rounded to float32), so a sample read back equals the sample written.
    """

    problem_id: str
    group_id: int
    prompt_tokens: tuple[int, ...]
    completion_tokens: tuple[int, ...]
    reward: float
    advantage: float
    sampling_seed: int
    temperature: float
    model_version: int
    proofs: bytes
    """The sample's TOPLOC proofs concatenated (258 bytes per 32 completion tokens at k=128)."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise through the back door, once
        set_(self, "prompt_tokens", _ints("prompt_tokens", self.prompt_tokens, _INT32))
        set_(self, "completion_tokens", _ints("completion_tokens", self.completion_tokens, _INT32))
        for name, bounds in (("group_id", _INT64), ("sampling_seed", _UINT64), ("model_version", _INT64)):
            _check_int(name, getattr(self, name), bounds)
        for name in ("reward", "advantage", "temperature"):
            set_(self, name, float(np.float32(getattr(self, name))))
        if not isinstance(self.problem_id, str):
            raise RolloutFileError("wrong_type", f"problem_id must be str, not {type(self.problem_id).__name__}")
        if not isinstance(self.proofs, bytes):
            set_(self, "proofs", bytes(self.proofs))


def _check_int(name: str, value: object, bounds: tuple[int, int]) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise RolloutFileError("wrong_type", f"{name} must be an int, not {type(value).__name__}")
    if not bounds[0] <= int(value) <= bounds[1]:
        raise RolloutFileError("value_out_of_range", f"{name} {value} outside [{bounds[0]}, {bounds[1]}]")


def _ints(name: str, values: Sequence[int], bounds: tuple[int, int]) -> tuple[int, ...]:
    out = tuple(int(v) for v in values)
    if out and not (bounds[0] <= min(out) and max(out) <= bounds[1]):
        raise RolloutFileError("value_out_of_range", f"{name} has a value outside [{bounds[0]}, {bounds[1]}]")
    return out


def _version_detail(version: str) -> str:
    """What a `wrong_schema_version` error says about a file of `version`."""
    detail = f"{version}, expected {SCHEMA_VERSION}"
    if version == "1":
        detail += " (version 1 files predate the pool spec hash, proofpool.spec_sha256: regenerate the file)"
    return detail


def _version_error(metadata: dict[bytes, bytes]) -> RolloutFileError | None:
    version = metadata.get(META_SCHEMA_VERSION)
    if version is None or version == str(SCHEMA_VERSION).encode():
        return None
    return RolloutFileError("wrong_schema_version", _version_detail(version.decode("ascii", "replace")[:20]))


def metadata_error(metadata: dict[bytes, bytes] | None) -> RolloutFileError | None:
    """The first problem with a file's key/value metadata, or None."""
    metadata = metadata or {}
    version = _version_error(metadata)
    if version is not None:
        return version
    for key in METADATA_KEYS:
        if key not in metadata:
            return RolloutFileError("missing_metadata", key.decode())
    if not _DECIMAL.fullmatch(metadata[META_POOL_ID].decode("ascii", "replace")):
        return RolloutFileError("bad_metadata", f"{META_POOL_ID.decode()} is not a decimal uint256")
    if int(metadata[META_POOL_ID]) > _UINT256_MAX:
        return RolloutFileError("bad_metadata", f"{META_POOL_ID.decode()} exceeds uint256")
    if not _ADDRESS.fullmatch(metadata[META_NODE].decode("ascii", "replace")):
        return RolloutFileError("bad_metadata", f"{META_NODE.decode()} is not a 0x-prefixed 20-byte address")
    if not _SHA256_HEX.fullmatch(metadata[META_SPEC_SHA256].decode("ascii", "replace")):
        return RolloutFileError("bad_metadata", f"{META_SPEC_SHA256.decode()} is not 64 lowercase hex digits")
    return None


def schema_error(schema: pa.Schema) -> RolloutFileError | None:
    """The first way `schema` (with its metadata) departs from version 2, or None.

    Order: a schema version other than ours (the most useful answer for a file from another
    release), then columns in ROLLOUT_SCHEMA order (missing, then extra, then wrong type), then
    the remaining metadata keys and values.
    """
    metadata = schema.metadata or {}
    version = _version_error(metadata)
    if version is not None:
        return version
    names = set(schema.names)
    for field in ROLLOUT_SCHEMA:
        if field.name not in names:
            return RolloutFileError("missing_column", field.name)
    expected = set(ROLLOUT_SCHEMA.names)
    for name in schema.names:
        if name not in expected:
            return RolloutFileError("extra_column", name)
    if len(schema.names) != len(names):
        duplicate = next(n for n in schema.names if schema.names.count(n) > 1)
        return RolloutFileError("extra_column", f"{duplicate} (duplicated)")
    for field in ROLLOUT_SCHEMA:
        actual = schema.field(field.name).type
        if not actual.equals(field.type):
            return RolloutFileError("wrong_type", f"{field.name} is {actual}, expected {field.type}")
    return metadata_error(metadata)


def validate_schema(schema: pa.Schema) -> None:
    """Raise `schema_error(schema)` if there is one."""
    error = schema_error(schema)
    if error is not None:
        raise error
