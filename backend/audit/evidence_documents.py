"""Evidence documents as the audit reads them: fetched from the object store with a size cap, parsed,
compared with the verdict they are evidence of, and the hash an attestWork batch commits to."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from proofpool.backend.audit.verdict_targets import Target

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.storage import ObjectNotFound, ObjectStore, ObjectTooLarge, StorageError

MAX_DOCUMENT_BYTES = 256 * 1024
"""Largest evidence document read (a validator's is a few KiB)."""
DOCUMENT_VERDICT: Mapping[str, str] = {
    "accepted": "accepted",
    "invalid": "invalid",
    "rejected": "invalid",
    "contest": "contest",
}
"""The `verdict` an evidence document of each kind of verdict says."""


@dataclass(frozen=True)
class Document:
    """One object read from the store, or why not."""

    key: str
    data: bytes | None = None
    size: int | None = None
    problem: Literal["missing", "too_large"] | None = None

    @property
    def sha256(self) -> bytes | None:
        return None if self.data is None else hashlib.sha256(self.data).digest()


def read_document(store: ObjectStore, key: str) -> Document:
    """The document at `key`; `ServiceUnavailable` when the store cannot be read at all."""
    try:
        data = store.get_object(key, max_bytes=MAX_DOCUMENT_BYTES)
    except ObjectNotFound:
        return Document(key, problem="missing")
    except ObjectTooLarge:
        return Document(key, problem="too_large")
    except ServiceUnavailable:
        raise
    except StorageError as exc:  # credentials, bucket: the operator's to fix, not the verdict's
        raise ServiceUnavailable(f"the object store cannot be read: {exc}") from exc
    return Document(key, data, len(data))


def parse_document(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """(the document, None) or (None, why it is not a JSON object)."""
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"the document is not JSON ({exc})"
    if not isinstance(parsed, dict):
        return None, f"the document is JSON but not an object (a {type(parsed).__name__})"
    return parsed, None


def disagreements(
    document: Mapping[str, Any], pool_id: int, work_key_hex: str, target: Target, verdict: str | None = None
) -> list[str]:
    """Where the document contradicts the verdict it is evidence of (`verdict`: the one it should say,
    by default the one documents of `target`'s kind say)."""
    expected = {
        "pool_id": pool_id,
        "file_sha256": work_key_hex.removeprefix("0x"),
        "validator": target.validator,
        "verdict": verdict or DOCUMENT_VERDICT[target.verdict],
    }
    if target.verdict in ("invalid", "rejected"):
        expected["reason"] = target.reason
    return [
        f"its {name} is {document.get(name)!r}, the chain's {value!r}"
        for name, value in expected.items()
        if document.get(name) != value
    ]
