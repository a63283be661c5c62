"""The trainer in the running market: training samples/s and the share of step time spent waiting.

The whole loop runs (anvil, PostgreSQL, Redis db 7, SeaweedFS, indexer, backend, one worker with
vLLM, one validator, and `proofpool trainer run`), all on this machine. Each trainer step gathers
`--samples-per-step` rows of accepted files, trains, publishes a checkpoint the worker then loads.
From the trainer's metrics.csv: samples trained per second of training, and wait / (wait + train +
publish) per step. On one 2-core machine the worker, validator and trainer share the CPU, so the
wait share mostly says how fast one CPU worker feeds the trainer.

Prints JSON lines and writes `bench/results/trainer.jsonl`.
Run: `.venv/bin/python -m bench.trainer [--steps 3] [--samples-per-step 128]`.
"""

from __future__ import annotations

import argparse
import statistics

from proofpool.trainer.metrics import read_csv

from bench.market import bench_market, emit

REDIS_DB = 7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--samples-per-step", type=int, default=128)
    args = parser.parse_args()
    with bench_market("trainer", REDIS_DB, dispatch=True) as market:
        stack, cast = market.stack, market.stack.cast
        stack.spawn("validator", ["validator", "run", "--key", cast.validator.key.hex(), "--metrics-port", "0"])
        stack.spawn(
            "worker",
            [
                "worker",
                "run",
                "--pool",
                str(stack.pool_id),
                "--idle-interval",
                "0.5",
                "--state-dir",
                str(market.root / "worker"),
            ],
            {"PROOFPOOL_NODE_KEY": cast.alice_node.key.hex()},
        )
        state = market.root / "trainer"
        trainer = stack.spawn(
            "trainer",
            [
                "trainer",
                "run",
                "--pool",
                str(stack.pool_id),
                "--key",
                cast.manager.key.hex(),
                "--steps",
                str(args.steps),
                "--samples-per-step",
                str(args.samples_per_step),
                "--state-dir",
                str(state),
                "--wait-timeout",
                "600",
                "--shard-mb",
                "5",
            ],
        )
        trainer.process.wait(timeout=1800)
        assert trainer.process.returncode == 0, trainer.log_tail()
        rows = read_csv(state / "metrics.csv")
    waits = [float(r["wait_seconds"]) for r in rows]
    totals = [float(r["wait_seconds"]) + float(r["train_seconds"]) + float(r["publish_seconds"]) for r in rows]
    samples = sum(int(float(r["samples"])) for r in rows)
    train = sum(float(r["train_seconds"]) for r in rows)
    emit(
        "trainer",
        [
            {
                "bench": "trainer",
                "figure": "training_samples_per_s",
                "value": round(samples / train, 1),
                "steps": len(rows),
                "samples": samples,
            },
            {
                "bench": "trainer",
                "figure": "wait_share_of_step_time",
                "value": round(sum(waits) / sum(totals), 3),
                "mean_wait_s": round(statistics.mean(waits), 2),
                "mean_step_s": round(statistics.mean(totals), 2),
                "steps": len(rows),
            },
            {"bench": "trainer", "figure": "mean_reward_by_step", "values": [float(r["mean_reward"]) for r in rows]},
        ],
    )


if __name__ == "__main__":
    main()
