"""The load generator (`bench/load.py`) in miniature: 20 nodes against the real backend, SeaweedFS,
anvil and indexer for two short steps. It must stop by itself, account for every file it sent
through every stage, and name the stage that saturated when one is forced: the load backend
allows one upload URL per node per minute, so the second step, which gives most nodes a second or
third file, has presign requests refused (429) and completes too few of them.
"""

from __future__ import annotations

import time

from bench.load import STAGES, LoadConfig, run_load, stage_row

REDIS_DB = 3
"""Redis db of this test's market (flushed); no other test or bench uses it."""


def test_tiny_run_stops_by_itself_counts_and_detects_a_forced_saturation() -> None:
    config = LoadConfig(
        nodes=20,
        providers=2,
        rates=(2, 16, 32),
        step_seconds=3,
        drain_seconds=15,
        max_seconds=90,
        # only the forced refusals may saturate a stage, not a machine busy with other tests
        min_ratio=0.5,
        http_p99_ms=10_000,
        chain_p99_s=30,
        heartbeat_interval=5,
        backend_workers=1,
        connections=8,
        redis_db=REDIS_DB,
        backend_env={"PROOFPOOL_UPLOAD_RATE_PER_MINUTE": "1"},
    )
    started = time.monotonic()
    rows = run_load(config, say=lambda _line: None)
    assert time.monotonic() - started < 240

    setup = rows[0]
    assert setup["kind"] == "setup" and setup["nodes"] == 20
    steps = [r for r in rows if r["kind"] == "step"]
    stages = {(r["rate"], r["stage"]): r for r in rows if r["kind"] == "stage"}

    # step 1: 6 files, each node's first: every stage kept up, every file went all the way
    first = steps[0]
    assert first["rate"] == 2 and first["files"] == 6 and first["saturated"] == []
    for stage in STAGES:
        row = stages[(2, stage)]
        assert row["failed"] == 0, row
        assert row["completed"] == (6 + 3 * 4 if stage == "heartbeat" else 6), row  # + 4 beats/s for 3 s
    assert first["cpu_s"]["backend"] > 0 and first["cpu_s"]["generator"] > 0

    # step 2: 48 files over 20 nodes, one URL a minute each: only nodes 6-19 (not served in step 1)
    # get one, the other 34 files are refused and presign saturates
    second = steps[1]
    assert second["rate"] == 16 and second["files"] == 48
    assert second["first_saturated"] == "presign"
    presign = stages[(16, "presign")]
    assert (presign["completed"], presign["failed"]) == (14, 34)
    assert presign["saturated"] and "achieved" in presign["why"]
    assert stages[(16, "heartbeat")]["saturated"] is False  # the stage before it kept up
    # what got a URL still went all the way: the stages after it count the same 14 and 34
    assert (stages[(16, "dispatched")]["completed"], stages[(16, "dispatched")]["failed"]) == (14, 34)

    # it stopped there by itself: no third step, and the headline names both
    assert len(steps) == 2
    stop = next(r for r in rows if r["kind"] == "stop")
    assert stop == {"bench": "load", "kind": "stop", "reason": "saturated", "rate": 16}
    summary = rows[-1]
    assert summary["kind"] == "summary"
    assert summary["sustained"] == {"offered_files_per_s": 2, "submissions_per_s": 2.0}
    assert summary["first_saturated"]["stage"] == "presign"


def test_stage_verdicts_rate_and_latency() -> None:
    """A stage keeps up at >= 90 % of the offered rate and a p99 within its bound; either miss saturates it."""
    config = LoadConfig(step_seconds=10)
    steady = [(t * 0.1, t * 0.1 + 0.01, True) for t in range(100)]  # 10/s, 10 ms each
    assert stage_row("put", steady, 100, config)["saturated"] is False

    slow = [(s, e + 0.5, ok) for s, e, ok in steady]  # 510 ms: over the 250 ms HTTP bound
    row = stage_row("put", slow, 100, config)
    assert row["saturated"] and "p99" in row["why"]
    assert stage_row("mined", slow, 100, config)["saturated"] is False  # the chain stages allow 2 s

    late = [(s, e + 1.5, ok) for s, e, ok in steady]  # a constant 1.5 s more: the rate is unharmed
    assert stage_row("indexed", late, 100, config)["achieved_per_s"] == 10.0

    backlog = [(t * 0.1, 0.5 + t * 0.2, True) for t in range(100)]  # served at 5/s: the queue grows
    row = stage_row("indexed", backlog, 100, config)
    assert row["achieved_per_s"] < 9 and row["saturated"] and "achieved" in row["why"]

    refused = steady[:80] + [(s, e, False) for s, e, _ in steady[80:]]
    row = stage_row("presign", refused, 100, config)
    assert row["failed"] == 20 and row["saturated"] and "achieved" in row["why"]
