"""The trainer's rollouts: accepted submissions from the public ledger, files from the store.

Step n trains on files generated with checkpoint versions >= n - k (async level k): workers keep
producing with the versions they have while the trainer moves on, and files more than k versions
old are off-policy enough to be left out. Only work a validator accepted is used (`accepted`, or
`finalized` after the dispute window), so a cheater's rows never reach the gradient. Each file is
used once; the keys seen are part of the trainer's resumable state. A bundle (many files recorded
as one submission, accepted or invalid as a whole) is a ledger row with `files`: it is expanded
into one row per file (`expand_files`), so everything below works per file, by its own sha256. Accepted is not trusted
blindly either: every fetched file goes through `proofpool.trainer.screen` (its hash, schema and values),
and a file refused there is remembered in the poison list and never fetched again.

A pool whose task set does not score reproducibly (`reproducible_scores` False: the `code`
environment) is trained on its validators' rewards, not the files': validators do not slash over
a reward there, they store their judgement of every row of an accepted file beside it
(`proofpool.infra.storage.judged_key`). The source reads it first; a file whose judgements are
not in the store yet is left for a later fetch (not used, not poisoned). `apply_judgements` then
drops the rows judged `inconclusive`, gives the rest the validator's rewards and recomputes the
advantages over the rows kept.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from proofpool.trainer.screen import ModelLimits, PoisonList, Submission, screen_file

from proofpool.core.environment import ScoreStatus
from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.core.rl.advantages import group_advantages
from proofpool.core.rollout import RolloutSample
from proofpool.infra.http.ledger_client import LedgerClient, LedgerRefused
from proofpool.infra.storage import JudgedRow, JudgementsError, judged_key, read_judged, rollout_key
from proofpool.infra.storage.s3 import ObjectNotFound, ObjectStore, StorageError

log = logging.getLogger(__name__)

USABLE_STATUSES = ("accepted", "finalized")
UNTRAINED_STATUSES: Final[frozenset[ScoreStatus]] = frozenset({"inconclusive"})
"""Judgements the trainer leaves out: the checker could not decide, through no fault of the
completion. `error` and `timeout` are the completion's doing (it does not compile, it ran out of
memory or CPU well past a close call) and train as the reward 0 they earned."""


class NotEnoughRollouts(ProofpoolError):
    """The wait for rollouts timed out."""


@dataclass
class RolloutSource:
    """Accepted files of one pool not used yet, screened before they are handed out."""

    ledger: LedgerClient
    store: ObjectStore
    pool_id: int
    seen: set[bytes] = field(default_factory=set)
    limits: ModelLimits | None = None
    """The trained model's vocabulary and positions; None skips the checks that need them."""
    poisoned: PoisonList = field(default_factory=PoisonList)
    """Files refused by the screen: never fetched again, across restarts when it has a path."""
    judged: bool = False
    """Train on the validators' judgements (`apply_judgements`): the pool's task set does not
    score reproducibly."""
    _waiting: set[bytes] = field(default_factory=set, init=False, repr=False)
    """Files whose judgements were not in the store (warned about once each)."""

    def fetch_new(self, min_version: int, rows_wanted: int | None = None) -> list[tuple[bytes, list[RolloutSample]]]:
        """(work key, rows) of accepted files with model version >= `min_version` not seen yet, newest
        versions first, stopping once `rows_wanted` rows are in hand: a backlog of accepted files is
        left for later steps (where the older ones age out of the window) instead of making one
        step as large as the backlog."""
        found: list[tuple[bytes, list[RolloutSample]]] = []
        have = 0
        candidates = [
            row
            for row in self._usable()
            if int(row["model_version"]) >= min_version
            and (key := _work_key(row)) not in self.seen
            and key not in self.poisoned
        ]
        candidates.sort(key=lambda row: (-int(row["model_version"]), int(row["block_number"])))
        for row in candidates:
            if rows_wanted is not None and have >= rows_wanted:
                break
            key = _work_key(row)
            judgements = self._judgements(key, row) if self.judged else None
            if self.judged and judgements is None:
                continue  # not used: asked again at the next fetch
            self.seen.add(key)
            rows = self._fetch(key, row, judgements)
            if rows:
                found.append((key, rows))
                have += len(rows)
        return found

    def _judgements(self, key: bytes, row: dict) -> tuple[JudgedRow, ...] | None:
        """The validator's judgements of an accepted file; None while they are not in the store (or
        the store is unreachable), and None for a malformed document, which poisons the file."""
        extra = {"pool": self.pool_id, "work_key": row["work_key"]}
        try:
            data = self.store.get_object(judged_key(self.pool_id, row["node"], key.hex()))
        except ObjectNotFound:
            if key not in self._waiting:
                self._waiting.add(key)
                log.warning("accepted file skipped until its validator's judgements are stored", extra=extra)
            return None
        except StorageError as exc:
            log.warning("accepted file skipped for now, judgements not fetched: %s", exc, extra=extra)
            return None
        self._waiting.discard(key)
        try:
            return read_judged(data, key.hex())
        except JudgementsError as exc:
            self.poisoned.record(key, f"bad_judgements: {exc}", pool_id=self.pool_id)
            return None

    def _fetch(self, key: bytes, row: dict, judgements: Sequence[JudgedRow] | None = None) -> list[RolloutSample]:
        """The screened rows of one accepted file (with `judgements` applied, when given); [] when it
        cannot be fetched or nothing is fit.

        A store error is not the file's fault, so it is only logged, not recorded as poisoned (the
        file still counts as used: `fetch_new` marked it seen); what the screen finds, and
        judgements that do not fit the file, are recorded in the poison list.
        """
        try:
            data = self.store.get_object(rollout_key(self.pool_id, row["node"], key.hex()))
        except StorageError as exc:
            log.warning("accepted file skipped: %s", exc, extra={"pool": self.pool_id, "work_key": row["work_key"]})
            return []
        sub = Submission(key, self.pool_id, str(row["node"]), int(row["model_version"]))
        screened = screen_file(data, sub, self.limits)
        if screened.problem is not None:
            self.poisoned.record(key, screened.problem, pool_id=self.pool_id)
        if judgements is None:
            return screened.rows
        try:
            return apply_judgements(screened.rows, judgements)
        except JudgementsError as exc:
            self.poisoned.record(key, f"bad_judgements: {exc}", pool_id=self.pool_id)
            return []

    def _usable(self) -> Iterable[dict]:
        for status in USABLE_STATUSES:
            for row in self.ledger.items("submissions", {"pool_id": self.pool_id, "status": status}):
                yield from expand_files(row)


def expand_files(row: dict) -> list[dict]:
    """A ledger submission row as one row per rollout file: itself for a `submitWork` submission
    (`files` absent or null), else one per file of the bundle, in bundle order, with that file's
    `work_key` and `work_units` and the bundle's key as `bundle_key` (status, node, version and
    block are the bundle's). The file is in the store under `rollout_key(pool, node, file key)`."""
    files = row.get("files")
    if not files:
        return [row]
    return [
        {**row, "work_key": f["work_key"], "work_units": f["work_units"], "bundle_key": row["work_key"]} for f in files
    ]


def apply_judgements(rows: Sequence[RolloutSample], judged: Sequence[JudgedRow]) -> list[RolloutSample]:
    """`rows` of a file trained on a validator's judgements `judged` (all the file's rows, in order).

    `rows` are the file's rows in order, less whole groups the screen dropped; each row is matched
    to its judgement by group id and position in the group. Rows judged `inconclusive`
    (`UNTRAINED_STATUSES`) are dropped, the others take the judged reward, and advantages are
    `group_advantages` of the rewards of the rows kept, group by group.

    Raises `JudgementsError` when the judgements do not fit the rows (another count per group,
    another problem id).
    """
    by_group: dict[int, list[JudgedRow]] = defaultdict(list)
    for judgement in judged:
        by_group[judgement.group_id].append(judgement)
    taken: dict[int, int] = defaultdict(int)
    kept: list[tuple[RolloutSample, JudgedRow]] = []
    for row in rows:
        position = taken[row.group_id]
        taken[row.group_id] += 1
        group = by_group.get(row.group_id, [])
        if position >= len(group):
            raise JudgementsError(f"group {row.group_id} has more rows than judgements ({len(group)})")
        judgement = group[position]
        if judgement.problem_id != row.problem_id:
            raise JudgementsError(
                f"row {position} of group {row.group_id} is of problem {row.problem_id!r}, "
                f"its judgement of {judgement.problem_id!r}"
            )
        if judgement.status not in UNTRAINED_STATUSES:
            kept.append((row, judgement))
    short = next((g for g, n in taken.items() if n != len(by_group[g])), None)
    if short is not None:
        raise JudgementsError(f"group {short} has {taken[short]} rows but {len(by_group[short])} judgements")
    advantages = group_advantages([j.reward for _, j in kept], [row.group_id for row, _ in kept])
    return [
        dataclasses.replace(row, reward=j.reward, advantage=a) for (row, j), a in zip(kept, advantages, strict=True)
    ]


def _work_key(row: dict) -> bytes:
    """The file's sha256: a file row's `work_key` (a bundle's row is expanded first, `expand_files`)."""
    return bytes.fromhex(str(row["work_key"]).removeprefix("0x"))


def gather(
    source: RolloutSource,
    *,
    step: int,
    async_level: int,
    samples: int,
    timeout: float,
    stop: threading.Event,
    say: Callable[[str], None],
    poll: float = 2.0,
) -> list[RolloutSample]:
    """At least `samples` rows (whole files, so a few more) from files of versions >= step - async_level."""
    min_version = max(0, step - async_level)
    rows: list[RolloutSample] = []
    files = 0
    deadline = time.monotonic() + timeout
    last_said = 0.0
    while True:
        try:
            for _, file_rows in source.fetch_new(min_version, samples - len(rows)):
                rows += file_rows
                files += 1
        except (ServiceUnavailable, LedgerRefused) as exc:
            # The backend restarting (or briefly refusing) is no reason to stop training: ask
            # again at the next poll; the step's timeout still bounds the wait.
            log.warning("ledger unavailable, retrying: %s", exc, extra={"pool": source.pool_id, "step": step})
        if len(rows) >= samples:
            return rows
        now = time.monotonic()
        if now > deadline:
            raise NotEnoughRollouts(
                f"step {step}: {len(rows)} of {samples} samples from accepted files of versions >= {min_version} "
                f"after {timeout:.0f} s; are workers and validators running for pool {source.pool_id}?"
            )
        if now - last_said > 10:
            say(
                f"step {step}: waiting for {samples - len(rows)} more samples from accepted files of model version "
                f">= {min_version} (have {len(rows)} from {files} files)"
            )
            last_said = now
        if stop.wait(poll):
            raise NotEnoughRollouts(f"stopped while waiting for rollouts of step {step}")
