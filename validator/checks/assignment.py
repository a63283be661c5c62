"""Check 3b: the file answers a batch the orchestrator assigned to this node.

An assignment is a pure function of (pool, node, checkpoint version, batch counter)
(`proofpool.assignment`): the sampling seed and the problems both derive from it. Without this
check a node could be paid twice for one batch (the same rows re-encoded: other bytes, another
work key, and every other check passes), or be paid for rows it copied from another node's file.

The file does not name its batch; the seed does. The seeds of batches 0, 1, 2, ... of the claimed
version are derived until one matches (`BatchIndex`, cached per node and version), up to
`MAX_BATCHES` per version. Then the problem of group g must be the batch's g-th problem (the
first problems of the batch: a file may hold fewer groups than the pool's batch size, never other
ones). Which work key may use a batch is decided later, against the other validators' decisions
(`validator.store.claim_batch`): only the first accepted file of a batch counts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from proofpool.assignment import sampling_seed, task_ids
from proofpool.rollout import RolloutSample
from validator.checks.facts import SubmissionFacts
from validator.checks.verdict import Verdict, quote, reject

MAX_BATCHES: Final = 65_536
"""Batches per node and checkpoint version a file may come from. A checkpoint lasts one trainer
step, in which a node does a few batches; finding out that a seed is none of these costs about
0.1 s, paid only by a file that will be rejected."""


class BatchIndex:
    """Sampling seed -> batch number, per (pool, node, version), derived on demand and remembered
    for the `keys` most recently used nodes and versions (a validator sees the same ones again)."""

    def __init__(self, limit: int = MAX_BATCHES, keys: int = 1024) -> None:
        self.limit, self.keys = limit, keys
        self._known: OrderedDict[tuple[int, str, int], dict[int, int]] = OrderedDict()

    def find(self, pool_id: int, node: str, version: int, seed: int) -> int | None:
        """The batch whose sampling seed is `seed`, or None if no batch below `limit` has it."""
        key = (pool_id, node.lower(), version)
        known = self._known.setdefault(key, {})
        self._known.move_to_end(key)  # most recently used last
        if len(self._known) > self.keys:
            self._known.popitem(last=False)
        if seed in known:
            return known[seed]
        found = None
        derived: dict[int, int] = {}
        for batch in range(len(known), self.limit):  # `known` holds batches 0 .. len(known) - 1
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
    samples: Sequence[RolloutSample], sub: SubmissionFacts, index: BatchIndex = BATCH_INDEX
) -> Verdict | int:
    """The batch the file answers, or the rejection.

    Reasons: `seed_mismatch` (rows carry different sampling seeds: one batch has one seed),
    `seed_not_assigned` (no batch of this node and version has the seed), `problem_not_assigned`
    (group g does not hold the batch's g-th problem, or group ids are not 0..n-1).
    """
    rows = len(samples)
    if not rows:
        return reject("seed_not_assigned", rows, detail="the file has no rows")
    seed = samples[0].sampling_seed
    for row, s in enumerate(samples):
        if s.sampling_seed != seed:
            return reject("seed_mismatch", rows, row=row, seed=str(s.sampling_seed), first_seed=str(seed))
    batch = index.find(sub.pool_id, sub.node, sub.model_version, seed)
    if batch is None:
        return reject(
            "seed_not_assigned", rows, seed=str(seed), model_version=sub.model_version, batches_searched=index.limit
        )
    groups = max(s.group_id for s in samples) + 1
    if min(s.group_id for s in samples) < 0 or groups > rows:
        return reject("problem_not_assigned", rows, batch=batch, detail="group ids are not 0..n-1")
    expected = task_ids(sub.pool_id, sub.node, sub.model_version, batch, groups)
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
