"""Object storage: the S3 client (`s3.py`), the devnet SeaweedFS launcher (`seaweed.py`) and
the key layout below, the one place that knows where a rollout file or a training pool's update
file (and a verdict's evidence, and a validator's judgements of a file's rows) lives.

The layout puts the pool, the node and the file's sha256 (the on-chain work key) in the
key, so a presigned URL for one key cannot write another node's files, and the validator
finds a submission's file from chain data alone.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from eth_utils import is_address, to_checksum_address

from proofpool.core.environment import SCORE_STATUSES, ScoreStatus
from proofpool.infra.storage.s3 import (
    ChecksumMismatch,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStream,
    ObjectTooLarge,
    PresignedUpload,
    RangeNotSatisfiable,
    StorageError,
    StorageUnavailable,
    normalize_sha256,
    put_presigned,
    sha256_b64,
)

ROLLOUT_CONTENT_TYPE = "application/vnd.apache.parquet"
"""Content-Type signed into rollout upload URLs (the store keeps it with the object)."""

UPDATE_CONTENT_TYPE: Final = "application/octet-stream"
"""Content-Type signed into update upload URLs: a safetensors file (it has no registered media type)."""

_ROLLOUT_KEY = re.compile(r"pools/([0-9]+)/rollouts/(0x[0-9a-fA-F]{40})/([0-9a-f]{64})\.parquet")
_UPDATE_KEY = re.compile(r"pools/([0-9]+)/updates/(0x[0-9a-fA-F]{40})/([0-9a-f]{64})\.safetensors")


@dataclass(frozen=True)
class RolloutKey:
    """The parts of a rollout object key."""

    pool_id: int
    node: str
    sha256_hex: str


@dataclass(frozen=True)
class UpdateKey:
    """The parts of a training pool's update (pseudo-gradient) object key."""

    pool_id: int
    node: str
    sha256_hex: str


def rollout_key(pool_id: int, node: str, sha256_hex: str) -> str:
    """`pools/{pool}/rollouts/{node}/{sha256}.parquet`, node checksummed, sha256 lower-case hex."""
    return _work_file_key(pool_id, node, sha256_hex, "rollouts", "parquet")


def update_key(pool_id: int, node: str, sha256_hex: str) -> str:
    """`pools/{pool}/updates/{node}/{sha256}.safetensors`: a training pool's update file (one node's
    quantized pseudo-gradient of one round), node checksummed, sha256 lower-case hex."""
    return _work_file_key(pool_id, node, sha256_hex, "updates", "safetensors")


def _work_file_key(pool_id: int, node: str, sha256_hex: str, folder: str, suffix: str) -> str:
    """`pools/{pool}/{folder}/{node}/{sha256}.{suffix}`: the one layout of a submitted file's key."""
    if pool_id < 0:
        raise ValueError(f"pool_id must be >= 0, not {pool_id}")
    if not is_address(node):
        raise ValueError(f"not an address: {node!r}")
    return f"pools/{pool_id}/{folder}/{to_checksum_address(node)}/{normalize_sha256(sha256_hex)}.{suffix}"


def evidence_key(pool_id: int, work_key_hex: str, validator: str, *, review_of_block: int | None = None) -> str:
    """`pools/{pool}/evidence/{work key}/{validator}.json`: one validator's evidence for its verdict on
    one file; `{validator}.review-{block}.json` for its review of the rejection mined in `block`."""
    if pool_id < 0:
        raise ValueError(f"pool_id must be >= 0, not {pool_id}")
    if not is_address(validator):
        raise ValueError(f"not an address: {validator!r}")
    name = to_checksum_address(validator) + ("" if review_of_block is None else f".review-{review_of_block}")
    return f"pools/{pool_id}/evidence/{normalize_sha256(work_key_hex)}/{name}.json"


def judged_key(pool_id: int, node: str, sha256_hex: str) -> str:
    """`pools/{pool}/rollouts/{node}/{sha256}.judged.json`: beside the rollout file (`rollout_key`),
    the accepting validator's judgement of each of its rows, for a pool whose scores are not
    reproducible (`proofpool.core.environment.TaskEnvironment`)."""
    return rollout_key(pool_id, node, sha256_hex).removesuffix(".parquet") + ".judged.json"


JUDGED_FORMAT: Final = 1
"""Version of the judgements document layout."""
JUDGED_CONTENT_TYPE: Final = "application/json"


class JudgementsError(ValueError):
    """A judgements document that is not one (malformed, of another file, or not row for row)."""


@dataclass(frozen=True)
class JudgedRow:
    """A validator's judgement of one row of a rollout file, in the file's row order."""

    problem_id: str
    group_id: int
    reward: float
    """The validator's reward, in [0, 1]: what the trainer trains on instead of the file's."""
    status: ScoreStatus
    """`inconclusive` rows are not trained on."""


def judged_document(work_key_hex: str, validator: str, rows: Sequence[JudgedRow]) -> bytes:
    """The canonical JSON of a file's judgements (sorted keys, no spaces)."""
    document = {
        "format": JUDGED_FORMAT,
        "file_sha256": normalize_sha256(work_key_hex),
        "validator": to_checksum_address(validator),
        "rows": [
            {"problem_id": r.problem_id, "group_id": r.group_id, "reward": r.reward, "status": r.status} for r in rows
        ],
    }
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def read_judged(data: bytes, work_key_hex: str) -> tuple[JudgedRow, ...]:
    """The rows of a judgements document of the file `work_key_hex`; `JudgementsError` otherwise."""
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise JudgementsError(f"judgements are not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != JUDGED_FORMAT:
        raise JudgementsError(f"judgements are not of format {JUDGED_FORMAT}")
    if document.get("file_sha256") != normalize_sha256(work_key_hex):
        raise JudgementsError(f"judgements of file {document.get('file_sha256')!r}, not {work_key_hex}")
    rows = document.get("rows")
    if not isinstance(rows, list):
        raise JudgementsError("judgements hold no list of rows")
    return tuple(_judged_row(i, row) for i, row in enumerate(rows))


def _judged_row(index: int, row: Any) -> JudgedRow:
    if not isinstance(row, dict):
        raise JudgementsError(f"judged row {index} is not an object")
    problem_id, group_id, reward, status = (row.get(k) for k in ("problem_id", "group_id", "reward", "status"))
    if not isinstance(problem_id, str) or isinstance(group_id, bool) or not isinstance(group_id, int):
        raise JudgementsError(f"judged row {index} has no problem id or group id")
    number = not isinstance(reward, bool) and isinstance(reward, int | float)
    if not (number and math.isfinite(reward) and 0 <= reward <= 1):
        raise JudgementsError(f"judged row {index} has reward {reward!r}, not a number in [0, 1]")
    if status not in SCORE_STATUSES:
        raise JudgementsError(f"judged row {index} has status {status!r} (expected one of {SCORE_STATUSES})")
    return JudgedRow(problem_id, group_id, float(reward), status)


def parse_rollout_key(key: str) -> RolloutKey:
    """The inverse of `rollout_key`; `ValueError` for keys outside the layout."""
    return RolloutKey(*_work_file_parts(_ROLLOUT_KEY, key, "a rollout key"))


def parse_update_key(key: str) -> UpdateKey:
    """The inverse of `update_key`; `ValueError` for keys outside the layout."""
    return UpdateKey(*_work_file_parts(_UPDATE_KEY, key, "an update key"))


def _work_file_parts(layout: re.Pattern[str], key: str, what: str) -> tuple[int, str, str]:
    """(pool id, checksummed node, sha256 hex) of a key in `layout`; only the exact form
    `_work_file_key` writes (checksummed node, lower-case sha256) is one."""
    match = layout.fullmatch(key)
    if match is None or not is_address(match.group(2)) or to_checksum_address(match.group(2)) != match.group(2):
        raise ValueError(f"not {what}: {key!r}")
    return int(match.group(1)), match.group(2), match.group(3)


__all__ = [
    "JUDGED_CONTENT_TYPE",
    "JUDGED_FORMAT",
    "ROLLOUT_CONTENT_TYPE",
    "UPDATE_CONTENT_TYPE",
    "ChecksumMismatch",
    "JudgedRow",
    "JudgementsError",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStream",
    "ObjectTooLarge",
    "PresignedUpload",
    "RangeNotSatisfiable",
    "RolloutKey",
    "StorageError",
    "StorageUnavailable",
    "UpdateKey",
    "evidence_key",
    "judged_document",
    "judged_key",
    "normalize_sha256",
    "parse_rollout_key",
    "parse_update_key",
    "put_presigned",
    "read_judged",
    "rollout_key",
    "sha256_b64",
    "update_key",
]
