"""A validator's view of training pools (DiLoCo): which pools they are, and what judging their files needs.

A pool whose on-chain model URI is `diloco://<sha>` is a training pool: its files are judged by
`proofpool.validator.checks.update`, not the RL checks. This module assembles that judge's facts
from the chain (as of the submission's block) and the pool's published spec, and its replay from
public inputs: the round's checkpoint (the chain is the trust root for versions >= 1, the spec for
version 0), the pool's dataset and the node's shard (`proofpool.core.diloco.shard.node_rows`).

`TrainingPools` is the per-process cache (one per `Resources`): the spec of each pool (and which
pools are not training pools), the parameter shapes per spec, and the dataset tensor of the most
recently used spec(s) only, since a dataset can be large. Checkpoints and dataset files live in the
validator's checkpoint cache directory on disk (`Settings.checkpoint_cache_dir`), verified when
fetched. A spec, dataset or checkpoint that cannot be fetched or verified is the pool's problem,
never the submitter's: `ModelUnavailable`, which the task retries, and never a verdict.
"""

from __future__ import annotations

import statistics
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from proofpool.validator.checks.facts import SubmissionFacts
from proofpool.validator.checks.update import RoundFacts, judge_update
from proofpool.validator.checks.verdict import Verdict
from proofpool.validator.models import ModelUnavailable
from proofpool.validator.submissions import IndexedSubmission

from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.spec import DilocoSpec
from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.bindings import Checkpoint
from proofpool.infra.checkpoint import onchain_checkpoint, onchain_manifest_sha256
from proofpool.training.dataset import load_dataset
from proofpool.training.inner import InnerResult, TrainJob, load_model, parameter_shapes, run_inner
from proofpool.training.published import fetch_dataset, is_training_pool, pool_diloco_spec
from proofpool.training.rounds import read_momentum, round_checkpoint

if TYPE_CHECKING:
    import torch
    from proofpool.validator.resources import Resources

DATASETS_KEPT: Final = 1
"""Dataset tensors held in memory per process (most recently used first out)."""
POOLS_KEPT: Final = 4096
"""Pools remembered (their spec, or that they are not training pools)."""


@dataclass(frozen=True)
class TrainingPool:
    """A training pool as this validator judges it."""

    pool_id: int
    spec: DilocoSpec
    """The pool's spec, verified against its on-chain `specSha256` and model URI."""

    @property
    def spec_sha256(self) -> str:
        return self.spec.sha256()


class TrainingPools:
    """The per-process cache described in the module docstring (thread-safe)."""

    def __init__(self, datasets: int = DATASETS_KEPT, pools: int = POOLS_KEPT) -> None:
        self._datasets, self._pools_kept = datasets, pools
        self._pools: OrderedDict[int, TrainingPool | None] = OrderedDict()
        self._shapes: dict[str, dict[str, tuple[int, ...]]] = {}
        """By base model (its manifest hash): a few names and shapes each."""
        self._tokens: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def pool(self, res: Resources, pool_id: int) -> TrainingPool | None:
        """The training pool `pool_id` (None: an RL pool), its spec fetched and verified on first use."""
        with self._lock:
            if pool_id in self._pools:
                self._pools.move_to_end(pool_id)
                return self._pools[pool_id]
            info = res.client.pool.get_pool(pool_id)
            found = None
            if is_training_pool(info.model_uri):
                try:
                    spec = pool_diloco_spec(res.store, info.model_uri, info.spec_sha256)
                except ProofpoolError as exc:  # not in the store (yet), tampered with, or not matching the chain
                    raise ModelUnavailable(f"spec of training pool {pool_id}: {exc}") from exc
                found = TrainingPool(pool_id, spec)
            self._pools[pool_id] = found
            while len(self._pools) > self._pools_kept:
                self._pools.popitem(last=False)
            return found

    def shapes(self, res: Resources, pool: TrainingPool) -> dict[str, tuple[int, ...]]:
        """The model's parameter names and shapes (from checkpoint 0): the tensors a file must carry."""
        with self._lock:
            key = str(pool.spec.model.manifest_sha256)
            if key not in self._shapes:
                model = load_model(self._checkpoint(res, pool, 0))
                self._shapes[key] = parameter_shapes(model)
            return self._shapes[key]

    def tokens(self, res: Resources, pool: TrainingPool) -> torch.Tensor:
        """The pool's dataset (int32 `[sequences, seq_len]`), fetched, verified and loaded on first use."""
        spec = pool.spec
        with self._lock:
            key = spec.dataset.sha256
            if key in self._tokens:
                self._tokens.move_to_end(key)
                return self._tokens[key]
            while len(self._tokens) >= self._datasets:  # free before loading: never two large tensors at once
                self._tokens.popitem(last=False)
            try:
                path = fetch_dataset(res.store, spec, _cache_dir(res))
                tokens = load_dataset(path, spec.dataset.sha256, vocab_size=spec.model.vocab_size)
            except ProofpoolError as exc:
                raise ModelUnavailable(f"dataset of training pool {pool.pool_id}: {exc}") from exc
            self._tokens[key] = tokens
            return tokens

    def checkpoint(self, res: Resources, pool: TrainingPool, version: int) -> Path:
        """The verified local directory of checkpoint `version` (cached on disk)."""
        with self._lock:
            return self._checkpoint(res, pool, version)

    def _checkpoint(self, res: Resources, pool: TrainingPool, version: int) -> Path:
        try:
            return round_checkpoint(
                res.client,
                res.store,
                pool.spec,
                pool.pool_id,
                version,
                _cache_dir(res),
                relays=res.settings.checkpoint_relays,
                max_bytes=res.settings.checkpoint_max_bytes,
            )
        except ProofpoolError as exc:
            raise ModelUnavailable(f"checkpoint {version} of training pool {pool.pool_id}: {exc}") from exc


def training_pool(res: Resources, pool_id: int) -> TrainingPool | None:
    """`pool_id` as a training pool, or None for an RL pool."""
    return res.training.pool(res, pool_id)


def judge_training_file(
    res: Resources, sub: IndexedSubmission, pool: TrainingPool, data: bytes, selected: bool
) -> Verdict:
    """The verdict on the fetched file `data` of `sub` in the training pool `pool`, replayed when `selected`."""
    latest = res.client.pool.latest_checkpoint(sub.pool_id, block=sub.block_number)
    facts = RoundFacts(
        spec=pool.spec,
        spec_sha256=pool.spec_sha256,
        shapes=res.training.shapes(res, pool),
        latest_version=latest.version,
        base_manifest_sha256=base_manifest(res, pool, sub.model_version, latest),
        superseded_before=superseded_before(res, sub, latest),
        stale_grace=res.settings.validator_stale_grace,
        max_file_bytes=res.settings.upload_max_bytes,
        reference_norm=reference_norm(res, sub),
        direction=(lambda: read_momentum(res.training.checkpoint(res, pool, sub.model_version))),
    )
    submission = SubmissionFacts(sub.pool_id, sub.work_key, sub.node, sub.work_units, sub.model_version)
    return judge_update(data, submission, facts, (lambda: replay(res, pool, sub)) if selected else None)


ROUND_NORMS = """
SELECT (evidence->>'norm')::float8 FROM validations
 WHERE pool_id = %(pool)s AND verdict = 'accepted' AND work_key <> %(work_key)s
   AND evidence->>'round' = %(round)s AND evidence ? 'norm'
"""


def reference_norm(res: Resources, sub: IndexedSubmission) -> float | None:
    """The median norm of the other files of the submission's round accepted so far (None: none)."""
    params = {"pool": sub.pool_id, "work_key": sub.work_key, "round": str(sub.model_version)}
    with res.connection() as conn:
        norms = [row[0] for row in conn.execute(ROUND_NORMS, params).fetchall() if row[0] is not None]
    return statistics.median(norms) if norms else None


def replay(res: Resources, pool: TrainingPool, sub: IndexedSubmission) -> InnerResult:
    """The submission's inner phase recomputed: the same steps on the same rows from the same checkpoint."""
    spec, version = pool.spec, sub.model_version
    job = TrainJob(
        pool_id=pool.pool_id,
        round=version,
        node=sub.node,
        checkpoint_dir=res.training.checkpoint(res, pool, version),
        tokens=res.training.tokens(res, pool),
        rows=node_rows(spec, pool.pool_id, version, sub.node),
        inner=spec.inner,
    )
    return run_inner(job)


def base_manifest(res: Resources, pool: TrainingPool, version: int, latest: Checkpoint) -> str | None:
    """Hex manifest sha256 of checkpoint `version` (the spec's for 0, the chain's otherwise), or None
    when the chain had not published it as of the submission (`latest`). A published version whose
    publication cannot be found now (an RPC that refuses the log scan) is `ModelUnavailable`: never
    a `wrong_round` against the node."""
    if version > latest.version:
        return None
    if version == 0:
        found = pool.spec.model.manifest_sha256
    elif version == latest.version:
        found = latest.manifest_sha256.hex()
    else:
        anchored = onchain_manifest_sha256(res.client, pool.pool_id, version)
        found = None if anchored is None else anchored.hex()
    if found is None:
        raise ModelUnavailable(f"training pool {pool.pool_id}: no manifest found for published checkpoint {version}")
    return found


def superseded_before(res: Resources, sub: IndexedSubmission, latest: Checkpoint) -> float | None:
    """Seconds from the publication of checkpoint `model_version + 1` to the submission's block, or
    None when it was not published then. Checkpoint v+1 was published no later than the latest: the
    latest's age is a lower bound, looked up exactly (an event scan) only when it could matter."""
    version = sub.model_version
    if version >= latest.version:
        return None
    submitted = sub.submitted_at.timestamp()
    age = submitted - latest.published_at
    if version + 1 < latest.version and age < res.settings.validator_stale_grace:
        anchored = onchain_checkpoint(res.client, sub.pool_id, version + 1)
        if anchored is not None:
            age = submitted - anchored.published_at
    return age


def _cache_dir(res: Resources) -> Path:
    return res.settings.checkpoint_cache_dir.expanduser()
