"""Checks 1-2a: the bytes are the submitted object, and they are a rollout file of this submission.

Order: sha256 against the work key, size, then the Parquet footer (schema and metadata through
`proofpool.rollout`, metadata against the submission, row count, a size estimate of the decoded
table), and only then decompression and decoding. The footer comes first because it is small and
bounds the rest: a file of a few KiB can hold billions of run-length encoded tokens, and decoding
them would take the validator down instead of rejecting the file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from proofpool.rollout import (
    ROLLOUT_SCHEMA,
    RolloutFileError,
    RolloutFileMeta,
    RolloutSample,
    read_rollouts_table,
    schema_error,
)
from validator.checks.facts import PoolRules, SubmissionFacts
from validator.checks.verdict import Verdict, quote, reject

_FOOTER_ERRORS: Final = (pa.ArrowException, OSError, ValueError)
"""What pyarrow raises on damaged footers (UnicodeDecodeError is a ValueError)."""
_PLAIN_ENCODINGS: Final = frozenset({"PLAIN", "RLE", "BIT_PACKED"})
"""Encodings whose decoded byte arrays are no larger than their encoded pages (RLE and
BIT_PACKED only encode levels here). Dictionary and delta encodings can repeat a value for free."""
_FIXED_WIDTH_BYTES: Final = 8
"""Decoded size per value of a fixed-width column at most (int64, uint64)."""
LIST_LIMITS: Final = {"prompt_tokens": "max_prompt_tokens", "completion_tokens": "max_completion_tokens"}
"""List column -> the PoolRules field that caps its length per row."""


@dataclass(frozen=True)
class ParsedFile:
    """A rollout file that parsed, matches its submission's metadata and has an acceptable size."""

    meta: RolloutFileMeta
    samples: tuple[RolloutSample, ...]


def check_object(data: bytes, sub: SubmissionFacts, rules: PoolRules) -> Verdict | None:
    """Check 1: the bytes hash to the work key on-chain and are not larger than the pool allows."""
    digest = hashlib.sha256(data).digest()
    if digest != sub.work_key:
        return reject("hash_mismatch", expected=sub.work_key.hex(), actual=digest.hex())
    if len(data) > rules.max_file_bytes:
        return reject("file_too_large", bytes=len(data), max_bytes=rules.max_file_bytes)
    return None


def read_file(data: bytes, sub: SubmissionFacts, rules: PoolRules) -> ParsedFile | Verdict:
    """Check 2a: parse the file, or the rejection naming the first thing wrong with it.

    Reasons: the rollout reader's (`not_parquet`, `wrong_schema_version`, `missing_column`,
    `extra_column`, `wrong_type`, `missing_metadata`, `bad_metadata`, `null_value`,
    `value_out_of_range`), `metadata_mismatch`, `row_count`, `length_out_of_range` (more list values
    in the footer than rows x limit) and `file_too_large` (decoded size estimate).
    """
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        schema, footer = parquet.schema_arrow, parquet.metadata
    except _FOOTER_ERRORS as exc:
        return reject("not_parquet", detail=quote(str(exc) or type(exc).__name__))
    try:
        error = schema_error(schema)
        if error is not None:
            raise error
        meta = RolloutFileMeta.from_metadata(schema.metadata)
    except RolloutFileError as exc:
        return reject(exc.reason, detail=quote(exc.detail))
    mismatch = _metadata_mismatch(meta, sub)
    if mismatch is not None:
        return mismatch
    rows = footer.num_rows
    if not 1 <= rows <= rules.max_rows:
        return reject("row_count", max(rows, 0), footer_rows=rows, max_rows=rules.max_rows)
    try:
        too_big = _footer_sizes(footer, rows, rules)
    except _FOOTER_ERRORS as exc:
        return reject("not_parquet", rows, detail=quote(f"unreadable footer: {exc}"))
    if too_big is not None:
        return too_big
    try:
        _, table = read_rollouts_table(data)
        if table.num_rows != rows:  # the footer lied about its row count
            return reject("row_count", table.num_rows, footer_rows=rows, max_rows=rules.max_rows)
        samples = tuple(RolloutSample(**row) for row in table.select(ROLLOUT_SCHEMA.names).to_pylist())
    except RolloutFileError as exc:
        return reject(exc.reason, rows, detail=quote(exc.detail))
    return ParsedFile(meta, samples)


def _metadata_mismatch(meta: RolloutFileMeta, sub: SubmissionFacts) -> Verdict | None:
    """The file must name the pool and node the chain recorded (addresses compare case-insensitively)."""
    if meta.pool_id != sub.pool_id:
        return reject("metadata_mismatch", field="pool_id", file=str(meta.pool_id), submission=str(sub.pool_id))
    if meta.node.lower() != sub.node.lower():
        return reject("metadata_mismatch", field="node", file=meta.node, submission=sub.node)
    return None


def _footer_sizes(footer: pq.FileMetaData, rows: int, rules: PoolRules) -> Verdict | None:
    """Bound the decoded table from the footer's per-column counts and sizes, before decoding.

    The token lists may hold at most rows x their per-row limit values in total (an empty list still
    counts one value); the decoded size is estimated as 8 bytes per fixed-width value, and per byte
    array column as its encoded size, or values x encoded size when an encoding can repeat bytes.
    """
    list_values = dict.fromkeys(LIST_LIMITS, 0)
    decoded = 0
    for g in range(footer.num_row_groups):
        group = footer.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            name = column.path_in_schema.split(".")[0]
            values, size = column.num_values, column.total_uncompressed_size
            if name in list_values:
                list_values[name] += values
            if column.physical_type != "BYTE_ARRAY":
                decoded += values * _FIXED_WIDTH_BYTES
            elif set(column.encodings) <= _PLAIN_ENCODINGS and not column.has_dictionary_page:
                decoded += size
            else:
                decoded += values * size
    for name, limit_field in LIST_LIMITS.items():
        limit = rows * getattr(rules, limit_field)
        if list_values[name] > limit:
            return reject("length_out_of_range", rows, column=name, footer_values=list_values[name], max_values=limit)
    if decoded > rules.max_decoded_bytes:
        return reject("file_too_large", rows, decoded_bytes_estimate=decoded, max_decoded_bytes=rules.max_decoded_bytes)
    return None
