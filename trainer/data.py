"""The trainer's rollouts: accepted submissions from the public ledger, files from the store.

Step n trains on files generated with checkpoint versions >= n - k (async level k): workers keep
producing with the versions they have while the trainer moves on, and files more than k versions
old are off-policy enough to be left out. Only work a validator accepted is used (`accepted`, or
`finalized` after the dispute window), so a cheater's rows never reach the gradient. Each file is
used once; the keys seen are part of the trainer's resumable state. Accepted is not trusted
blindly either: every fetched file goes through `proofpool.trainer.screen` (its hash, schema and values),
and a file refused there is remembered in the poison list and never fetched again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from proofpool.trainer.screen import ModelLimits, PoisonList, Submission, screen_file

from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.core.rollout import RolloutSample
from proofpool.infra.http.ledger_client import LedgerClient, LedgerRefused
from proofpool.infra.storage import rollout_key
from proofpool.infra.storage.s3 import ObjectStore, StorageError

log = logging.getLogger(__name__)

USABLE_STATUSES = ("accepted", "finalized")


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
            self.seen.add(key)
            rows = self._fetch(key, row)
            if rows:
                found.append((key, rows))
                have += len(rows)
        return found

    def _fetch(self, key: bytes, row: dict) -> list[RolloutSample]:
        """The screened rows of one accepted file; [] when it cannot be fetched or nothing is fit.

        A store error is not the file's fault, so it is only logged, not recorded as poisoned (the
        file still counts as used: `fetch_new` marked it seen); what the screen finds is recorded
        in the poison list.
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
        return screened.rows

    def _usable(self) -> Iterable[dict]:
        for status in USABLE_STATUSES:
            yield from self.ledger.items("submissions", {"pool_id": self.pool_id, "status": status})


def _work_key(row: dict) -> bytes:
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
