"""Which dataset rows a member trains on in a round: a pure function of public inputs.

A validator replays a member's inner steps, so it must draw the very same rows; the rows must
also not be the member's choice (it could pick easy or memorized rows). As with
`proofpool.core.assignment`, the draw is seeded by a domain-separated sha256 of the pool, the
round and the node, and each row is an independent sha256 draw (with replacement) over the
training rows, the held-out tail excluded. Torch-free.
"""

from __future__ import annotations

import hashlib
from typing import Final

from proofpool.core.diloco.spec import DilocoSpec
from proofpool.core.spec import canonical_json

SHARD_DOMAIN: Final = b"proofpool/diloco-shard/v1"


def round_seed(pool_id: int, round: int, node: str) -> bytes:
    """The 32-byte seed of one node's shard in one round (the node's address in any case)."""
    return hashlib.sha256(SHARD_DOMAIN + canonical_json([pool_id, round, node.lower()])).digest()


def shard_indices(seed: bytes, count: int, population: int) -> list[int]:
    """`count` row indices below `population`: the i-th is the first 8 bytes of
    sha256(seed + i as 8 big-endian bytes), big-endian, modulo `population`."""
    if count < 0 or population < 1:
        raise ValueError(f"cannot draw {count} rows from {population}")
    return [
        int.from_bytes(hashlib.sha256(seed + i.to_bytes(8, "big")).digest()[:8], "big") % population
        for i in range(count)
    ]


def node_rows(spec: DilocoSpec, pool_id: int, round: int, node: str) -> list[int]:
    """The rows a node trains on in a round: inner step i uses rows[i * B:(i + 1) * B] with
    B = spec.inner.batch_size."""
    return shard_indices(round_seed(pool_id, round, node), spec.inner.steps * spec.inner.batch_size, spec.training_rows)
