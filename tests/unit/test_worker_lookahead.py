"""The batch a worker generates ahead is the one the backend assigns next, and it is generated
while the heartbeat travels, whose answer (or failure) still reaches the loop."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from proofpool.worker.lookahead import Generated, Lookahead, next_assignment
from proofpool.worker.rollout import RolloutFile
from proofpool_arithmetic import ENVIRONMENT

from proofpool.core.assignment import AssignmentConfig, Checkpoint, assign
from proofpool.infra.http.node_api import Assignment, Heartbeat

TASKS = ENVIRONMENT.taskset

NODE = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
CONFIG = AssignmentConfig(batch_size=5, group_size=3, max_tokens=6, temperature=0.7)
CHECKPOINT = Checkpoint(4, b"\x07" * 32, "s3://bucket/pools/2/checkpoints/4/")


def as_sent(batch: int) -> Assignment:
    """What the backend's heartbeat carries for `batch` (proofpool.backend.api.orchestrator's fields)."""
    a = assign(TASKS, 2, NODE, CHECKPOINT, batch, CONFIG)
    return Assignment.from_json(
        {
            "pool_id": a.pool_id,
            "checkpoint_version": a.checkpoint.version,
            "manifest_sha256": a.checkpoint.manifest_sha256.hex(),
            "checkpoint_uri": a.checkpoint.uri,
            "batch": a.batch,
            "task_ids": list(a.task_ids),
            "sampling_seed": str(a.sampling_seed),
            "group_size": a.group_size,
            "max_tokens": a.max_tokens,
            "temperature": a.temperature,
        }
    )


def beat(assignment: Assignment | None) -> Heartbeat:
    return Heartbeat(NODE, "healthy", 2, assignment, 5.0, 0.0)


def test_the_batch_worked_out_ahead_is_the_one_the_backend_assigns_next() -> None:
    assert next_assignment(TASKS, as_sent(7), NODE) == as_sent(8)
    assert next_assignment(TASKS, as_sent(7), NODE) != as_sent(9)


def test_generation_runs_while_the_heartbeat_is_in_flight() -> None:
    generating = threading.Event()
    lookahead = Lookahead()

    def heartbeat() -> Heartbeat:  # answers only once generation has started: they overlap
        assert generating.wait(10), "the batch was not generated while the heartbeat travelled"
        return beat(as_sent(8))

    def make(assignment: Assignment, model: Path) -> Generated:
        generating.set()
        return Generated(assignment, model, RolloutFile(b"rows", b"\x00" * 32, len(assignment.task_ids), 15), 0.1)

    lookahead.send(heartbeat, as_sent(8), Path("/models/v4"))
    early = lookahead.generate(make)
    answer = lookahead.answer()
    lookahead.close()
    assert early is not None and early.assignment == as_sent(8) and early.model == Path("/models/v4")
    assert answer is not None and answer.assignment == early.assignment
    assert lookahead.generate(make) is None and lookahead.answer() is None  # nothing more in flight


def test_a_failed_heartbeat_is_raised_to_the_loop() -> None:
    lookahead = Lookahead()

    def heartbeat() -> Heartbeat:
        raise ConnectionError("backend down")

    lookahead.send(heartbeat, as_sent(8), Path("/models/v4"))
    with pytest.raises(ConnectionError, match="backend down"):
        lookahead.answer()
    lookahead.close()
