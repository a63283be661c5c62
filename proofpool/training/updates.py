"""One accepted pseudo-gradient file of a training pool, fetched from the store and checked.

The aggregator (before averaging a file) and `proofpool ledger verify-round` (before recomputing
an outer step) read a file the same way: its bytes under `update_key`, their sha256 equal to the
work key the chain recorded, the safetensors parsed with the model's parameter shapes and the
pool's codec, and its metadata naming the pool, node, round and spec the chain and the pool
say. A file that fails any of it is unusable for good (`UpdateUnusable`, with a reason code);
a store that cannot be reached is the caller's to retry (`StorageError` passes through).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from proofpool.core.diloco.spec import DilocoSpec
from proofpool.core.diloco.update_file import Update, UpdateFileError, read_update
from proofpool.core.errors import ProofpoolError
from proofpool.infra.storage import ObjectStore, update_key
from proofpool.infra.storage.s3 import ObjectTooLarge


class UpdateUnusable(ProofpoolError):
    """An update file that can never be averaged: wrong bytes, malformed, or not this round's."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}")


def fetch_update(
    store: ObjectStore,
    spec: DilocoSpec,
    pool_id: int,
    node: str,
    work_key: str,
    round_: int,
    shapes: Mapping[str, tuple[int, ...]],
    *,
    max_bytes: int | None = None,
) -> Update:
    """The parsed file of submission `work_key` (hex, no 0x) by `node` for round `round_`.

    Raises `UpdateUnusable` (`file_too_large`, `sha256_mismatch`, an `UpdateFileError` reason,
    `wrong_pool`, `wrong_node`, `wrong_round`, `wrong_spec`); store errors pass through."""
    key = update_key(pool_id, node, work_key)
    try:
        data = store.get_object(key, max_bytes=max_bytes)
    except ObjectTooLarge as exc:
        raise UpdateUnusable("file_too_large", str(exc)) from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != work_key:
        raise UpdateUnusable("sha256_mismatch", f"{key} hashes to {digest}, not its work key")
    try:
        update = read_update(data, shapes, codec=spec.codec.name, block_size=spec.codec.block_size)
    except UpdateFileError as exc:
        raise UpdateUnusable(exc.reason, exc.detail) from exc
    meta = update.meta
    if meta.pool_id != pool_id:
        raise UpdateUnusable("wrong_pool", f"{work_key} names pool {meta.pool_id}, submitted to {pool_id}")
    if meta.node.lower() != node.lower():
        raise UpdateUnusable("wrong_node", f"{work_key} names node {meta.node}, submitted by {node}")
    if meta.round != round_:
        raise UpdateUnusable("wrong_round", f"{work_key} names round {meta.round}, submitted for {round_}")
    if meta.spec_sha256 != spec.sha256():
        raise UpdateUnusable("wrong_spec", f"{work_key} names spec {meta.spec_sha256}, the pool's is {spec.sha256()}")
    return update
