"""End-to-end figures of the devnet market (`proofpool devnet run`, as `make demo` starts it).

The whole market runs for real: anvil, SeaweedFS, PostgreSQL `proofpool_bench_e2e`, Redis db 9,
the backend, the indexer, two validators, the trainer and four workers (one cheating), all on this
machine's cores. Reported:

- submissions per minute, end to end (all `WorkSubmitted` while the trainer ran its steps);
- submission-to-verdict latency p50/p99: the submission's block to its verdict's block (chain
  time, whole seconds: anvil stamps blocks by the second);
- the share of worker time spent generating: per worker, the seconds its batches took to generate
  (the `batch written` log lines) over the time from its first batch to its last;
- validator utilization: seconds spent deciding (`proofpool_validation_seconds_sum`, scraped
  from each validator's metrics port) over the time the loop ran;
- where the time goes: per stage of every judged submission (indexing, dispatch, queue, checks,
  verdict_wait, verdict_tx; `proofpool.validator.stages`), p50/p99 from the timestamps the
  indexer and the validators record in the database.

Profiles (`--profiles`, run one after the other on fresh markets, so their figures sit side by
side from one run): `tuned` is the devnet as it ships (workers and trainer niced, their sessions
included; accepted verdicts wait at most `PROOFPOOL_VERDICT_MAX_WAIT` = 1 s for a batch; workers
load each new checkpoint into their running engine); `baseline` puts back the settings the market
ran with before (everything at one priority, 5 s batch wait, a new vLLM engine per checkpoint:
`PROOFPOOL_WORKER_RELOAD_IN_PLACE=false`). What cannot be switched off is in both: validators
started and warm before the workers, the scoring checks before the recomputation.

Prints JSON lines and a table per profile, and writes `bench/results/e2e.jsonl`.
Run: `.venv/bin/python -m bench.e2e [--steps 3] [--samples-per-step 768] [--profiles baseline,tuned]`.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
from proofpool.devnet.run import (
    VALIDATOR_CONCURRENCY,
    WORKER_NICE,
    DevnetConfig,
    check_services,
    follow,
    market,
    settle,
    start_loop,
)
from proofpool.devnet.services import stop_all
from proofpool.devnet.stack import DevnetStack
from proofpool.validator.stages import STAGES, TOTAL, stage_rows
from proofpool_arithmetic.cache import ensure_devnet_model

from bench.market import emit

REDIS_DB = 9
PROFILES: dict[str, dict[str, Any]] = {
    "baseline": {
        "nice": 0,
        "validator_concurrency": 1,
        "validator_env": {"PROOFPOOL_VERDICT_MAX_WAIT": "5"},
        "worker_env": {"PROOFPOOL_WORKER_RELOAD_IN_PLACE": "false"},
    },
    "tuned": {
        "nice": WORKER_NICE,
        "validator_concurrency": VALIDATOR_CONCURRENCY,
        "validator_env": {},
        "worker_env": {},
    },
}
"""Devnet settings per profile (module docstring)."""
BATCH_LINE = re.compile(r"^(\S+ \S+) INFO proofpool\.worker\.node batch written .*?\bseconds=([0-9.]+)")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def stage_figures(stack: DevnetStack) -> dict[str, dict[str, float | int]]:
    """p50/p99/mean seconds and count per stage of every judged submission of the devnet pool."""
    with psycopg.connect(stack.env["DATABASE_URL"]) as conn:
        rows = stage_rows(conn, stack.pool_id)
    out: dict[str, dict[str, float | int]] = {}
    for stage in (*STAGES, TOTAL):
        values = [d[stage] for d in (row.durations() for row in rows) if stage in d]
        if values:
            out[stage] = {
                "p50": round(percentile(values, 0.5), 3),
                "p99": round(percentile(values, 0.99), 3),
                "mean": round(statistics.fmean(values), 3),
                "n": len(values),
            }
    return out


def verdict_latencies(stack: DevnetStack) -> list[float]:
    """Seconds of chain time from each submission's block to its verdict's block."""
    query = """
        SELECT s.block_number, v.block_number FROM submissions s
          JOIN verdicts v ON v.pool_id = s.pool_id AND v.work_key = s.work_key
         WHERE s.pool_id = %s"""
    with psycopg.connect(stack.env["DATABASE_URL"]) as conn:
        pairs = conn.execute(query, (stack.pool_id,)).fetchall()
    stamps: dict[int, int] = {}

    def stamp(block: int) -> int:
        if block not in stamps:
            stamps[block] = int(stack.admin.w3.eth.get_block(block)["timestamp"])
        return stamps[block]

    return [float(stamp(verdict) - stamp(submitted)) for submitted, verdict in pairs]


def generating_share(log_path: Path) -> tuple[float, int] | None:
    """(generation seconds / time from the first batch's start to the last batch's end, batches)."""
    batches = []
    for line in log_path.read_text(errors="replace").splitlines():
        match = BATCH_LINE.match(line)
        if match:
            at = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            batches.append((at, float(match.group(2))))
    if len(batches) < 2:
        return None
    span = batches[-1][0] - (batches[0][0] - batches[0][1])
    return sum(seconds for _, seconds in batches) / span, len(batches)


def busy_seconds(port: int) -> float:
    """`proofpool_validation_seconds_sum` of one validator."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    match = re.search(r"^proofpool_validation_seconds_sum (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def run_profile(name: str, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """One market run with profile `name`'s settings; its figure rows."""
    profile = PROFILES[name]
    config = DevnetConfig(
        out_dir=out / name,
        steps=args.steps,
        samples_per_step=args.samples_per_step,
        database="proofpool_bench_e2e",
        redis_db=REDIS_DB,
        nice=profile["nice"],
        validator_concurrency=profile["validator_concurrency"],
        validator_env=profile["validator_env"],
        worker_env=profile["worker_env"],
    )
    common = {
        "bench": "e2e",
        "profile": name,
        "steps": args.steps,
        "samples_per_step": args.samples_per_step,
        "cores": len(os.sched_getaffinity(0)),
    }
    with market(config, print) as (stack, _store):
        run = start_loop(config, stack, print)
        try:
            started = time.monotonic()
            follow(run, lambda _run, _snap: None)
            loop_seconds = time.monotonic() - started
            busy = {name: busy_seconds(port) for name, port in run.metrics_ports.items()}
            snapshot = settle(run, print)
        finally:
            stop_all(run.processes)
        latencies = verdict_latencies(stack)
        stages = stage_figures(stack)
        shares = {
            name: generating_share(stack.root / f"worker-{name}.log") for name in run.workers if name != run.cheater
        }
    submitted = sum(n.submitted for n in snapshot.nodes)
    return [
        {
            **common,
            "figure": "submissions_per_minute",
            "value": round(submitted / (loop_seconds / 60), 1),
            "submissions": submitted,
            "loop_seconds": round(loop_seconds, 1),
        },
        {
            **common,
            "figure": "submission_to_verdict_seconds",
            "p50": percentile(latencies, 0.5),
            "p99": percentile(latencies, 0.99),
            "mean": round(statistics.fmean(latencies), 2),
            "verdicts": len(latencies),
        },
        {
            **common,
            "figure": "worker_generating_share",
            "value": round(statistics.fmean(s[0] for s in shares.values() if s), 3) if any(shares.values()) else None,
            "per_worker": {name: None if s is None else round(s[0], 3) for name, s in shares.items()},
        },
        {
            **common,
            "figure": "validator_utilization",
            "value": round(statistics.fmean(b / loop_seconds for b in busy.values()), 3),
            "per_validator": {name: round(b / loop_seconds, 3) for name, b in busy.items()},
        },
        *({**common, "figure": "stage_seconds", "stage": stage, **values} for stage, values in stages.items()),
    ]


def print_table(rows: list[dict[str, Any]]) -> None:
    """The figures of every profile side by side, then the stages."""
    profiles = list(dict.fromkeys(row["profile"] for row in rows))
    by = {(row["profile"], row["figure"], row.get("stage")): row for row in rows}
    print("\n| figure | " + " | ".join(profiles) + " |")
    print("|---|" + "---|" * len(profiles))

    def cell(profile: str, figure: str, stage: str | None = None) -> str:
        row = by.get((profile, figure, stage))
        if row is None:
            return "-"
        if "p50" in row:
            return f"p50 {row['p50']} / p99 {row['p99']}"
        return str(row["value"])

    for figure in ("submissions_per_minute", "submission_to_verdict_seconds", "worker_generating_share"):
        print(f"| {figure} | " + " | ".join(cell(p, figure) for p in profiles) + " |")
    print("| validator_utilization | " + " | ".join(cell(p, "validator_utilization") for p in profiles) + " |")
    for stage in (*STAGES, TOTAL):
        print(f"| stage {stage} (s) | " + " | ".join(cell(p, "stage_seconds", stage) for p in profiles) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--samples-per-step", type=int, default=768)
    parser.add_argument(
        "--profiles", default="baseline,tuned", help=f"comma-separated, run in order: {', '.join(PROFILES)}"
    )
    args = parser.parse_args()
    names = [name.strip() for name in args.profiles.split(",") if name.strip()]
    unknown = [name for name in names if name not in PROFILES]
    if unknown or not names:
        parser.error(f"unknown profile(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(PROFILES)}")
    check_services()
    ensure_devnet_model()
    out = Path(tempfile.mkdtemp(prefix="proofpool-bench-e2e-"))
    rows: list[dict[str, Any]] = []
    for name in names:
        rows += run_profile(name, args, out)
    emit("e2e", rows)
    print_table(rows)


if __name__ == "__main__":
    main()
