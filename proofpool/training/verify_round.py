"""Recompute a training pool's outer step from the chain and the object store alone.

`proofpool ledger verify-round POOL VERSION` is the auditor's check of an aggregator: checkpoint
VERSION (its manifest hash anchored on-chain) carries the round record of the outer step that
made it (`proofpool.training.rounds.ROUND_FILE`). Every work key it lists must be an on-chain
submission of this pool for model version VERSION-1, by the node the record names, attested by a
validator (status accepted or finalized); every file must hash to its key and parse with the
model's shapes. Then checkpoint VERSION-1 and those files go through `outer_round`, the one
implementation the aggregator ran, and the published weights and momentum must equal the result
bit for bit. Nothing the aggregator's machine, the backend or its database says is trusted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from proofpool.core.diloco.update_file import Update
from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint import onchain_manifest_sha256
from proofpool.infra.storage import ObjectStore
from proofpool.training.published import is_training_pool, pool_diloco_spec
from proofpool.training.rounds import (
    RoundError,
    RoundRecord,
    outer_round,
    read_momentum,
    read_round_record,
    read_weights,
    round_checkpoint,
)
from proofpool.training.updates import UpdateUnusable, fetch_update

ATTESTED: frozenset[WorkStatus] = frozenset({WorkStatus.ACCEPTED, WorkStatus.FINALIZED})


class RoundRefuted(ProofpoolError):
    """The checkpoint's round record does not stand up to the chain or the store: a work key that
    is not an attested submission of the round, a file that does not match its key, a record that
    names another pool or version."""


@dataclass(frozen=True)
class TensorDiff:
    """A tensor the recomputation does not reproduce."""

    kind: str
    """"weights" or "momentum"."""
    name: str
    max_abs_diff: float
    """inf when the tensor is missing on one side or has another shape."""


@dataclass(frozen=True)
class RoundVerification:
    """The outcome of recomputing checkpoint `version` of `pool_id`."""

    pool_id: int
    version: int
    record: RoundRecord
    diffs: tuple[TensorDiff, ...]
    record_diff: str | None
    """What the recomputed round record says differently (None: the same)."""

    @property
    def ok(self) -> bool:
        return not self.diffs and self.record_diff is None

    def to_json(self) -> dict[str, Any]:
        return {
            "pool_id": self.pool_id,
            "version": self.version,
            "ok": self.ok,
            "files": len(self.record.included),
            "record": self.record.to_json(),
            "diffs": [
                {"kind": d.kind, "name": d.name, "max_abs_diff": None if math.isinf(d.max_abs_diff) else d.max_abs_diff}
                for d in self.diffs
            ],
            "record_diff": self.record_diff,
        }

    def line(self) -> str:
        if self.ok:
            return f"OK: checkpoint {self.version} recomputed bitwise from {len(self.record.included)} files"
        return f"MISMATCH: checkpoint {self.version} of pool {self.pool_id} is not what its round recomputes to"


def verify_round(
    client: ChainClient,
    store: ObjectStore,
    pool_id: int,
    version: int,
    cache_dir: Path,
    *,
    relays: Sequence[str] = (),
    max_file_bytes: int | None = None,
    max_checkpoint_bytes: int | None = None,
) -> RoundVerification:
    """Recompute checkpoint `version` (>= 1) of training pool `pool_id`; `RoundRefuted` when a
    chain or store check of its round fails, a `RoundVerification` listing the differences
    otherwise (`ok` when there are none). Checkpoints are fetched into `cache_dir`, verified
    against the chain (through `relays` first, if any)."""
    if version < 1:
        raise RoundRefuted(f"checkpoint {version} is not made by an outer step (versions from 1 are)")
    info = client.pool.get_pool(pool_id)
    if not is_training_pool(info.model_uri):
        raise RoundRefuted(f"pool {pool_id} is not a training pool (model URI {info.model_uri!r})")
    spec = pool_diloco_spec(store, info.model_uri, info.spec_sha256)

    def checkpoint(number: int) -> Path:
        return round_checkpoint(client, store, spec, pool_id, number, cache_dir, relays, max_bytes=max_checkpoint_bytes)

    published_dir = checkpoint(version)
    try:
        record = read_round_record(published_dir)
    except RoundError as exc:
        raise RoundRefuted(f"checkpoint {version} of pool {pool_id}: {exc}") from exc
    if record is None:
        raise RoundRefuted(f"checkpoint {version} of pool {pool_id} holds no round record")
    _check_record(record, pool_id, version, _manifest_hex(client, spec.model.manifest_sha256, pool_id, version - 1))
    previous_dir = checkpoint(version - 1)
    shapes = {name: tuple(t.shape) for name, t in read_weights(previous_dir).items()}
    updates: list[tuple[str, Update]] = []
    for work_key, node in zip(record.included, record.contributors, strict=True):
        check_submission(client, pool_id, work_key, node, version - 1)
        try:
            update = fetch_update(store, spec, pool_id, node, work_key, version - 1, shapes, max_bytes=max_file_bytes)
        except UpdateUnusable as exc:
            raise RoundRefuted(f"included file {work_key} of node {node}: {exc}") from exc
        updates.append((work_key, update))
    try:
        weights, momentum, recomputed = outer_round(
            previous_dir, updates, spec, pool_id, version - 1, record.previous_manifest_sha256
        )
        published_momentum = read_momentum(published_dir) or {}
    except RoundError as exc:
        raise RoundRefuted(f"checkpoint {version} of pool {pool_id}: {exc}") from exc
    diffs = [
        *tensor_diffs("weights", read_weights(published_dir), weights),
        *tensor_diffs("momentum", published_momentum, momentum),
    ]
    record_diff = None if recomputed == record else f"recorded {record.to_json()}, recomputed {recomputed.to_json()}"
    return RoundVerification(pool_id, version, record, tuple(diffs), record_diff)


def tensor_diffs(
    kind: str, published: Mapping[str, torch.Tensor], recomputed: Mapping[str, torch.Tensor]
) -> list[TensorDiff]:
    """Every tensor not bitwise equal between `published` and `recomputed`, by name, with the largest
    absolute difference of its elements (inf for a tensor missing on one side or of another shape)."""
    diffs = []
    for name in sorted(set(published) | set(recomputed)):
        a, b = published.get(name), recomputed.get(name)
        if a is None or b is None or a.shape != b.shape or a.dtype != b.dtype:
            diffs.append(TensorDiff(kind, name, float("inf")))
        elif not torch.equal(a, b):
            diffs.append(TensorDiff(kind, name, float((a.double() - b.double()).abs().max())))
    return diffs


def _check_record(record: RoundRecord, pool_id: int, version: int, previous_manifest: str) -> None:
    if (record.pool_id, record.version, record.round) != (pool_id, version, version - 1):
        raise RoundRefuted(
            f"the round record names pool {record.pool_id} round {record.round} -> version {record.version}, "
            f"not pool {pool_id} round {version - 1} -> version {version}"
        )
    if record.previous_manifest_sha256 != previous_manifest:
        raise RoundRefuted(
            f"the round record starts from manifest {record.previous_manifest_sha256}, "
            f"checkpoint {version - 1} is {previous_manifest}"
        )


def check_submission(client: ChainClient, pool_id: int, work_key: str, node: str, round_: int) -> None:
    """The chain's record of `work_key` must be `node`'s attested work on checkpoint `round_`."""
    work = client.pool.get_work(pool_id, bytes.fromhex(work_key))
    if work.status is WorkStatus.NONE:
        raise RoundRefuted(f"work key {work_key} is not a submission of pool {pool_id}")
    if work.status not in ATTESTED:
        raise RoundRefuted(f"work key {work_key} is {work.status.name.lower()} on chain, not attested")
    if work.model_version != round_:
        raise RoundRefuted(f"work key {work_key} was submitted for model version {work.model_version}, not {round_}")
    if work.node.lower() != node.lower():
        raise RoundRefuted(f"work key {work_key} was submitted by {work.node}, the round record says {node}")


def _manifest_hex(client: ChainClient, base_manifest: str | None, pool_id: int, version: int) -> str:
    """Hex manifest sha256 of checkpoint `version`: the spec's for version 0, the chain's after."""
    if version == 0:
        if base_manifest is None:
            raise RoundRefuted("the pool's spec names no checkpoint 0 manifest")
        return base_manifest
    digest = onchain_manifest_sha256(client, pool_id, version)
    if digest is None:
        raise RoundRefuted(f"pool {pool_id} has no checkpoint {version} on chain")
    return digest.hex()
