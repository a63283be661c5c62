"""A verdict's evidence (`/v1/ledger/submissions/{pool}/{key}/evidence`) as the submission page shows
it: the commitment's status in words, the facts of the check, the document's main fields, and the
whole document, capped. Pure: API JSON in, values for the template out."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proofpool.explorer import format as fmt

STATUS_TEXT: Mapping[str, str] = {
    "matches": "evidence matches the on-chain commitment",
    "mismatch": "evidence does NOT match the on-chain commitment",
    "missing": "evidence document missing from the object store",
    "unreadable": "evidence document unreadable",
    "no_commitment": "no evidence commitment on-chain",
}
"""Each evidence `status` of the API, for people."""
DOCUMENT_FIELDS = ("verdict", "reason", "validator", "file_sha256", "pool_id", "format")
"""The document's own fields shown first, in this order; then each entry of its `evidence`."""
MAX_VALUE_CHARS = 200
"""A nested value (a list, an object) is shown as compact JSON up to this many characters."""
MAX_DOCUMENT_CHARS = 20_000
"""The whole document is shown pretty-printed up to this many characters."""


@dataclass(frozen=True)
class Fact:
    label: str
    text: str
    title: str | None = None
    """The full value when `text` is shortened."""


@dataclass(frozen=True)
class EvidenceView:
    """One verdict's evidence, ready for the template."""

    anchor: str
    verdict: str
    reason: str | None
    validator: str
    validator_short: str
    block_number: int
    status: str
    status_text: str
    ok: bool
    detail: str
    facts: list[Fact]
    fields: list[Fact]
    document_json: str | None


def _value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str | int | float):
        return str(value)
    text = json.dumps(value, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "…"


def _fact(label: str, value: Any, *, hexadecimal: bool = False) -> Fact:
    if hexadecimal and isinstance(value, str):
        return Fact(label, fmt.short_hex(value), value)
    return Fact(label, _value(value))


def _document_fields(document: Mapping[str, Any]) -> list[Fact]:
    """The document's main fields, then each entry of its `evidence` object."""
    fields = [_fact(name, document[name]) for name in DOCUMENT_FIELDS if name in document]
    evidence = document.get("evidence")
    if isinstance(evidence, Mapping):
        fields += [_fact(f"evidence.{name}", value) for name, value in sorted(evidence.items())]
    return fields


def _document_json(document: Mapping[str, Any] | None) -> str | None:
    if document is None:
        return None
    text = json.dumps(document, indent=2, sort_keys=True)
    if len(text) > MAX_DOCUMENT_CHARS:
        return text[:MAX_DOCUMENT_CHARS] + f"\n… ({len(text) - MAX_DOCUMENT_CHARS} more characters)"
    return text


def evidence_view(item: Mapping[str, Any]) -> EvidenceView:
    """One item of the evidence answer's `verdicts`."""
    facts = [
        _fact("Commitment", item.get("commitment"), hexadecimal=True),
        _fact("Committed in", item.get("commitment_tx_hash"), hexadecimal=True),
        _fact("Function", item.get("function")),
        _fact("Document", item.get("document_key")),
        _fact("Document bytes", item.get("document_bytes")),
        _fact("Hashes to the commitment", item.get("matches")),
        _fact("Names this verdict", item.get("agrees")),
    ]
    if item.get("batch_size") is not None:
        facts.append(_fact("Keys in the batch", item["batch_size"]))
    document = item.get("document")
    status = item["status"]
    return EvidenceView(
        anchor=f"evidence-{item['block_number']}-{item['log_index']}",
        verdict=item["verdict"],
        reason=item.get("reason"),
        validator=item["validator"],
        validator_short=fmt.short_hex(item["validator"]),
        block_number=item["block_number"],
        status=status,
        status_text=STATUS_TEXT.get(status, status),
        ok=status == "matches",
        detail=item.get("detail") or "",
        facts=facts,
        fields=_document_fields(document) if isinstance(document, Mapping) else [],
        document_json=_document_json(document),
    )
