"""Training pools (DiLoCo): bytes per submission, time per outer step by phase, replay cost, utilization.

Two parts, both on the devnet's training pool (`proofpool.devnet.diloco.corpus`: Python stdlib
sources, a 512-id byte-level BPE, a tiny Llama; H = 8 inner steps of 8 rows x 64 tokens):

1. Bytes, in this process (one torch thread): a real pseudo-gradient (`run_inner` from checkpoint 0
   on a node's shard) of the devnet model and of a larger one (hidden 512, 8 layers, the same data),
   encoded with `encode_update` as int8 per tensor, int8 in blocks of 4,096 and fp32: file bytes,
   how much of an int8 file is lookup tables and header, its relative L2 error, and the traffic per
   trained token against data parallel (which sends an fp32 gradient every step: 4 * params bytes
   per B * seq_len tokens; DiLoCo sends one file per H steps: file bytes per H * B * seq_len
   tokens) for H = 8 and 100, beside PRIME's ~400x (int8 at H = 100).
2. A market run (`run_diloco_devnet`, as `proofpool devnet run --kind diloco` runs it without the
   baselines and the ledger check): anvil, SeaweedFS, PostgreSQL `proofpool_bench_diloco`, Redis
   db 3, the backend, the indexer, two validators, the aggregator and four workers (the last one
   uploading x10 pseudo-gradients unless `--cheat none`), all on this machine's cores. Read back
   from the workers' `round trained` log fields (checkpoint, inner, quantize, upload, submit), the
   validators' rows (claimed, decided, sent = the verdict's receipt; evidence `replay_seconds`) and
   the aggregator's rounds.jsonl (aggregate, publish): seconds by phase per file, each round's
   critical path (the file whose verdict came last, from the previous checkpoint's publication to
   this one's), validator replay seconds over the worker's inner seconds per file, and the share
   of each round a worker spends computing (inner + quantize) against PRIME's 83-96%, with the H
   at which that share would pass 83% given the measured fixed overhead.

Rounds from 1 on are the steady state (round 0 also holds the workers' start and the cheater's
ejection). Prints JSON lines and writes `bench/results/diloco.jsonl`.
Run: `.venv/bin/python -m bench.diloco [--rounds 8] [--cheat scaled|none] [--quick]` (about 2.5
minutes; `--quick`: 2 rounds and one inner step of the larger model, under 2 minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import psycopg
import torch
from proofpool.devnet.diloco.cheats import TrainCheat
from proofpool.devnet.diloco.corpus import DevnetDilocoPool, build_devnet_pool, build_model
from proofpool.devnet.diloco.run import DilocoConfig, run_diloco_devnet
from proofpool.devnet.diloco.simulate import SIM_POOL_ID, sim_nodes
from proofpool.trainer.aggregate import read_rounds
from rich.console import Console

from bench.market import emit
from proofpool.core.diloco.codec import LEVELS, blocks_of
from proofpool.core.diloco.compare import relative_l2
from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.update_file import UpdateMeta, encode_update, read_update
from proofpool.infra import db
from proofpool.infra.config import get_settings
from proofpool.training.inner import TrainJob, load_model, run_inner

if TYPE_CHECKING:
    from proofpool.core.diloco.spec import DilocoSpec

DATABASE: Final = "proofpool_bench_diloco"
REDIS_DB: Final = 3
"""Not used by any test fixture or other bench (they take 5 to 15)."""
LARGE: Final = {"hidden": 512, "layers": 8, "heads": 8, "intermediate": 2048}
CODECS: Final = (("int8", 0), ("int8", 4096), ("fp32", 0))
HORIZONS: Final = (8, 100)
PRIME_REDUCTION: Final = 400
"""PRIME (INTELLECT-1): int8 pseudo-gradients every 100 inner steps, ~400x less than data parallel."""
PRIME_UTILIZATION: Final = (0.83, 0.96)
TARGET: Final = 0.83
ROUND_LINE = re.compile(r"^(\S+ \S+) INFO proofpool\.worker\.train round trained (.*)$")
WORKER_PHASES: Final = ("checkpoint", "inner", "quantize", "upload", "submit")


# --- part 1: bytes ------------------------------------------------------------------------------


def large_model_dir(pool: DevnetDilocoPool, out: Path) -> Path:
    """The larger Llama (hidden 512, 8 layers), on the devnet pool's tokenizer and sequence length."""
    settings = dataclasses.replace(pool.settings, **LARGE)
    model_dir = out / "large-model"
    build_model(settings, pool.vocab_size, eos_id=0).save_pretrained(model_dir)
    return model_dir


def measure_model(
    name: str, model_dir: Path, spec: DilocoSpec, tokens: torch.Tensor, node: str, steps: int
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """Rows for one model: its pseudo-gradient's file in each codec, and the traffic against data
    parallel; plus its compute costs (seconds per inner step, model load, int8 encode)."""
    inner = dataclasses.replace(spec.inner, steps=steps)
    trained = dataclasses.replace(spec, inner=inner)
    job = TrainJob(SIM_POOL_ID, 0, node, model_dir, tokens, node_rows(trained, SIM_POOL_ID, 0, node), inner)
    # The faster of two runs: the first in a process also pays one-time start-up (about 4 s here).
    result = min((run_inner(job) for _ in range(2)), key=lambda r: r.seconds)
    started = time.perf_counter()
    load_model(model_dir)
    load = time.perf_counter() - started
    gradient = result.pseudo_gradient
    params = sum(t.numel() for t in gradient.values())
    tokens_per_step = spec.inner.batch_size * spec.dataset.seq_len
    common = {"model": name, "params": params, "tensors": len(gradient)}
    rows: list[dict[str, Any]] = []
    files: dict[tuple[str, int], int] = {}
    encode_seconds = 0.0
    for codec, block_size in CODECS:
        meta = file_meta(trained, node, codec, block_size, result.losses)
        started = time.perf_counter()
        data = encode_update(gradient, meta)
        seconds = time.perf_counter() - started
        if (codec, block_size) == ("int8", spec.codec.block_size):
            encode_seconds = seconds
        files[(codec, block_size)] = len(data)
        values = params if codec == "int8" else 4 * params
        tables = sum(blocks_of(t.numel(), block_size) for t in gradient.values()) * LEVELS * 4 if codec == "int8" else 0
        header = 8 + int.from_bytes(data[:8], "little")
        error = relative_l2(read_update(data).dequantized(), gradient)
        rows.append(
            common
            | {
                "figure": "submission_bytes",
                "codec": codec,
                "block_size": block_size,
                "bytes": len(data),
                "value_bytes": values,
                "table_bytes": tables,
                "header_bytes": header,
                "overhead": round((len(data) - values) / values, 5),
                "relative_l2": round(error, 6),
                "encode_seconds": round(seconds, 4),
            }
        )
    fp32 = files[("fp32", 0)]
    for codec, block_size in CODECS[:2]:
        rows.append(
            common
            | {
                "figure": "int8_ratio",
                "block_size": block_size,
                "fp32_over_int8": round(fp32 / files[(codec, block_size)], 3),
            }
        )
    for horizon in HORIZONS:
        # The file's size does not depend on H but through its loss trace (one float per step).
        meta = file_meta(dataclasses.replace(trained, inner=dataclasses.replace(inner, steps=horizon)), node, "int8", 0)
        int8 = len(encode_update(gradient, meta)) if horizon != steps else files[("int8", 0)]
        fp32_h = fp32 + (int8 - files[("int8", 0)])
        dp = 4 * params / tokens_per_step
        rows.append(
            common
            | {
                "figure": "traffic_vs_data_parallel",
                "H": horizon,
                "tokens_per_step": tokens_per_step,
                "dp_bytes_per_token": round(dp, 2),
                "diloco_int8_bytes_per_token": round(int8 / (horizon * tokens_per_step), 3),
                "diloco_fp32_bytes_per_token": round(fp32_h / (horizon * tokens_per_step), 3),
                "reduction_int8": round(dp * horizon * tokens_per_step / int8, 1),
                "reduction_fp32": round(dp * horizon * tokens_per_step / fp32_h, 1),
                "prime_claim": PRIME_REDUCTION if horizon == 100 else None,
            }
        )
    costs = {
        "seconds_per_step": max(0.0, result.seconds - load) / steps,
        "load_seconds": load,
        "encode_seconds": encode_seconds,
    }
    rows.append(
        common
        | {"figure": "inner_compute", "steps": steps, "threads": torch.get_num_threads()}
        | {key: round(value, 4) for key, value in costs.items()}
    )
    return rows, costs


def file_meta(
    spec: DilocoSpec, node: str, codec: str, block_size: int, losses: Sequence[float] | None = None
) -> UpdateMeta:
    """An update file's metadata as a worker writes it (the loss trace is a stand-in when not given)."""
    return UpdateMeta(
        pool_id=SIM_POOL_ID,
        node=node,
        round=0,
        base_manifest_sha256="0" * 64,
        spec_sha256=spec.sha256(),
        codec=codec,
        block_size=block_size,
        inner_steps=spec.inner.steps,
        tokens=spec.work_units,
        losses=tuple(losses) if losses is not None else tuple(6.0 - 0.001 * i for i in range(spec.inner.steps)),
    )


# --- part 2: the market run ---------------------------------------------------------------------


def worker_rounds(stack_dir: Path) -> list[dict[str, Any]]:
    """Every `round trained` line of every worker log: its time, the worker and its key=value fields."""
    found = []
    for path in sorted(stack_dir.glob("worker-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            match = ROUND_LINE.match(line)
            if not match:
                continue
            fields = dict(part.split("=", 1) for part in match.group(2).split() if "=" in part)
            at = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            found.append({"worker": path.stem.removeprefix("worker-"), "logged": at, **fields})
    return found


def validations(database: str) -> dict[str, dict[str, Any]]:
    """Per work key (0x hex): the submission's block time and its validator row (claim, decision,
    receipt of the verdict's transaction, evidence)."""
    url = db.with_database(get_settings().database_url, database)
    query = """
        SELECT s.work_key, s.model_version, s.submitted_at, v.claimed_at, v.decided_at, v.sent_at,
               v.verdict, v.reason, v.evidence
          FROM submissions s LEFT JOIN validations v USING (pool_id, work_key)"""
    with psycopg.connect(url) as conn:
        rows = conn.execute(query).fetchall()
    keys = ("version", "submitted", "claimed", "decided", "sent", "verdict", "reason", "evidence")
    found = {}
    for key, *values in rows:
        row = dict(zip(keys, values, strict=True))
        for name in ("submitted", "claimed", "decided", "sent"):
            row[name] = row[name].timestamp() if row[name] is not None else None
        found["0x" + bytes(key).hex()] = row
    return found


def publish_done(rounds: Sequence[Mapping[str, Any]]) -> dict[int, float]:
    """Wall time each checkpoint's publication ended, by version (rounds.jsonl `time` is after eval)."""
    return {
        int(row["version"]): float(row["time"]) - float(row["seconds"].get("eval", 0.0))
        for row in rounds
        if row.get("round") is not None and "time" in row
    }


def file_rows(logged: Sequence[Mapping[str, Any]], verdicts: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per submitted file: the worker's seconds by phase and the validator's, joined on the work key."""
    files = []
    for line in logged:
        key = line.get("work_key")
        verdict = verdicts.get(key or "")
        if line.get("state") != "submitted" or verdict is None or verdict["sent"] is None:
            continue
        phases = {name: float(line[f"{name}_seconds"]) for name in WORKER_PHASES}
        evidence = verdict["evidence"] or {}
        replay = evidence.get("replay_seconds")
        files.append(
            {
                "worker": line["worker"],
                "round": int(line["version"]),
                "work_key": key,
                "outcome": verdict["verdict"],
                "reason": verdict["reason"],
                "logged": line["logged"],
                "started": line["logged"] - sum(phases.values()),
                **phases,
                "verdict": verdict["sent"] - line["logged"],
                "index_claim": verdict["claimed"] - line["logged"],
                "decide": verdict["decided"] - verdict["claimed"],
                "verdict_send": verdict["sent"] - verdict["decided"],
                "sent": verdict["sent"],
                "replay": None if replay is None else float(replay),
                "bitwise": evidence.get("bitwise"),
                "relative_l2": evidence.get("relative_l2"),
            }
        )
    return files


def critical_paths(files: Sequence[Mapping[str, Any]], rounds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each steady round (1 on) from checkpoint r's publication to checkpoint r+1's, cut at the file
    whose verdict was sent last among the files averaged: the phases add up to the round's period."""
    done = publish_done(rounds)
    paths = []
    for row in rounds:
        if row.get("round") is None or int(row["round"]) < 1 or int(row["round"]) not in done:
            continue
        r = int(row["round"])
        opened, closed = done[r], done[r + 1]
        included = [f for f in files if f["round"] == r and f["work_key"].removeprefix("0x") in row["included"]]
        if not included:
            continue
        last = max(included, key=lambda f: f["sent"])
        seconds = row["seconds"]
        closing = closed - float(seconds["publish"]) - float(seconds["aggregate"])
        paths.append(
            {
                "round": r,
                "period": closed - opened,
                "contributors": len(included),
                "checkpoint_seen": last["started"] - opened,
                **{name: last[name] for name in WORKER_PHASES},
                "index_claim": last["index_claim"],
                "decide": last["decide"],
                "replay": last["replay"],
                "verdict_send": last["verdict_send"],
                "aggregator_pickup": closing - last["sent"],
                "aggregate": float(seconds["aggregate"]),
                "publish": float(seconds["publish"]),
            }
        )
    return paths


def summary(values: Sequence[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {
        "n": len(values),
        "median": round(statistics.median(ordered), 3),
        "mean": round(statistics.fmean(ordered), 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
    }


def horizon_for(target: float, fixed: float, per_step: float, fixed_compute: float) -> int | None:
    """Least H whose compute share (fixed_compute + H * per_step) / (that + fixed) reaches `target`."""
    if per_step <= 0:
        return None
    return max(1, math.ceil((target / (1 - target) * fixed - fixed_compute) / per_step))


def market_rows(
    config: DilocoConfig, spec: DilocoSpec, devnet: Mapping[str, float], large: Mapping[str, float]
) -> list[dict[str, Any]]:
    """The market run's figures (see the module docstring)."""
    rounds = read_rounds(config.out_dir / "aggregator")
    files = file_rows(worker_rounds(config.out_dir / "stack"), validations(config.database))
    honest = [f for f in files if f["outcome"] == "accepted"]
    steady = [f for f in honest if f["round"] >= 1]
    paths = critical_paths(honest, rounds)
    common = {"H": spec.inner.steps, "batch_size": spec.inner.batch_size, "seq_len": spec.dataset.seq_len}
    rows: list[dict[str, Any]] = []
    for name in (*WORKER_PHASES, "verdict", "index_claim", "decide", "replay", "verdict_send"):
        values = [f[name] for f in steady if f[name] is not None]
        rows.append(common | {"figure": "phase_seconds", "phase": name, "per": "file"} | summary(values))
    for name in ("aggregate", "publish", "fetch", "eval", "wait"):
        values = [float(r["seconds"][name]) for r in rounds if r.get("round") is not None and int(r["round"]) >= 1]
        rows.append(common | {"figure": "phase_seconds", "phase": name, "per": "round"} | summary(values))
    periods = [p["period"] for p in paths]
    rows.append(common | {"figure": "round_seconds", "rounds": len(periods)} | summary(periods))
    phases = [k for k in paths[0] if k not in ("round", "period", "contributors")] if paths else []
    rows.append(
        common
        | {
            "figure": "critical_path_seconds",
            "rounds": len(paths),
            "period": round(statistics.fmean(periods), 3) if periods else None,
            **{k: round(statistics.fmean(p[k] for p in paths if p[k] is not None), 3) for k in phases},
            "per_round": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in p.items()} for p in paths],
        }
    )
    ratios = [f["replay"] / f["inner"] for f in steady if f["replay"] is not None and f["inner"] > 0]
    rows.append(
        common
        | {
            "figure": "replay_over_inner",
            "files": len(ratios),
            "bitwise": sum(1 for f in steady if f["bitwise"]),
            "max_relative_l2": max((f["relative_l2"] for f in steady if f["relative_l2"] is not None), default=None),
        }
        | summary(ratios)
    )
    rows.append(utilization(common, steady, paths, ratios, spec, devnet, large))
    cheats = [f for f in files if f["outcome"] == "invalid"]
    if cheats:
        rows.append(
            common
            | {
                "figure": "cheater_files",
                "files": len(cheats),
                "reasons": sorted({str(f["reason"]) for f in cheats}),
                "relative_l2": [f["relative_l2"] for f in cheats],
                "decide_seconds": [round(f["decide"], 3) for f in cheats],
            }
        )
    return rows


def utilization(
    common: Mapping[str, Any],
    steady: Sequence[Mapping[str, Any]],
    paths: Sequence[Mapping[str, Any]],
    ratios: Sequence[float],
    spec: DilocoSpec,
    devnet: Mapping[str, float],
    large: Mapping[str, float],
) -> dict[str, Any]:
    """Compute share of each worker's rounds, the fixed overhead F of a round, and the H at which
    the share would pass 83%: compute(H) = load + quantize + H * step, F = period - compute - the
    replay that gated the round; with every file replayed before its round closes the replay grows
    with H too, and the share is capped at 1 / (1 + replay / inner)."""
    period = {p["round"]: p["period"] for p in paths}
    shares: dict[str, list[float]] = {}
    for f in steady:
        if f["round"] in period:
            shares.setdefault(f["worker"], []).append((f["inner"] + f["quantize"]) / period[f["round"]])
    inner = statistics.median(f["inner"] for f in steady) if steady else 0.0
    quantize = statistics.median(f["quantize"] for f in steady) if steady else 0.0
    gate = statistics.median(p["replay"] or 0.0 for p in paths) if paths else 0.0
    typical = statistics.median(period.values()) if period else 0.0
    fixed = max(0.0, typical - inner - quantize - gate)
    step = max(0.0, inner - devnet["load_seconds"]) / spec.inner.steps
    fixed_compute = devnet["load_seconds"] + quantize
    rho = statistics.median(ratios) if ratios else None
    all_shares = [s for values in shares.values() for s in values]
    return common | {
        "figure": "worker_utilization",
        "value": round(statistics.fmean(all_shares), 4) if all_shares else None,
        "per_worker": {w: round(statistics.fmean(v), 4) for w, v in sorted(shares.items())},
        "prime": list(PRIME_UTILIZATION),
        "period_median": round(typical, 3),
        "inner_median": round(inner, 3),
        "quantize_median": round(quantize, 4),
        "replay_gate_median": round(gate, 3),
        "fixed_overhead": round(fixed, 3),
        "step_seconds_market": round(step, 4),
        "h_for_83_devnet_model": horizon_for(TARGET, fixed, step, fixed_compute),
        "h_for_96_devnet_model": horizon_for(PRIME_UTILIZATION[1], fixed, step, fixed_compute),
        "step_seconds_large_model": round(large["seconds_per_step"], 4),
        "h_for_83_large_model": horizon_for(
            TARGET, fixed, large["seconds_per_step"], large["load_seconds"] + large["encode_seconds"]
        ),
        "cap_every_file_replayed": None if rho is None else round(1 / (1 + rho), 3),
    }


# --- the run --------------------------------------------------------------------------------------


def setup_row(args: argparse.Namespace) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    return {
        "figure": "setup",
        "date": datetime.date.today().isoformat(),
        "commit": commit.stdout.strip() or None,
        "machine": f"{platform.machine()} {os.cpu_count()} cores",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "rounds": args.rounds,
        "cheat": args.cheat,
        "quick": args.quick,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="closed rounds of the market run (default 8)")
    parser.add_argument(
        "--cheat",
        default=TrainCheat.SCALED.value,
        choices=[*(c.value for c in TrainCheat), "none"],
        help="the last worker's --train-cheat, or none (default scaled)",
    )
    parser.add_argument("--large-steps", type=int, default=2, help="inner steps of the larger model (default 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds, 1 step of the larger model")
    args = parser.parse_args()
    if args.rounds < 2 or args.large_steps < 1:
        parser.error("--rounds must be 2 or more (round 0 is not steady) and --large-steps 1 or more")
    if args.quick:
        args.rounds, args.large_steps = min(args.rounds, 2), 1
    started = time.monotonic()
    torch.set_num_threads(1)
    out = Path(tempfile.mkdtemp(prefix="proofpool-bench-diloco-"))
    config = DilocoConfig(
        out_dir=out / "run",
        rounds=args.rounds,
        cheat=None if args.cheat == "none" else args.cheat,
        database=DATABASE,
        redis_db=REDIS_DB,
        baselines=False,
    )
    rows = [setup_row(args)]
    pool = build_devnet_pool(config.cache_root())
    spec = pool.devnet_spec(deadline_seconds=config.deadline_seconds)
    tokens = pool.tokens()
    node = sim_nodes(1)[0]
    devnet_rows, devnet = measure_model("devnet", pool.model_dir, spec, tokens, node, spec.inner.steps)
    with tempfile.TemporaryDirectory(prefix="proofpool-bench-diloco-large-") as scratch:  # 135 MB of weights
        large_rows, large = measure_model(
            "hidden512-8layers", large_model_dir(pool, Path(scratch)), spec, tokens, node, args.large_steps
        )
    rows += devnet_rows + large_rows
    console = Console(stderr=True, width=140)
    market_started = time.monotonic()
    outcome = run_diloco_devnet(config, console)
    market_seconds = time.monotonic() - market_started
    rows += market_rows(config, spec, devnet, large)
    rows.append(
        {
            "figure": "run",
            "market_ok": outcome.ok,
            "problems": outcome.problems,
            "market_seconds": round(market_seconds, 1),
            "seconds": round(time.monotonic() - started, 1),
            "logs": str(config.out_dir),
        }
    )
    emit("diloco", rows)


if __name__ == "__main__":
    main()
