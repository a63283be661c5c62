"""Generating the next batch while the heartbeat that asks for it is on its way.

After a node reports batch N, the backend hands out batch N + 1 of the same checkpoint unless
the pool changed (a new checkpoint, other assignment settings, the node's state). Assignments
are a pure function of public inputs (`proofpool.core.assignment`), so the node can work N + 1 out
itself, send the heartbeat in the background and generate meanwhile: the round trip (about 10 ms
a batch, 4 % of generation on the benchmark) does not stop the engine. The heartbeat's answer
still decides: a generated batch is kept only if the assignment matches it field for field, and
is dropped otherwise (one batch lost when a checkpoint is published).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from proofpool.worker.rollout import RolloutFile

from proofpool.core.assignment import AssignmentConfig, Checkpoint, assign
from proofpool.core.environment import Taskset
from proofpool.infra.http.node_api import Assignment, Heartbeat


def next_assignment(taskset: Taskset, current: Assignment, node: str) -> Assignment:
    """The batch after `current`, as the backend hands it out once `current` is reported (same
    checkpoint, same batch size, group size, token budget and temperature)."""
    config = AssignmentConfig(len(current.task_ids), current.group_size, current.max_tokens, current.temperature)
    checkpoint = Checkpoint(current.checkpoint_version, current.manifest_sha256, current.checkpoint_uri)
    upcoming = assign(taskset, current.pool_id, node, checkpoint, current.batch + 1, config)
    return Assignment(
        pool_id=current.pool_id,
        checkpoint_version=current.checkpoint_version,
        manifest_sha256=current.manifest_sha256,
        checkpoint_uri=current.checkpoint_uri,
        batch=upcoming.batch,
        task_ids=upcoming.task_ids,
        sampling_seed=upcoming.sampling_seed,
        group_size=current.group_size,
        max_tokens=current.max_tokens,
        temperature=current.temperature,
    )


@dataclass(frozen=True)
class Generated:
    """A batch generated for `assignment` (from `model`), and how long that took."""

    assignment: Assignment
    model: Path
    rollout: RolloutFile
    seconds: float


class Lookahead:
    """One heartbeat in flight (on its own thread) and the assignment it is expected to bring."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="heartbeat")
        self._beat: Future[Heartbeat] | None = None
        self._expected: tuple[Assignment, Path] | None = None

    def send(self, heartbeat: Callable[[], Heartbeat], expected: Assignment, model: Path) -> None:
        """Start `heartbeat` in the background, expecting it to assign `expected` (to run on `model`)."""
        self._beat = self._pool.submit(heartbeat)
        self._expected = (expected, model)

    def generate(self, make: Callable[[Assignment, Path], Generated]) -> Generated | None:
        """Generate the expected batch with `make` while the heartbeat travels (None if none is)."""
        if self._expected is None:
            return None
        assignment, model = self._expected
        self._expected = None
        return make(assignment, model)

    def answer(self) -> Heartbeat | None:
        """The background heartbeat's answer (waiting for it; its failure raises here), or None
        if none was sent."""
        beat, self._beat, self._expected = self._beat, None, None
        return None if beat is None else beat.result()

    def close(self) -> None:
        """Wait for a heartbeat in flight (its failure no longer matters) and end the thread."""
        if self._beat is not None:
            self._beat.exception()
        self._beat = self._expected = None
        self._pool.shutdown(wait=True)
