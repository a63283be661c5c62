"""The on-chain commitment of an `attestWork` batch, computed by the validator that sends it and
by anyone checking it (the backend's evidence route): one definition, so the two cannot differ."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def batch_evidence_sha256(hashes: Sequence[bytes | None]) -> bytes:
    """sha256 over the batch's evidence document hashes in batch order (a key decided without
    evidence counts as 32 zero bytes)."""
    return hashlib.sha256(b"".join(h if h is not None else bytes(32) for h in hashes)).digest()
