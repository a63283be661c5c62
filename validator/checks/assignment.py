"""Check 3b: the file answers, in full, a batch the orchestrator handed to this node.

An assignment is a pure function of (pool, node, checkpoint version, batch counter)
(`proofpool.core.assignment`): the sampling seed and the problems both derive from it. Without this
check a node could be paid twice for one batch (the same rows re-encoded: other bytes, another
work key, and every other check passes), or be paid for rows it copied from another node's file.

The file does not name its batch; the seed does. The seeds of batches 0, 1, 2, ... of the claimed
version are derived until one matches (`BatchIndex`, cached per node and version), up to the
highest batch the orchestrator handed this node for that version (`PoolRules.last_issued_batch`,
from `issued_batches`). The orchestrator hands batches out one after the other, so a node cannot
look ahead through the counters for easy problems and answer those instead.

Then the file must be the whole batch, in the order the worker writes it (`proofpool.worker.rollout`):
`batch_size` groups of exactly `group_size` rows, row r in group r // group_size, group g holding
the batch's g-th problem. A node may not drop the groups it did badly on, nor shrink a group to the
samples it liked. Which work key may use a batch is decided later, against the other validators'
decisions (`proofpool.validator.store.claim_batch`): only the first accepted file of a batch counts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.verdict import Verdict, quote, reject

from proofpool.core.assignment import sampling_seed, task_ids
from proofpool.core.rollout import RolloutSample

MAX_BATCHES: Final = 65_536
"""Batches per node and checkpoint version searched when the issued-batch record is not at hand
(`PoolRules.last_issued_batch` None: an offline re-check). A checkpoint lasts one trainer step, in
which a node does a few batches; finding out that a seed is none of these costs about 0.1 s."""


class BatchIndex:
    """Sampling seed -> batch number, per (pool, node, version), derived on demand and remembered
    for the `keys` most recently used nodes and versions (a validator sees the same ones again)."""

    def __init__(self, limit: int = MAX_BATCHES, keys: int = 1024) -> None:
        self.limit, self.keys = limit, keys
        self._known: OrderedDict[tuple[int, str, int], dict[int, int]] = OrderedDict()

    def find(self, pool_id: int, node: str, version: int, seed: int, limit: int | None = None) -> int | None:
        """The batch whose sampling seed is `seed`, or None if no batch below `limit` (at most the
        index's own limit) has it. The memory held per node and version is bounded by `limit`."""
        limit = self.limit if limit is None else min(limit, self.limit)
        key = (pool_id, node.lower(), version)
        known = self._known.setdefault(key, {})
        self._known.move_to_end(key)  # most recently used last
        if len(self._known) > self.keys:
            self._known.popitem(last=False)
        if seed in known:
            return known[seed] if known[seed] < limit else None
        found = None
        derived: dict[int, int] = {}
        for batch in range(len(known), limit):  # `known` holds batches 0 .. len(known) - 1
            derived_seed = sampling_seed(pool_id, node, version, batch)
            derived[derived_seed] = batch
            if derived_seed == seed:
                found = batch
                break
        if found is not None:  # remember up to the batch found, not a failed search's full scan
            known.update(derived)
        return found


BATCH_INDEX: Final = BatchIndex()
"""The validator process's index (the checks are otherwise stateless)."""


def check_assignment(
    samples: Sequence[RolloutSample], sub: SubmissionFacts, rules: PoolRules, index: BatchIndex = BATCH_INDEX
) -> Verdict | int:
    """The batch the file answers, or the rejection.

    Reasons: `seed_mismatch` (rows carry different sampling seeds: one batch has one seed),
    `seed_not_assigned` (no batch handed to this node for this version has the seed),
    `group_layout` (not `batch_size` groups of `group_size` rows in row order),
    `problem_not_assigned` (group g does not hold the batch's g-th problem).
    """
    rows = len(samples)
    if not rows:
        return reject("seed_not_assigned", rows, detail="the file has no rows")
    seed = samples[0].sampling_seed
    for row, s in enumerate(samples):
        if s.sampling_seed != seed:
            return reject("seed_mismatch", rows, row=row, seed=str(s.sampling_seed), first_seed=str(seed))
    searched = index.limit if rules.last_issued_batch is None else min(index.limit, rules.last_issued_batch + 1)
    batch = index.find(sub.pool_id, sub.node, sub.model_version, seed, limit=searched)
    if batch is None:
        return reject(
            "seed_not_assigned",
            rows,
            seed=str(seed),
            model_version=sub.model_version,
            batches_searched=searched,
            last_issued_batch=rules.last_issued_batch,
        )
    layout = _layout_error(samples, rules)
    if layout is not None:
        return reject("group_layout", rows, batch=batch, **layout)
    expected = task_ids(rules.taskset, sub.pool_id, sub.node, sub.model_version, batch, rules.batch_size)
    for row, s in enumerate(samples):
        if s.problem_id != expected[s.group_id]:
            return reject(
                "problem_not_assigned",
                rows,
                row=row,
                batch=batch,
                group=s.group_id,
                problem_id=quote(s.problem_id),
                assigned=expected[s.group_id],
            )
    return batch


def _layout_error(samples: Sequence[RolloutSample], rules: PoolRules) -> dict[str, int] | None:
    """What departs from `batch_size` groups of `group_size` rows with row r in group r // group_size."""
    expected_rows = rules.batch_size * rules.group_size
    if len(samples) != expected_rows:
        return {
            "file_rows": len(samples),
            "expected_rows": expected_rows,
            "batch_size": rules.batch_size,
            "group_size": rules.group_size,
        }
    for row, s in enumerate(samples):
        if s.group_id != row // rules.group_size:
            return {"row": row, "group_id": s.group_id, "expected_group_id": row // rules.group_size}
    return None
