"""The worker's heartbeat line: the first answered heartbeat is logged, then at most one line a
minute with the count since the last one, busy or idle, so a tailed log shows the node is alive."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
from eth_account import Account
from proofpool.worker.console import WorkerConsole
from proofpool.worker.heartbeat_log import HeartbeatLog, heartbeat_line
from proofpool.worker.node import WorkerConfig, WorkerNode
from rich.console import Console

from proofpool.infra.chain.anvil import ANVIL_KEYS
from proofpool.infra.http.node_api import Assignment, Heartbeat

NODE = Account.from_key(ANVIL_KEYS[6]).address
LOGGER = "proofpool.worker.heartbeat_log"


def beat(state: str = "healthy", version: int | None = 3) -> Heartbeat:
    assignment = None
    if version is not None:
        assignment = Assignment(1, version, None, None, 0, ("add-1-2",), 5, 8, 8, 1.0)
    return Heartbeat(NODE, state, 1, assignment, heartbeat_interval=10.0, server_time=0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_the_line_names_state_pool_checkpoint_and_count() -> None:
    assert heartbeat_line(beat(), 1, 12) == (
        "heartbeat ok: state healthy, pool 1, checkpoint v3, 12 heartbeats since last line"
    )
    assert heartbeat_line(beat("unhealthy", None), 2, 1) == (
        "heartbeat ok: state unhealthy, pool 2, no assignment, 1 heartbeat since last line"
    )


def test_first_heartbeat_is_logged_then_one_line_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = HeartbeatLog(1, NODE, interval=60.0, clock=clock)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        log.answered(beat())
        for _ in range(11):  # a busy worker: one heartbeat per batch, a batch every 5 s
            clock.now += 5.0
            log.answered(beat())
        assert len(lines(caplog)) == 1  # 55 s after the first line: nothing yet
        clock.now += 5.0
        log.answered(beat(version=4))
    assert lines(caplog) == [
        "heartbeat ok: state healthy, pool 1, checkpoint v3, 1 heartbeat since last line",
        "heartbeat ok: state healthy, pool 1, checkpoint v4, 12 heartbeats since last line",
    ]
    last = [r for r in caplog.records if r.name == LOGGER][-1]
    assert (last.pool, last.node, last.state, last.version, last.heartbeats) == (1, NODE, "healthy", 4, 12)  # type: ignore[attr-defined]


def test_an_idle_worker_logs_too(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = HeartbeatLog(1, NODE, interval=60.0, clock=clock)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(13):  # no work: a heartbeat every 10 s interval
            log.answered(beat("healthy", None))
            clock.now += 10.0
    assert lines(caplog) == [
        "heartbeat ok: state healthy, pool 1, no assignment, 1 heartbeat since last line",
        "heartbeat ok: state healthy, pool 1, no assignment, 6 heartbeats since last line",
        "heartbeat ok: state healthy, pool 1, no assignment, 6 heartbeats since last line",
    ]


def test_the_worker_logs_its_heartbeats(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """`WorkerNode.heartbeat` (what the loop and the lookahead call) feeds the line."""
    api = SimpleNamespace(heartbeat=lambda *_args, **_kwargs: beat("healthy", None))
    config = WorkerConfig(pool_id=1, state_dir=tmp_path / "state", checkpoint_cache_dir=tmp_path / "cache")
    console = WorkerConsole(NODE, "http://127.0.0.1:9", Console(file=open("/dev/null", "w")))  # noqa: SIM115
    node = WorkerNode(config, Account.from_key(ANVIL_KEYS[6]), SimpleNamespace(), api, lambda: None, console)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for _ in range(3):
            node.heartbeat()
    assert lines(caplog) == ["heartbeat ok: state healthy, pool 1, no assignment, 1 heartbeat since last line"]
