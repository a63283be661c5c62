"""The rollout file: one Parquet file per submission, one row per sample (schema version 2)."""

from proofpool.core.rollout.io import read_rollouts, read_rollouts_table, rollouts_bytes, write_rollouts
from proofpool.core.rollout.schema import (
    ROLLOUT_SCHEMA,
    SCHEMA_VERSION,
    RolloutFileError,
    RolloutFileMeta,
    RolloutSample,
    schema_error,
    validate_schema,
)

__all__ = [
    "ROLLOUT_SCHEMA",
    "SCHEMA_VERSION",
    "RolloutFileError",
    "RolloutFileMeta",
    "RolloutSample",
    "read_rollouts",
    "read_rollouts_table",
    "rollouts_bytes",
    "schema_error",
    "validate_schema",
    "write_rollouts",
]
