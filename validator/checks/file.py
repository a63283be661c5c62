"""Checks 1-2a: the bytes are the submitted object, and they are a rollout file of this submission.

Order: sha256 against the work key, size, the footer's own length, then the Parquet footer
(schema and metadata through `proofpool.core.rollout`, metadata against the submission, row count,
row groups, a size estimate of the decoded table), and only then decompression and decoding. The
footer comes first because it is small and cheaply rejects most oversized files; but a file can
falsify it, so it is never what keeps the validator safe. That is `proofpool.validator.checks.decode`:
everything that parses the file runs in a memory-capped child process with a timeout, and the
decoding is bounded by a running count of what is actually decoded. See docs/validator-checks.md.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq
from proofpool.validator.checks.decode import child_limits, decode_bounded, footer_length_error, run_in_child
from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.verdict import Verdict, quote, reject

from proofpool.core.rollout import (
    ROLLOUT_SCHEMA,
    RolloutFileError,
    RolloutFileMeta,
    RolloutSample,
    schema_error,
)
from proofpool.core.rollout.io import validated_table

_FOOTER_ERRORS: Final = (pa.ArrowException, OSError, ValueError)
"""What pyarrow raises on damaged footers (UnicodeDecodeError is a ValueError)."""
_PLAIN_ENCODINGS: Final = frozenset({"PLAIN", "RLE", "BIT_PACKED"})
"""Encodings whose decoded byte arrays are no larger than their encoded pages (RLE and
BIT_PACKED only encode levels here). Dictionary and delta encodings can repeat a value for free."""
_FIXED_WIDTH_BYTES: Final = 8
"""Decoded size per value of a fixed-width column at most (int64, uint64)."""
MAX_ROW_GROUPS: Final = 64
"""pyarrow writes a rollout file (at most `PoolRules.max_rows` rows) as one row group; 64 allows
other writers' small row groups. Each row group costs a read of every column however few rows it
holds, and a flood of empty ones (165,000 in a 64 MiB file) is a way to spend memory and time."""
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
    `value_out_of_range`), `metadata_mismatch`, `spec_mismatch`, `row_count`, `too_many_row_groups`,
    `length_out_of_range` (more list values in the footer, or decoded, than rows x limit) and
    `file_too_large` (footer length, decoded size estimate from the footer, decoded size measured,
    or the decoding child's memory cap or timeout: evidence `decode`).

    Runs the parsing in a memory-capped child process (`proofpool.validator.checks.decode`) unless
    `PROOFPOOL_VALIDATOR_DECODE_IN_CHILD=0`; never raises MemoryError.
    """
    too_big = footer_length_error(data)
    if too_big is not None:
        return too_big
    limits = child_limits(rules.max_decoded_bytes)
    if limits is None:
        return parse_file(data, sub, rules)
    return run_in_child(parse_file, (data, sub, rules.for_parsing()), limits)


def parse_file(data: bytes, sub: SubmissionFacts, rules: PoolRules) -> ParsedFile | Verdict:
    """`read_file` without the child: the footer checks, then decoding bounded by the decoded bytes.

    Module-level so the decoding child can run it; called directly only where the caller bounds
    its memory itself.
    """
    try:
        parquet = pq.ParquetFile(pa.BufferReader(data))
        schema, footer = parquet.schema_arrow, parquet.metadata
    except MemoryError:  # see `_decode`
        raise
    except _FOOTER_ERRORS as exc:
        return reject("not_parquet", detail=quote(str(exc) or type(exc).__name__))
    try:
        error = schema_error(schema)
        if error is not None:
            raise error
        meta = RolloutFileMeta.from_metadata(schema.metadata)
    except RolloutFileError as exc:
        return reject(exc.reason, detail=quote(exc.detail))
    rejected = _metadata_mismatch(meta, sub, rules) or _footer_structure(footer, rules)
    if rejected is not None:
        return rejected
    rows = footer.num_rows
    try:
        too_big = _footer_sizes(footer, rows, rules)
    except _FOOTER_ERRORS as exc:
        return reject("not_parquet", rows, detail=quote(f"unreadable footer: {exc}"))
    if too_big is not None:
        return too_big
    return _decode(parquet, meta, rows, rules)


def _footer_structure(footer: pq.FileMetaData, rules: PoolRules) -> Verdict | None:
    """Row count and row groups from the footer, before reading any row group."""
    rows = footer.num_rows
    if not 1 <= rows <= rules.max_rows:
        return reject("row_count", max(rows, 0), footer_rows=rows, max_rows=rules.max_rows)
    if footer.num_row_groups > MAX_ROW_GROUPS:
        return reject("too_many_row_groups", rows, row_groups=footer.num_row_groups, max_row_groups=MAX_ROW_GROUPS)
    return None


def _decode(parquet: pq.ParquetFile, meta: RolloutFileMeta, rows: int, rules: PoolRules) -> ParsedFile | Verdict:
    """Decode with a running count of the decoded bytes, check the decoded list lengths, build the samples."""
    try:
        table = decode_bounded(parquet, rows, rules.max_decoded_bytes)
        if isinstance(table, Verdict):
            return table
        table = validated_table(table)
    except MemoryError:  # pa.ArrowMemoryError is also an ArrowException: the child's cap, not bad data
        raise
    except _FOOTER_ERRORS as exc:
        return reject("not_parquet", rows, detail=quote(f"corrupt data: {exc}"))
    except RolloutFileError as exc:
        return reject(exc.reason, rows, detail=quote(exc.detail))
    if table.num_rows != rows:  # the footer lied about its row count
        return reject("row_count", table.num_rows, footer_rows=rows, max_rows=rules.max_rows)
    too_long = _decoded_lengths(table, rows, rules)
    if too_long is not None:
        return too_long
    try:
        samples = tuple(RolloutSample(**row) for row in table.select(ROLLOUT_SCHEMA.names).to_pylist())
    except RolloutFileError as exc:
        return reject(exc.reason, rows, detail=quote(exc.detail))
    return ParsedFile(meta, samples)


def _decoded_lengths(table: pa.Table, rows: int, rules: PoolRules) -> Verdict | None:
    """The footer's list-value bound again, on the decoded lists: a footer can under-state its counts.

    Checked before the rows become Python objects, which cost ~30 times their Arrow size.
    """
    for name, limit_field in LIST_LIMITS.items():
        values = sum(len(chunk.flatten()) for chunk in table.column(name).chunks)
        limit = rows * getattr(rules, limit_field)
        if values > limit:
            return reject("length_out_of_range", rows, column=name, values=values, max_values=limit)
    return None


def _metadata_mismatch(meta: RolloutFileMeta, sub: SubmissionFacts, rules: PoolRules) -> Verdict | None:
    """The file must name the pool and node the chain recorded (addresses compare case-insensitively),
    and the pool's on-chain spec hash: a file made for another spec is the provider's fault, like a
    file naming another pool."""
    if meta.pool_id != sub.pool_id:
        return reject("metadata_mismatch", field="pool_id", file=str(meta.pool_id), submission=str(sub.pool_id))
    if meta.node.lower() != sub.node.lower():
        return reject("metadata_mismatch", field="node", file=meta.node, submission=sub.node)
    if meta.spec_sha256 != rules.spec_sha256:
        return reject("spec_mismatch", file=meta.spec_sha256.hex(), pool=rules.spec_sha256.hex())
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
