"""Validator figures on the devnet: throughput against a worker's, latency, gas per accepted file.

1. The market runs for real (anvil, PostgreSQL `proofpool_bench_validator_<random>`, Redis db 8,
   SeaweedFS, the indexer dispatching tasks, the backend), with `proofpool validator run` (one
   slot) and `proofpool worker run --max-batches N` as processes. The bench watches the chain
   and the `validations` table at 20 Hz and reports, per submission, the time from the moment
   its `WorkSubmitted` was seen to the recorded decision and to the on-chain verdict (p50/p99;
   targets: decision p50 <= 5 s, on-chain verdict p50 <= 10 s), and the gas of `attestWork` per
   accepted key (plus `submitWork`, for the total per accepted submission).
2. Throughput, in this process on the same model and files: the worker's bare generation of the
   files' requests (vLLM) against `run_checks` at sample rates 1, 1/4 and 1/32 of rows (PyTorch
   prefill + TOPLOC + sampling check), and against the service's own sampling (`--sample-rate p`
   of submissions recomputed in full, cheap checks on all) at p = 1/8, 1/16, 1/32. Target:
   validated tokens/s >= 20x generated tokens/s.

Prints JSON lines and writes `bench/results/validator.jsonl`.
Run: `.venv/bin/python -m bench.validator [--batches 12]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import psycopg
from proofpool.devnet.stack import DevnetStack
from proofpool.validator.checks import PoolRules, SubmissionFacts, run_checks
from proofpool.validator.checks.decode import start_forkserver
from proofpool.validator.pipeline import drawn
from proofpool.worker.engine import GenerationRequest, InferenceEngine
from proofpool.worker.sampler import SamplerSettings
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.cache import ensure_devnet_model

from bench.market import bench_market, emit
from proofpool.core.rollout import read_rollouts
from proofpool.inference.model import load_model
from proofpool.infra.chain.bindings import WorkStatus
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore, rollout_key

REDIS_DB = 8
TARGET_RATIO = 20.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def watch(stack: DevnetStack, node: str, batches: int, timeout: float) -> dict[bytes, dict[str, float]]:
    """First-seen wall times of each submission, its decision and its on-chain verdict."""
    client = stack.admin
    seen: dict[bytes, dict[str, float]] = {}
    start_block = client.book.deploy_block
    deadline = time.monotonic() + timeout
    with psycopg.connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        while time.monotonic() < deadline:
            now = time.time()
            logs = client.w3.eth.get_logs({"fromBlock": start_block, "address": client.pool.address})
            for event in client.decoder().decode_logs(logs):
                if event.name == "WorkSubmitted" and event.args["node"] == node:
                    seen.setdefault(event.args["workKey"], {"submitted": now})
            for key, times in seen.items():
                if "decided" not in times:
                    row = conn.execute(
                        "SELECT extract(epoch FROM decided_at) FROM validations"
                        " WHERE work_key = %s AND decided_at IS NOT NULL",
                        (key,),
                    ).fetchone()
                    if row:
                        times["decided"] = float(row[0])
                if "verdict" not in times and client.pool.get_work(stack.pool_id, key).status is not WorkStatus.PENDING:
                    times["verdict"] = now
            if len(seen) >= batches and all("verdict" in t for t in seen.values()):
                return seen
            time.sleep(0.05)
    raise TimeoutError(f"only {sum('verdict' in t for t in seen.values())} of {batches} verdicts in {timeout} s")


def gas_figures(stack: DevnetStack, node: str) -> dict[str, float]:
    client = stack.admin
    logs = client.w3.eth.get_logs({"fromBlock": client.book.deploy_block, "address": client.pool.address})
    attest_txs: dict[bytes, int] = {}
    submit_gas = []
    for event in client.decoder().decode_logs(logs):
        tx = bytes(event.tx_hash)
        if event.name == "WorkAttested":
            attest_txs[tx] = attest_txs.get(tx, 0) + 1
        elif event.name == "WorkSubmitted" and event.args["node"] == node:
            submit_gas.append(client.w3.eth.get_transaction_receipt(tx)["gasUsed"])
    attest_gas = sum(client.w3.eth.get_transaction_receipt(tx)["gasUsed"] for tx in attest_txs)
    keys = sum(attest_txs.values())
    return {
        "attest_txs": len(attest_txs),
        "accepted_keys": keys,
        "attest_gas_per_key": attest_gas / keys if keys else float("nan"),
        "submit_gas": statistics.mean(submit_gas) if submit_gas else float("nan"),
    }


def throughput(files: list[tuple[bytes, bytes]], pool_id: int, node: str) -> list[dict]:
    """Bare generation tokens/s of the files' requests vs run_checks tokens/s at several rates."""
    path = ensure_devnet_model(progress=None)
    samples = [read_rollouts(data)[1] for _, data in files]
    tokens = sum(len(r.completion_tokens) for rows in samples for r in rows)
    with InferenceEngine(path) as engine:
        plans = [
            [
                GenerationRequest(
                    r.prompt_tokens, SamplerSettings(r.sampling_seed, i, r.temperature), 8, ENVIRONMENT.tokens.stop_ids
                )
                for i, r in enumerate(rows)
            ]
            for rows in samples
        ]  # row i was sampled with sample index i, as the worker asked vLLM
        engine.generate(plans[0])  # warm-up
        started = time.perf_counter()
        for plan in plans:
            engine.generate(plan)
        generation = time.perf_counter() - started
    gen_tps = tokens / generation
    rows_out = [
        {"bench": "validator", "figure": "worker_generation_tokens_per_s", "value": round(gen_tps, 1), "tokens": tokens}
    ]
    start_forkserver()  # as the validate worker does when ready: not a cost of the first file
    for precision in ("bf16", "fp32"):
        model = load_model(path, precision)
        for rate in (1.0, 0.25, 1 / 32):
            checked, started = 0, time.perf_counter()
            for (key, data), rows in zip(files, samples, strict=True):
                facts = SubmissionFacts(pool_id, key, node, sum(len(r.completion_tokens) for r in rows), 0)
                verdict = run_checks(
                    data,
                    facts,
                    PoolRules.of(ENVIRONMENT, latest_version=0),
                    lambda _v, m=model: m,
                    sample_rate=rate,
                    selection_seed=key,
                )
                assert verdict.accepted, verdict
                checked += sum(len(r.completion_tokens) for r in rows)
            seconds = time.perf_counter() - started
            ratio = (checked / seconds) / gen_tps
            rows_out.append(
                {
                    "bench": "validator",
                    "figure": "validated_tokens_per_s",
                    "precision": precision,
                    "row_sample_rate": rate,
                    "value": round(checked / seconds, 1),
                    "ratio_to_generation": round(ratio, 2),
                    "target_ratio": TARGET_RATIO,
                    "met": ratio >= TARGET_RATIO,
                }
            )
    rows_out += service_sampling(files, samples, pool_id, node, load_model(path, "bf16"), gen_tps)
    return rows_out


SERVICE_RATES = (1 / 8, 1 / 16, 1 / 32)
SERVICE_ROUNDS = 32
"""Passes over the files per rate, each with its own draw, so a small rate still recomputes some."""


def service_sampling(
    files: list[tuple[bytes, bytes]], samples: list, pool_id: int, node: str, model, gen_tps: float
) -> list[dict]:
    """What `validator run --sample-rate p` does: every file gets the cheap checks, a drawn fraction p
    of the files is recomputed in full, drawn as the service draws (`proofpool.validator.pipeline.drawn`), with the
    round number instead of the submission's block hash."""
    out = []
    for rate in SERVICE_RATES:
        checked = recomputed = judged = 0
        started = time.perf_counter()
        for round_ in range(SERVICE_ROUNDS):
            for (key, data), rows in zip(files, samples, strict=True):
                selected = drawn(rate, round_.to_bytes(4, "big"), key)
                units = sum(len(r.completion_tokens) for r in rows)
                verdict = run_checks(
                    data,
                    SubmissionFacts(pool_id, key, node, units, 0),
                    PoolRules.of(ENVIRONMENT, latest_version=0),
                    lambda _v, m=model: m,
                    sample_rate=1.0 if selected else 0.0,
                )
                assert verdict.accepted, verdict
                checked, recomputed, judged = checked + units, recomputed + selected, judged + 1
        seconds = time.perf_counter() - started
        ratio = (checked / seconds) / gen_tps
        out.append(
            {
                "bench": "validator",
                "figure": "validated_tokens_per_s",
                "precision": "bf16",
                "submission_sample_rate": round(rate, 5),
                "recomputed_files": f"{recomputed}/{judged}",
                "value": round(checked / seconds, 1),
                "ratio_to_generation": round(ratio, 2),
                "target_ratio": TARGET_RATIO,
                "met": ratio >= TARGET_RATIO,
                "detection_per_forged_file": round(rate, 5),
                "note": "validator run --sample-rate p: cheap checks on every file, full recompute of a drawn p",
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12, help="Files the worker submits.")
    args = parser.parse_args()
    with bench_market("validator", REDIS_DB, dispatch=True) as market:
        stack, node = market.stack, market.stack.cast.alice_node
        validator = stack.spawn(
            "validator", ["validator", "run", "--key", stack.cast.validator.key.hex(), "--metrics-port", "0"]
        )
        worker_args = ["--pool", str(stack.pool_id), "--max-batches", str(args.batches), "--idle-interval", "0.5"]
        worker = stack.spawn(
            "worker",
            ["worker", "run", *worker_args, "--state-dir", str(market.root / "worker")],
            {"PROOFPOOL_NODE_KEY": node.key.hex()},
        )
        times = watch(stack, node.address, args.batches, timeout=900)
        worker.process.wait(timeout=60)
        assert validator.alive, validator.log_tail()
        rows = [
            latency_row("submission_to_decision_s", [t["decided"] - t["submitted"] for t in times.values()], 5.0),
            latency_row(
                "submission_to_onchain_verdict_s", [t["verdict"] - t["submitted"] for t in times.values()], 10.0
            ),
        ]
        gas = gas_figures(stack, node.address)
        total = round(gas["submit_gas"] + gas["attest_gas_per_key"])
        rows.append({"bench": "validator", "figure": "gas_per_accepted_submission", **gas, "total_per_accepted": total})
        store = ObjectStore.from_settings(market.s3.settings(get_settings()))
        files = [(key, store.get_object(rollout_key(stack.pool_id, node.address, key.hex()))) for key in times]
    rows += throughput(files, stack.pool_id, node.address)
    emit("validator", rows)


def latency_row(figure: str, seconds: list[float], target_p50: float) -> dict:
    return {
        "bench": "validator",
        "figure": figure,
        "p50": round(percentile(seconds, 0.5), 3),
        "p99": round(percentile(seconds, 0.99), 3),
        "target_p50": target_p50,
        "met": percentile(seconds, 0.5) <= target_p50,
        "n": len(seconds),
    }


if __name__ == "__main__":
    # The decoding children (proofpool.validator.checks.decode) fork from a forkserver, and multiprocessing
    # re-imports the parent's main module in each one unless it is a package's `__main__`, as under
    # `python -m celery`, where the validator runs. This module imports vLLM: hidden from
    # multiprocessing, so the figures time the validator's children, not vLLM's import.
    sys.modules["__main__"].__spec__ = None
    del sys.modules["__main__"].__file__
    main()
