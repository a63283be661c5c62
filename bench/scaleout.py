"""Validator scale-out: files judged per minute by one validator process, then by two.

A validator scales out as more Celery workers on the shared `validate` queue: each
`proofpool validator run` (its own key, its own verdict sender) takes the next task from the
broker, so a second process, on another core or another host, should judge twice the files when
the per-file cost is the process's own CPU. Measured here on the devnet market:

1. Backlog. The market runs for real (anvil, SeaweedFS, PostgreSQL
   `proofpool_bench_scaleout_<random>`, Redis db 2, the indexer dispatching a task per submission,
   the backend; no trainer: the workers generate at model version 0). Honest workers (bob, carol;
   `proofpool worker run --max-bundle 1`, each on its own core: one file per submission, so a decided
   submission is a judged file) generate and submit while NO validator runs, until
   `--backlog` submissions wait in the `validate` queue; then the workers stop, so the phases'
   CPU is the validators'.
2. Phase 1: one validator process (`devnet.run.start_validators`: one validation slot, one
   PyTorch thread), pinned with its whole process tree to one core. Once every validator of the
   phase has decided a file, a `--warmup` passes; then a `--window` of wall time counts the rows
   of `validations` decided inside it (PostgreSQL's `decided_at`); if the queue empties first, the
   window ends there (`backlog_lasted` false). Stopped (a warm shutdown: the
   task in hand finishes, the prefetched one goes back to the queue).
3. Phase 2: two validator processes (validator, validator2: each its own key with VALIDATOR_ROLE
   and stake), each pinned to its own core, on what is left of the backlog; measured the same.
   Phases 1 and 2 alternate `--rounds` times, so a load that comes and goes on a shared machine
   falls on both.
4. The validators then drain the backlog, every verdict is sent on-chain, and the run checks that
   every submission was judged once and accepted (all files are honest).

Reported per phase: files judged per minute (total and per validator), the CPU each validator's
process tree used per second of the window and per file, the seconds its slot spent inside
`validate` (`proofpool_validation_seconds_sum`), its threads' run-queue wait (CPU contention), the
CPU of the market's own services (anvil, indexer, backend, SeaweedFS, the PostgreSQL backends of
this database, the shared Redis server) and of the whole machine; and the ratio of phase 2 to
phase 1. The machine may be shared: `machine_busy_cores` minus what this run's processes used is
someone else's load, and it lowers the ratio.

Prints JSON lines and writes `bench/results/scaleout.jsonl`.
Run: `.venv/bin/python -m bench.scaleout [--backlog 3200] [--rounds 2] [--window 40] [--warmup 5]`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import redis
from proofpool.devnet.market import VALIDATOR_NAMES
from proofpool.devnet.run import DevnetConfig, DevnetRun, start_validators, start_worker
from proofpool.devnet.services import Service, stop_all

from bench.e2e import busy_seconds
from bench.market import BenchMarket, bench_market, emit
from proofpool.infra.broker import VALIDATE_QUEUE
from proofpool.infra.chain.deploy import grant_validator
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN

REDIS_DB = 2
WORKERS = ("bob", "carol")
"""The providers whose nodes build the backlog (alice's node, onboarded by `bench_market`, stays idle)."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
FUNDING_PER_FILE = 5 * TOKEN
"""Budget added to the pool per file of the backlog: a devnet file's reward (about 2.2 POOL for its
~220 work units) and the validator's fee (0.5 POOL) are reserved when it is attested."""


# --- /proc accounting --------------------------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first), None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process on the machine."""
    parents = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                parents[int(entry.name)] = int(fields[1])
    return parents


def process_tree(root: int, parents: Mapping[int, int] | None = None) -> list[int]:
    """`root` and every process descended from it."""
    parents = _parents() if parents is None else parents
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in parents:
            tree.append(pid)
            todo.extend(children.get(pid, ()))
    return tree


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU of `pids` and of their reaped children (so a tree's short-lived decoding
    processes count once they exit): summed over a whole tree, the CPU the tree has used."""
    total = 0
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None:
            total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / CLOCK_TICKS


def runqueue_wait_seconds(pids: Iterable[int]) -> float:
    """Seconds the live threads of `pids` spent runnable but waiting for a CPU (schedstat)."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return total / 1e9


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores; /proc/stat, everything but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values) - values[3] - values[4]) / CLOCK_TICKS


def pin_tree(root: int, cores: Sequence[int]) -> int:
    """Bind every thread of `root`'s process tree to `cores`; returns how many were bound.

    Processes started later inherit the binding from their parent, so pinning right after the
    spawn covers the Celery workers the supervisor starts; calling it again catches any thread
    created in between."""
    bound = 0
    for pid in process_tree(root):
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                os.sched_setaffinity(int(tid), set(cores))
                bound += 1
            except OSError:  # gone meanwhile
                continue
    return bound


def pids_by_name(name: str) -> list[int]:
    """Processes whose command name is `name` (e.g. the shared `redis-server`)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if Path(f"/proc/{entry.name}/comm").read_text().strip() == name:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# --- the market ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """CPU seconds used so far by each group of processes, and the wall time of the reading."""

    at: float
    validators: dict[str, float]
    validator_wait: dict[str, float]
    validator_busy: dict[str, float]
    market: dict[str, float]
    machine: float


def usage(market: BenchMarket, validators: Mapping[str, Service], ports: Mapping[str, int]) -> Usage:
    """Read the CPU counters of the validators, the market's services and the machine."""
    stack = market.stack
    parents = _parents()
    trees = {name: process_tree(s.process.pid, parents) for name, s in validators.items()}
    groups = {
        "anvil": [stack.anvil.process.pid],
        "seaweedfs": [market.s3.process.pid],
        "postgres_backends_of_this_db": postgres_backends(stack.env["DATABASE_URL"]),
        "redis_server_shared": pids_by_name("redis-server"),
        **{s.name: [s.process.pid] for s in stack.services if s.name in ("indexer", "backend")},
    }
    return Usage(
        at=time.monotonic(),
        validators={name: cpu_seconds(pids) for name, pids in trees.items()},
        validator_wait={name: runqueue_wait_seconds(pids) for name, pids in trees.items()},
        validator_busy={name: busy_seconds(port) for name, port in ports.items()},
        market={
            name: cpu_seconds(pid for root in pids for pid in process_tree(root, parents))
            for name, pids in groups.items()
        },
        machine=machine_busy_seconds(),
    )


def postgres_backends(url: str) -> list[int]:
    """Server processes of the connections to this database (their CPU is the database's work)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(pid) for (pid,) in rows]


def submissions(conn: psycopg.Connection, pool_id: int) -> int:
    return conn.execute("SELECT count(*) FROM submissions WHERE pool_id = %s", (pool_id,)).fetchone()[0]


def undispatched(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM outbox WHERE dispatched_at IS NULL").fetchone()[0]


def queue_depth(redis_url: str) -> int:
    """Validation tasks waiting in the broker (the `validate` list of the bench's Redis db)."""
    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.llen(VALIDATE_QUEUE))
    finally:
        client.close()


def build_backlog(market: BenchMarket, workers: int, backlog: int, cores: Sequence[int], timeout: float) -> dict:
    """Run `workers` honest workers (one core each) until `backlog` submissions are indexed and
    dispatched, then stop them; returns the backlog's figures."""
    stack = market.stack
    admin = stack.admin
    funding = backlog * FUNDING_PER_FILE  # the stack's pool budget pays for a few hundred files only
    admin.token.mint(admin.address, funding)
    admin.token.approve(admin.pool.address, funding)
    admin.pool.fund_pool(stack.pool_id, funding)
    run = DevnetRun(DevnetConfig(out_dir=market.root / "run", workers=workers, cheat=None, validators=1), stack)
    providers = {name: (provider, node) for name, provider, node in stack.cast.providers()}
    started = time.monotonic()
    for i, name in enumerate(WORKERS[:workers]):
        provider, node = providers[name]
        start_worker(run, name, provider, node, (cores[i % len(cores)],), ("--max-bundle", "1"))
    print(f"workers {', '.join(run.workers)} building a backlog of {backlog} files (no validator running)")
    first = None
    deadline = time.monotonic() + timeout
    with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        while (count := submissions(conn, stack.pool_id)) < backlog:
            if first is None and count:
                first = time.monotonic()
            for service in run.workers.values():
                if not service.alive:
                    raise RuntimeError(f"{service.name} exited:\n{service.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {count} of {backlog} submissions after {timeout:.0f} s")
            time.sleep(1)
        generating = time.monotonic() - (first or started)
        stop_all(list(run.workers.values()), timeout=60)
        while undispatched(conn):  # the indexer sends the last submissions' tasks
            time.sleep(0.5)
        time.sleep(2)  # and indexes a submission a stopping worker sent last
        while undispatched(conn):
            time.sleep(0.5)
        total = submissions(conn, stack.pool_id)
    depth = queue_depth(stack.env["REDIS_URL"])
    print(f"backlog: {total} submissions, {depth} tasks in the validate queue ({generating:.0f} s of generation)")
    return {
        "bench": "scaleout",
        "figure": "backlog",
        "submissions": total,
        "queued_tasks": depth,
        "workers": workers,
        "files_per_minute_generated": round(total / (generating / 60), 1),
    }


def decided_between(conn: psycopg.Connection, pool_id: int, start: datetime, end: datetime) -> dict[str, int]:
    """Rows decided in [start, end), per validator address."""
    rows = conn.execute(
        "SELECT validator, count(*) FROM validations WHERE pool_id = %s AND decided_at >= %s AND decided_at < %s"
        " GROUP BY validator",
        (pool_id, start, end),
    ).fetchall()
    return {str(v): int(n) for v, n in rows}


def stage_medians(
    conn: psycopg.Connection, pool_id: int, start: datetime, end: datetime
) -> dict[str, tuple[float, float]]:
    """Per validator, over the rows decided in [start, end): the median seconds from claim to
    decision (fetch, checks, evidence, record) and between one decision and the next (the whole
    cycle: the broker, the submission reads before the claim, the flush request, the ack)."""
    rows = conn.execute(
        "SELECT validator, extract(epoch FROM claimed_at), extract(epoch FROM decided_at) FROM validations"
        " WHERE pool_id = %s AND decided_at >= %s AND decided_at < %s ORDER BY validator, decided_at",
        (pool_id, start, end),
    ).fetchall()
    by_validator: dict[str, list[tuple[float, float]]] = {}
    for validator, claimed, decided in rows:
        by_validator.setdefault(str(validator), []).append((float(claimed), float(decided)))
    medians = {}
    for validator, times in by_validator.items():
        work = [d - c for c, d in times]
        gaps = [b[1] - a[1] for a, b in itertools.pairwise(times)] or [float("nan")]
        medians[validator] = (round(statistics.median(work), 4), round(statistics.median(gaps), 4))
    return medians


def phase(
    market: BenchMarket, processes: int, cores: Sequence[int], window: float, warmup: float, *, stop: bool = True
) -> tuple[dict, DevnetRun]:
    """Start `processes` validators, each pinned to its own core, and time the window."""
    stack = market.stack
    admin = stack.admin
    names = VALIDATOR_NAMES[:processes]
    shares = {name: (cores[i % len(cores)],) for i, name in enumerate(names)}
    for _, account in stack.cast.validators()[:processes]:  # granted first, so the spawns are back to back
        if not admin.pool.has_role("VALIDATOR_ROLE", account.address):
            grant_validator(admin.w3, TxSender(admin.w3, stack.cast.admin), admin.book, account.address)
    run = DevnetRun(DevnetConfig(out_dir=market.root / "run", workers=1, cheat=None, validators=processes), stack)
    with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        since = conn.execute("SELECT now()").fetchone()[0]
        start_validators(run, shares, print)
        for name, service in run.validators.items():
            pin_tree(service.process.pid, shares[name])
        addresses = {account.address: name for name, account in stack.cast.validators()[:processes]}
        deadline = time.monotonic() + 300
        while True:  # every process of the phase has decided a file: all of them are up
            deciders, first = conn.execute(
                "SELECT count(DISTINCT validator), max(first) FROM (SELECT validator, min(decided_at) AS first"
                " FROM validations WHERE pool_id = %s AND decided_at >= %s GROUP BY validator) AS firsts",
                (stack.pool_id, since),
            ).fetchone()
            if deciders >= processes:
                break
            for service in run.validators.values():
                if not service.alive:
                    raise RuntimeError(f"{service.name} exited:\n{service.log_tail()}")
                pin_tree(service.process.pid, shares[service.name])
            if time.monotonic() > deadline:
                raise TimeoutError("no decision within 300 s of starting the validators")
            time.sleep(0.2)
        for service in run.validators.values():  # threads started since, e.g. the forkserver's
            pin_tree(service.process.pid, shares[service.name])
        startup = (first - since).total_seconds()
        start = first + timedelta(seconds=warmup)
        end = start + timedelta(seconds=window)
        time.sleep(max(0.0, (start - conn.execute("SELECT now()").fetchone()[0]).total_seconds()))
        before = usage(market, run.validators, run.metrics_ports)
        while (now := conn.execute("SELECT now()").fetchone()[0]) < end:
            if queue_depth(stack.env["REDIS_URL"]) == 0:  # the backlog ran out: the window ends here
                end = now
                break
            time.sleep(min(0.5, (end - now).total_seconds()))
        after = usage(market, run.validators, run.metrics_ports)
        measured = max(0.001, (end - start).total_seconds())
        time.sleep(1)  # a decision committed with a decided_at inside the window is visible now
        decided = decided_between(conn, stack.pool_id, start, end)
        stages = stage_medians(conn, stack.pool_id, start, end)
        left = queue_depth(stack.env["REDIS_URL"])
        verdicts = dict(
            conn.execute(
                "SELECT coalesce(verdict, 'claimed'), count(*) FROM validations WHERE pool_id = %s GROUP BY 1",
                (stack.pool_id,),
            ).fetchall()
        )
    if stop:
        stop_all(list(run.validators.values()), timeout=60)
    seconds = after.at - before.at
    per_validator = {addresses.get(v, v): n for v, n in decided.items()}
    files = sum(decided.values())
    row = {
        "bench": "scaleout",
        "figure": "files_judged_per_minute",
        "validator_processes": processes,
        "value": round(files / (measured / 60), 1),
        "files_in_window": files,
        "window_s": round(measured, 1),
        "per_validator": {name: round(n / (measured / 60), 1) for name, n in per_validator.items()},
        "cores": {name: list(c) for name, c in shares.items()},
        "startup_to_first_decision_s": round(startup, 1),
        "validator_cpu_cores": {
            name: round((after.validators[name] - before.validators[name]) / seconds, 3) for name in names
        },
        "validator_cpu_s_per_file": {
            name: round((after.validators[name] - before.validators[name]) / max(1, per_validator.get(name, 0)), 3)
            for name in names
        },
        "validate_seconds_per_file": {
            name: round(
                (after.validator_busy[name] - before.validator_busy[name]) / max(1, per_validator.get(name, 0)), 3
            )
            for name in names
        },
        "claim_to_decision_median_s": {addresses.get(v, v): m[0] for v, m in stages.items()},
        "between_decisions_median_s": {addresses.get(v, v): m[1] for v, m in stages.items()},
        "validator_runqueue_wait_share": {
            name: round((after.validator_wait[name] - before.validator_wait[name]) / seconds, 3) for name in names
        },
        "market_cpu_cores": {
            name: round((after.market[name] - before.market[name]) / seconds, 3) for name in after.market
        },
        "machine_busy_cores": round((after.machine - before.machine) / seconds, 3),
        "queue_left_after_window": left,
        "backlog_lasted": measured >= window - 1,
        "verdicts_so_far": verdicts,
    }
    mine = sum(row["validator_cpu_cores"].values()) + sum(row["market_cpu_cores"].values())
    row["other_load_cores"] = round(max(0.0, row["machine_busy_cores"] - mine), 3)
    print(
        f"{processes} validator process(es): {row['value']} files/min over {measured:.0f} s "
        f"({files} files; {left} tasks left in the queue)"
    )
    return row, run


def drain(market: BenchMarket, run: DevnetRun, timeout: float) -> dict:
    """Let the running validators judge the rest and send every verdict; then check the outcome."""
    stack = market.stack
    deadline = time.monotonic() + timeout
    with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        total = submissions(conn, stack.pool_id)
        while True:
            pending = conn.execute(
                "SELECT count(*) FROM submissions WHERE pool_id = %s AND status = 'pending'", (stack.pool_id,)
            ).fetchone()[0]
            if pending == 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{pending} of {total} submissions still pending after {timeout:.0f} s")
            time.sleep(2)
        statuses = dict(
            conn.execute(
                "SELECT status, count(*) FROM submissions WHERE pool_id = %s GROUP BY status", (stack.pool_id,)
            ).fetchall()
        )
        rows = conn.execute(
            "SELECT validator, verdict, state, count(*) FROM validations WHERE pool_id = %s GROUP BY 1, 2, 3",
            (stack.pool_id,),
        ).fetchall()
    stop_all(list(run.validators.values()), timeout=60)
    names = {account.address: name for name, account in stack.cast.validators()}
    by_validator = {f"{names.get(v, v)}:{verdict}:{state}": int(n) for v, verdict, state, n in rows}
    judged = sum(int(n) for *_, n in rows)
    correct = statuses.get("accepted", 0) == total and judged == total and all(r[1] == "accepted" for r in rows)
    return {
        "bench": "scaleout",
        "figure": "verdicts_correct",
        "value": correct,
        "submissions": total,
        "onchain_status": statuses,
        "validations": by_validator,
        "note": "every file is honest: correct means each was judged once, accepted and attested on-chain",
    }


def files_per_cpu_second(row: dict) -> float:
    """Files judged per CPU-second the phase's validators used: what a process judges with a whole
    core, whatever share of one the machine gave it."""
    cpu = sum(row["validator_cpu_cores"].values()) * row["window_s"]
    return round(row["files_in_window"] / cpu, 2) if cpu else float("nan")


def summary_row(phases: list[dict], cores: int) -> dict:
    """The 2-to-1 ratio per round (phase 1 then 2) and over all rounds, raw and per CPU-second."""
    ones = [p for p in phases if p["validator_processes"] == 1]
    twos = [p for p in phases if p["validator_processes"] == 2]
    one = statistics.fmean(p["value"] for p in ones)
    two = statistics.fmean(p["value"] for p in twos)
    per_cpu_one = statistics.fmean(files_per_cpu_second(p) for p in ones)
    per_cpu_two = statistics.fmean(files_per_cpu_second(p) for p in twos)
    return {
        "bench": "scaleout",
        "figure": "two_to_one_ratio",
        "value": round(two / one, 3) if one else float("nan"),
        "per_round": [
            round(b["value"] / a["value"], 3) if a["value"] else None for a, b in zip(ones, twos, strict=True)
        ],
        "files_per_minute": {"1": round(one, 1), "2": round(two, 1)},
        "files_per_validator_cpu_second": {"1": round(per_cpu_one, 2), "2": round(per_cpu_two, 2)},
        "per_cpu_ratio": round(per_cpu_two / per_cpu_one, 3) if per_cpu_one else float("nan"),
        "validator_cpu_cores": {
            "1": round(statistics.fmean(sum(p["validator_cpu_cores"].values()) for p in ones), 3),
            "2": round(statistics.fmean(sum(p["validator_cpu_cores"].values()) for p in twos), 3),
        },
        "other_load_cores": {
            "1": round(statistics.fmean(p["other_load_cores"] for p in ones), 3),
            "2": round(statistics.fmean(p["other_load_cores"] for p in twos), 3),
        },
        "cores": cores,
        "target": 2.0,
        "all_windows_on_backlog": all(p["backlog_lasted"] for p in phases),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=3200, help="Submissions to queue before the phases.")
    parser.add_argument("--workers", type=int, default=2, choices=(1, 2), help="Honest workers building it.")
    parser.add_argument("--rounds", type=int, default=2, help="Phase 1 then phase 2, this many times.")
    parser.add_argument("--window", type=float, default=40.0, help="Seconds each phase is measured.")
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="Seconds not counted after every validator's first decision."
    )
    parser.add_argument("--backlog-timeout", type=float, default=1800.0)
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("the scale-out bench needs 2 cores (one per validator process)")
    phases = []
    with bench_market("scaleout", REDIS_DB, dispatch=True) as market:
        backlog = build_backlog(market, args.workers, args.backlog, cores, args.backlog_timeout)
        for round_ in range(args.rounds):
            for processes in (1, 2):
                last = round_ == args.rounds - 1 and processes == 2
                row, run = phase(market, processes, cores, args.window, args.warmup, stop=not last)
                phases.append({**row, "round": round_ + 1})
        outcome = drain(market, run, timeout=900)
    emit("scaleout", [backlog, *phases, summary_row(phases, len(cores)), outcome])


if __name__ == "__main__":
    main()
