"""The pseudo-gradient file (schema version 1): one safetensors file per member per round.

This module is the single definition of the wire format, like `proofpool.core.rollout.schema` is
for rollouts. For each parameter `name` the file holds `name::codes` (uint8, the parameter's
shape) and `name::table` (float32 [blocks, 256]) with the int8 codec, or `name::fp32` (float32,
the parameter's shape) with the fp32 codec; the safetensors metadata `proofpool` key holds the
canonical JSON of `UpdateMeta` (who made it, for which pool, spec, round and base checkpoint).
The file's sha256 is the work key of the member's `submitWork`.

Files come from anyone, and validators read them before anything else: `read_update` parses
the safetensors header itself under strict bounds before handing the bytes to safetensors, and
any malformed input ends as `UpdateFileError` with a stable reason code (a verdict), never as
another exception.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Final, Literal

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from proofpool.core.diloco.codec import LEVELS, Quantized, blocks_of, dequantize, quantize
from proofpool.core.diloco.spec import CODECS
from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import SpecError, canonical_json

UPDATE_SCHEMA_VERSION: Final = 1
META_KEY: Final = "proofpool"
MAX_HEADER_BYTES: Final = 100 * 1024 * 1024
CODES: Final = "codes"
TABLE: Final = "table"
FP32: Final = "fp32"
_SUFFIXES: Final = {"int8": (CODES, TABLE), "fp32": (FP32,)}
_DTYPES: Final = {CODES: "U8", TABLE: "F32", FP32: "F32"}
_ADDRESS: Final = re.compile(r"0x[0-9a-fA-F]{40}")
_HEX64: Final = re.compile(r"[0-9a-f]{64}")
_UINT256_MAX: Final = 2**256 - 1

UpdateFileReason = Literal[
    "not_safetensors",
    "bad_metadata",
    "wrong_schema_version",
    "wrong_tensors",
    "wrong_shape",
    "wrong_dtype",
    "table_not_finite",
    "values_not_finite",
    "wrong_codec",
]


class UpdateFileError(ProofpoolError):
    """A pseudo-gradient file (or what is to be written into one) does not follow the format.

    `reason` is a stable code for verdicts and metrics; the message names the tensor or key."""

    def __init__(self, reason: UpdateFileReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: UpdateFileReason = reason
        self.detail = detail


@dataclass(frozen=True)
class UpdateMeta:
    pool_id: int
    node: str
    """The member node's address (checksummed when written by proofpool)."""
    round: int
    """The checkpoint version trained from (= the `modelVersion` of `submitWork`)."""
    base_manifest_sha256: str
    """Hex sha256 of checkpoint `round`'s manifest."""
    spec_sha256: str
    codec: str
    block_size: int
    inner_steps: int
    tokens: int
    """Tokens trained on (= the `workUnits` of `submitWork`)."""
    losses: tuple[float, ...]
    """The inner loss of each step. Not checked here (it may even be non-finite): the validator
    judges it against the spec (`loss_trace`)."""
    schema_version: int = UPDATE_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if isinstance(self.losses, (list, tuple)) and all(_is_number(v) for v in self.losses):
            with contextlib.suppress(OverflowError):  # an integer beyond float: refused just below
                object.__setattr__(self, "losses", tuple(float(v) for v in self.losses))
        problem = _meta_problem(self)
        if problem is not None:
            raise UpdateFileError("bad_metadata", problem)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "losses": list(self.losses)}


@dataclass(frozen=True)
class Update:
    """A file read back: its metadata and its tensors (`quantized` for int8, `raw` for fp32)."""

    meta: UpdateMeta
    quantized: Mapping[str, Quantized] = field(default_factory=dict)
    raw: Mapping[str, torch.Tensor] = field(default_factory=dict)

    def dequantized(self) -> dict[str, torch.Tensor]:
        """float32 values per parameter name: what the aggregator averages and replay compares."""
        if self.meta.codec == "fp32":
            return dict(self.raw)
        return {name: dequantize(q) for name, q in self.quantized.items()}


def encode_update(pseudo_gradient: Mapping[str, torch.Tensor], meta: UpdateMeta) -> bytes:
    """The file's bytes (deterministic: the same tensors and meta give the same sha256)."""
    tensors: dict[str, torch.Tensor] = {}
    for name, value in pseudo_gradient.items():
        if not name:
            raise UpdateFileError("wrong_tensors", "a parameter has an empty name")
        if not bool(torch.isfinite(value).all()):
            raise UpdateFileError("values_not_finite", f"{name} holds NaN or infinity")
        if meta.codec == "fp32":
            tensors[f"{name}::{FP32}"] = value.detach().to("cpu", torch.float32).contiguous()
        else:
            q = quantize(value, meta.block_size)
            tensors[f"{name}::{CODES}"], tensors[f"{name}::{TABLE}"] = q.codes.contiguous(), q.table.contiguous()
    try:
        header = canonical_json(meta.to_json()).decode()
    except SpecError as exc:
        raise UpdateFileError("bad_metadata", f"losses must be finite to be written: {exc}") from exc
    return save_safetensors(tensors, metadata={META_KEY: header})


def read_update(
    data: bytes,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    *,
    codec: str | None = None,
    block_size: int | None = None,
) -> Update:
    """The file in `data`, checked: with `shapes`, its parameter names must be exactly `shapes`'
    keys and each shape must match; `codec`/`block_size`, when given, must be the file's.

    Raises only `UpdateFileError`, whatever the bytes."""
    header = _header(data)
    meta = _meta(header.pop("__metadata__", None))
    if codec is not None and meta.codec != codec:
        raise UpdateFileError("wrong_codec", f"the file uses codec {meta.codec!r}, the pool {codec!r}")
    if block_size is not None and meta.block_size != block_size:
        raise UpdateFileError("wrong_codec", f"the file uses blocks of {meta.block_size}, the pool {block_size}")
    names = _check_tensors(header, meta, shapes)
    try:
        tensors = load_safetensors(data if isinstance(data, bytes) else bytes(data))
    except SafetensorError as exc:
        raise UpdateFileError("not_safetensors", str(exc)) from exc
    if meta.codec == "fp32":
        raw = {n: tensors[f"{n}::{FP32}"] for n in names}
        for name, value in raw.items():
            if not bool(torch.isfinite(value).all()):
                raise UpdateFileError("values_not_finite", f"{name}::{FP32} holds NaN or infinity")
        return Update(meta, raw=raw)
    quantized = {n: Quantized(tensors[f"{n}::{CODES}"], tensors[f"{n}::{TABLE}"], meta.block_size) for n in names}
    for name, q in quantized.items():
        if not bool(torch.isfinite(q.table).all()):
            raise UpdateFileError("table_not_finite", f"{name}::{TABLE} holds NaN or infinity")
    return Update(meta, quantized=quantized)


def _header(data: bytes) -> dict[str, Any]:
    """The safetensors JSON header, read under bounds before safetensors sees the bytes."""
    if not isinstance(data, (bytes, bytearray, memoryview)) or len(data) < 8:
        raise UpdateFileError("not_safetensors", "shorter than a safetensors header")
    size = int.from_bytes(bytes(data[:8]), "little")
    if size > MAX_HEADER_BYTES or 8 + size > len(data):
        raise UpdateFileError("not_safetensors", f"a header of {size} bytes does not fit")
    try:
        header = json.loads(bytes(data[8 : 8 + size]))
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise UpdateFileError("not_safetensors", f"the header is not JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise UpdateFileError("not_safetensors", "the header is not a JSON object")
    for key, entry in header.items():
        if key != "__metadata__" and not (
            isinstance(entry, dict)
            and isinstance(entry.get("dtype"), str)
            and _int_list(entry.get("shape"))
            and _int_list(entry.get("data_offsets"))
            and len(entry["data_offsets"]) == 2
        ):
            raise UpdateFileError("not_safetensors", f"tensor {key!r} has a malformed header entry")
    return header


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)


def _meta(metadata: Any) -> UpdateMeta:
    if not isinstance(metadata, dict) or not isinstance(metadata.get(META_KEY), str):
        raise UpdateFileError("bad_metadata", f"the safetensors metadata has no {META_KEY!r} string")
    try:
        raw = json.loads(metadata[META_KEY])
    except (ValueError, RecursionError) as exc:
        raise UpdateFileError("bad_metadata", f"{META_KEY!r} is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise UpdateFileError("bad_metadata", f"{META_KEY!r} is not a JSON object")
    version = raw.get("schema_version")
    if type(version) is not int:
        raise UpdateFileError("bad_metadata", "schema_version is missing or not an integer")
    if version != UPDATE_SCHEMA_VERSION:
        raise UpdateFileError(
            "wrong_schema_version", f"schema_version {version} (this proofpool reads {UPDATE_SCHEMA_VERSION})"
        )
    known = {f.name for f in fields(UpdateMeta)}
    if set(raw) != known:
        odd = sorted(known - set(raw)) or sorted(set(raw) - known)
        raise UpdateFileError("bad_metadata", f"{odd[0]!r} is {'missing' if odd[0] in known else 'not a known key'}")
    if not isinstance(raw["losses"], list):
        raise UpdateFileError("bad_metadata", "losses must be a list of numbers")
    return UpdateMeta(**raw)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _meta_problem(m: UpdateMeta) -> str | None:
    """What is wrong with a meta's fields (their types included: it may come from JSON), or None."""

    def count(value: Any, high: int) -> bool:
        return type(value) is int and 0 <= value <= high

    checks = (
        (count(m.pool_id, _UINT256_MAX), "pool_id is not a uint256"),
        (isinstance(m.node, str) and _ADDRESS.fullmatch(m.node) is not None, "node is not an address"),
        (count(m.round, 2**64 - 1), "round is not a checkpoint version"),
        (
            isinstance(m.base_manifest_sha256, str) and _HEX64.fullmatch(m.base_manifest_sha256) is not None,
            "base_manifest_sha256 is not 64 lowercase hex digits",
        ),
        (
            isinstance(m.spec_sha256, str) and _HEX64.fullmatch(m.spec_sha256) is not None,
            "spec_sha256 is not 64 lowercase hex digits",
        ),
        (m.codec in CODECS, f"codec must be one of {', '.join(CODECS)}"),
        (
            count(m.block_size, 1 << 30) and not (m.codec == "fp32" and m.block_size),
            "block_size is wrong for the codec",
        ),
        (count(m.inner_steps, 1 << 31), "inner_steps is not a count"),
        (count(m.tokens, 2**256 - 1), "tokens is not a count"),
        (isinstance(m.losses, tuple) and all(type(v) is float for v in m.losses), "losses is not a list of numbers"),
        (m.schema_version == UPDATE_SCHEMA_VERSION, f"schema_version must be {UPDATE_SCHEMA_VERSION}"),
    )
    return next((why for ok, why in checks if not ok), None)


def _check_tensors(
    header: Mapping[str, Any], meta: UpdateMeta, shapes: Mapping[str, tuple[int, ...]] | None
) -> list[str]:
    """The parameter names (sorted), once every tensor's name, dtype and shape is as the codec says."""
    suffixes = _SUFFIXES[meta.codec]
    by_name: dict[str, dict[str, Any]] = {}
    for key, entry in header.items():
        name, _, suffix = key.rpartition("::")
        if not name or suffix not in suffixes:
            raise UpdateFileError("wrong_tensors", f"tensor {key!r} is not one of a {meta.codec} file")
        by_name.setdefault(name, {})[suffix] = entry
    for name, parts in sorted(by_name.items()):
        missing = [s for s in suffixes if s not in parts]
        if missing:
            raise UpdateFileError("wrong_tensors", f"{name}::{missing[0]} is missing")
    if shapes is not None and set(by_name) != set(shapes):
        odd = sorted(set(shapes) - set(by_name)) or sorted(set(by_name) - set(shapes))
        why = "is missing" if odd[0] in shapes else "is not a parameter of the model"
        raise UpdateFileError("wrong_tensors", f"{odd[0]} {why}")
    for name, parts in sorted(by_name.items()):
        for suffix, entry in parts.items():
            if entry["dtype"] != _DTYPES[suffix]:
                raise UpdateFileError("wrong_dtype", f"{name}::{suffix} is {entry['dtype']}, not {_DTYPES[suffix]}")
        values = parts[CODES if meta.codec == "int8" else FP32]["shape"]
        if shapes is not None and tuple(values) != tuple(shapes[name]):
            raise UpdateFileError("wrong_shape", f"{name} has shape {tuple(values)}, the model {tuple(shapes[name])}")
        if meta.codec == "int8":
            blocks = blocks_of(math.prod(values), meta.block_size)
            if parts[TABLE]["shape"] != [blocks, LEVELS]:
                raise UpdateFileError(
                    "wrong_shape", f"{name}::{TABLE} has shape {tuple(parts[TABLE]['shape'])}, not ({blocks}, {LEVELS})"
                )
    return sorted(by_name)
