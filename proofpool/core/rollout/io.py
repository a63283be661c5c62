"""Writing and reading rollout files.

Files are addressed by their sha256 (the work key on-chain), so writing is deterministic: the same
meta and samples give the same bytes with the same pyarrow version (fixed compression, no
timestamps; Parquet's `created_by` names the writer's pyarrow version). Reading never lets a
pyarrow exception escape: a file that is not Parquet, or not our schema, raises `RolloutFileError`
with a reason code the validator turns into a verdict.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO, Final

import pyarrow as pa
import pyarrow.parquet as pq

from proofpool.core.rollout.schema import (
    ROLLOUT_SCHEMA,
    RolloutFileError,
    RolloutFileMeta,
    RolloutSample,
    validate_schema,
)

_COMPRESSION: Final = "zstd"
"""Token lists compress several-fold; zstd is deterministic for a given level."""
_COMPRESSION_LEVEL: Final = 3
_READ_ERRORS: Final = (pa.ArrowException, OSError, ValueError)
"""What pyarrow raises on damaged bytes: its own errors, I/O errors, and UnicodeDecodeError (a
ValueError) from undecodable names in a footer, found by fuzzing."""


def rollouts_table(meta: RolloutFileMeta, samples: Iterable[RolloutSample]) -> pa.Table:
    """The Arrow table for these samples, with the file metadata attached."""
    rows = list(samples)
    columns = {
        field.name: pa.array([getattr(s, field.name) for s in rows], type=field.type) for field in ROLLOUT_SCHEMA
    }
    return pa.Table.from_pydict(columns, schema=ROLLOUT_SCHEMA.with_metadata(meta.to_metadata()))


def write_rollouts(
    path_or_buffer: str | Path | BinaryIO, meta: RolloutFileMeta, samples: Iterable[RolloutSample]
) -> None:
    """Write one rollout file (a path, or a binary file object such as io.BytesIO)."""
    table = rollouts_table(meta, samples)
    target = str(path_or_buffer) if isinstance(path_or_buffer, str | Path) else path_or_buffer
    pq.write_table(
        table,
        target,
        compression=_COMPRESSION,
        compression_level=_COMPRESSION_LEVEL,
        use_dictionary=False,  # dictionary pages only bloat unique ids and token lists
    )


def rollouts_bytes(meta: RolloutFileMeta, samples: Iterable[RolloutSample]) -> bytes:
    """The file's bytes, e.g. to hash and upload without touching disk."""
    buffer = io.BytesIO()
    write_rollouts(buffer, meta, samples)
    return buffer.getvalue()


def read_rollouts_table(data: bytes | bytearray | memoryview | str | Path) -> tuple[RolloutFileMeta, pa.Table]:
    """Open, check schema, metadata and nulls, and return the table (columnar, for validators).

    Raises:
        RolloutFileError: `not_parquet`, or the first schema/metadata difference, or `null_value`.
        OSError: a path that cannot be read (the caller's problem, not the file's).
    """
    raw = Path(data).read_bytes() if isinstance(data, str | Path) else bytes(data)
    try:
        parquet = pq.ParquetFile(pa.BufferReader(raw))
        schema = parquet.schema_arrow
    except _READ_ERRORS as exc:
        raise RolloutFileError("not_parquet", str(exc) or type(exc).__name__) from exc
    validate_schema(schema)
    meta = RolloutFileMeta.from_metadata(schema.metadata)
    try:
        table = parquet.read()
    except _READ_ERRORS as exc:
        raise RolloutFileError("not_parquet", f"corrupt data: {exc}") from exc
    return meta, validated_table(table)


def validated_table(table: pa.Table) -> pa.Table:
    """`table` (decoded from a file whose schema was validated) after a full validation and the null check.

    Separate from `read_rollouts_table` so a reader that decodes in bounded steps (the validator,
    `proofpool.validator.checks.file`) applies the same checks to what it decoded.

    Raises:
        RolloutFileError: `not_parquet` (invalid UTF-8, list offsets out of range), `null_value`.
    """
    try:
        table.validate(full=True)  # e.g. invalid UTF-8 in problem_id, list offsets out of range
    except _READ_ERRORS as exc:
        raise RolloutFileError("not_parquet", f"corrupt data: {exc}") from exc
    for name in ROLLOUT_SCHEMA.names:
        column = table.column(name)
        nested = pa.types.is_list(column.type) and any(chunk.flatten().null_count for chunk in column.chunks)
        if column.null_count or nested:
            raise RolloutFileError("null_value", name)
    return table


def read_rollouts(data: bytes | bytearray | memoryview | str | Path) -> tuple[RolloutFileMeta, list[RolloutSample]]:
    """Read a rollout file (its bytes or a path) into its metadata and samples.

    Raises:
        RolloutFileError: as `read_rollouts_table`.
    """
    meta, table = read_rollouts_table(data)
    samples = [RolloutSample(**row) for row in table.select(ROLLOUT_SCHEMA.names).to_pylist()]
    return meta, samples
