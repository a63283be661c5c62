"""Object storage: the S3 client (`s3.py`), the devnet SeaweedFS launcher (`seaweed.py`) and
the key layout below, the one place that knows where a rollout file (and a verdict's evidence) lives.

The layout puts the pool, the node and the file's sha256 (the on-chain work key) in the
key, so a presigned URL for one key cannot write another node's files, and the validator
finds a submission's file from chain data alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eth_utils import is_address, to_checksum_address

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

_ROLLOUT_KEY = re.compile(r"pools/([0-9]+)/rollouts/(0x[0-9a-fA-F]{40})/([0-9a-f]{64})\.parquet")


@dataclass(frozen=True)
class RolloutKey:
    """The parts of a rollout object key."""

    pool_id: int
    node: str
    sha256_hex: str


def rollout_key(pool_id: int, node: str, sha256_hex: str) -> str:
    """`pools/{pool}/rollouts/{node}/{sha256}.parquet`, node checksummed, sha256 lower-case hex."""
    if pool_id < 0:
        raise ValueError(f"pool_id must be >= 0, not {pool_id}")
    if not is_address(node):
        raise ValueError(f"not an address: {node!r}")
    return f"pools/{pool_id}/rollouts/{to_checksum_address(node)}/{normalize_sha256(sha256_hex)}.parquet"


def evidence_key(pool_id: int, work_key_hex: str, validator: str, *, review_of_block: int | None = None) -> str:
    """`pools/{pool}/evidence/{work key}/{validator}.json`: one validator's evidence for its verdict on
    one file; `{validator}.review-{block}.json` for its review of the rejection mined in `block`."""
    if pool_id < 0:
        raise ValueError(f"pool_id must be >= 0, not {pool_id}")
    if not is_address(validator):
        raise ValueError(f"not an address: {validator!r}")
    name = to_checksum_address(validator) + ("" if review_of_block is None else f".review-{review_of_block}")
    return f"pools/{pool_id}/evidence/{normalize_sha256(work_key_hex)}/{name}.json"


def parse_rollout_key(key: str) -> RolloutKey:
    """The inverse of `rollout_key`; `ValueError` for keys outside the layout."""
    match = _ROLLOUT_KEY.fullmatch(key)
    if match is None or not is_address(match.group(2)) or to_checksum_address(match.group(2)) != match.group(2):
        raise ValueError(f"not a rollout key: {key!r}")
    return RolloutKey(int(match.group(1)), match.group(2), match.group(3))


__all__ = [
    "ROLLOUT_CONTENT_TYPE",
    "ChecksumMismatch",
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
    "evidence_key",
    "normalize_sha256",
    "parse_rollout_key",
    "put_presigned",
    "rollout_key",
    "sha256_b64",
]
