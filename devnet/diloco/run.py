"""`proofpool devnet run --kind diloco`: the whole market on one machine, pretraining a tiny Llama
with DiLoCo in a training pool for N rounds, every pseudo-gradient replayed, paid or slashed.

The stack is the RL devnet's (`proofpool.devnet.run`: anvil with the contracts, SeaweedFS, a fresh
database, the backend and the indexer), its pool created as `diloco://<sha256>` over the devnet's
offline pool (`proofpool.devnet.diloco.corpus`: Python standard library sources, a byte-level BPE
tokenizer, a tiny Llama) published to the object store first. Then two validators, the aggregator
(`proofpool trainer run` with the manager's key) and four workers (`proofpool worker run`): three
honest, one cheater (`--train-cheat`). A line per closed round shows who was averaged, the losses,
verdicts and slashes. After N checkpoints the aggregator and the workers stop, every submission
gets its verdict, the dispute window is time-travelled and the accepted work finalized, the ledger
verified against the chain, and every checkpoint audited from the chain and store alone (its
held-out loss, `verify-round` recomputing it bit for bit), each as soon as it was published.
Meanwhile a thread ran the same rounds without the market on the honest nodes' shards
(`proofpool.devnet.diloco.baselines`): int8 and fp32 DiLoCo, a single node and data parallel, the
baselines of the report and its loss plot.

With drills on (`proofpool.devnet.diloco.drills`) a worker is SIGKILLed, comes back two rounds
later, and the aggregator is SIGKILLed and restarted; the report says how the market took it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proofpool.devnet.diloco.baselines import BaselineThread
from proofpool.devnet.diloco.progress import closed_rounds, round_line
from proofpool.devnet.diloco.report import (
    Auditor,
    cheater_record,
    curves_of,
    judge_training,
    plot_losses,
    print_report,
    training_json,
)
from proofpool.devnet.interrupt import catch_interrupts, check_interrupted, deferred_interrupts
from proofpool.devnet.progress import read_snapshot
from proofpool.devnet.report import Outcome, judge_market, write_json
from proofpool.devnet.run import (
    DevnetConfig,
    DevnetRun,
    Say,
    Verify,
    check_processes,
    check_services,
    closing_checks,
    compute_shares,
    market,
    sayer,
    settle,
    start_validators,
    start_worker,
)
from proofpool.devnet.services import Service, ServiceFailed, stop_all, thread_environment
from proofpool.devnet.stack import DevnetStack
from rich.console import Console

from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.infra.http.ledger_client import LedgerClient
from proofpool.infra.storage import update_key
from proofpool.infra.storage.s3 import ObjectStore

if TYPE_CHECKING:
    import torch
    from proofpool.devnet.diloco.corpus import DevnetDilocoPool

    from proofpool.core.diloco.spec import DilocoSpec

AGGREGATOR = "aggregator"
"""The aggregator's service name (its log: stack/aggregator.log)."""
VALIDATOR_ENV = {"PROOFPOOL_VERDICT_MAX_WAIT": "0.5"}
"""A round waits for its files' attestations: the devnet's validators attest each at once."""
AGGREGATOR_POLL_INTERVAL = 0.25
"""Seconds between the aggregator's looks at the open round. A devnet round is a few seconds of work,
so the production default (2 s) would be most of its period."""
WORKER_IDLE_INTERVAL = 0.5
"""Seconds between a waiting worker's looks for the next checkpoint (the RL devnet's 1 s would be a
third of a round); 0.5 s keeps four workers' heartbeats a small load on the backend."""


@dataclass(frozen=True)
class DilocoConfig:
    """What `proofpool devnet run --kind diloco` runs."""

    out_dir: Path
    rounds: int = 12
    cheat: str | None = "scaled"
    """The last worker's `--train-cheat`; None: every worker honest."""
    database: str = "proofpool_devnet"
    redis_db: int = 14
    workers: int = 4
    validators: int = 2
    deadline_seconds: int = 20
    """The spec's round deadline: a round missing a member's file closes this long after it opened."""
    round_timeout: float = 300.0
    """Seconds without a new checkpoint before the run fails."""
    verdict_timeout: float = 300.0
    """Seconds, after the workers stop, for every submission to get its verdict."""
    refresh: float = 1.0
    baselines: bool = True
    """Run the simulation's baselines (int8 and fp32 DiLoCo, single node, data parallel) beside the market."""
    drills: bool = False
    """The elasticity drills: a worker SIGKILLed and back two rounds later, the aggregator SIGKILLed and restarted."""
    pool_cache: Path | None = None
    """Where the devnet pool (tokenizer, model, dataset) is built once; None: $PROOFPOOL_MODEL_CACHE or
    ~/.cache/proofpool/models, where the arithmetic pool's model is cached too."""

    def __post_init__(self) -> None:
        self.market_config()  # the RL devnet's rules on workers, validators and a cheater
        if self.drills:
            from proofpool.devnet.diloco.drills import ElasticityDrills

            ElasticityDrills.check_fits(self)

    def market_config(self) -> DevnetConfig:
        """The stack's part, in the RL devnet's terms (`market`, `settle` and the snapshot read it)."""
        return DevnetConfig(
            out_dir=self.out_dir,
            steps=self.rounds,
            cheat=self.cheat,
            database=self.database,
            redis_db=self.redis_db,
            verdict_timeout=self.verdict_timeout,
            refresh=self.refresh,
            heldout_problems=0,
            workers=self.workers,
            validators=self.validators,
        )

    @property
    def honest_workers(self) -> int:
        return self.workers - (1 if self.cheat else 0)

    def cache_root(self) -> Path:
        return (
            self.pool_cache or Path(os.environ.get("PROOFPOOL_MODEL_CACHE") or "~/.cache/proofpool/models")
        ).expanduser()


@dataclass
class Watch:
    """The market at one refresh: the latest checkpoint and the pool's submissions (ledger rows)."""

    version: int
    submissions: list[dict[str, Any]]

    def of(self, node: str, round_: int) -> list[dict[str, Any]]:
        """`node`'s submissions for model version `round_`."""
        return [s for s in self.submissions if s["node"] == node and int(s["model_version"]) == round_]

    def accepted(self, round_: int) -> int:
        return sum(1 for s in self.submissions if int(s["model_version"]) == round_ and s["status"] == "accepted")


@dataclass
class TrainingRun:
    """The running training market: the RL devnet's run (validators, workers) plus the aggregator."""

    config: DilocoConfig
    market: DevnetRun
    spec: DilocoSpec
    shares: dict[str, tuple[int, ...]] = field(default_factory=dict)
    down: list[Service] = field(default_factory=list)
    """Services a drill killed and has not restarted yet (not a failure of the run)."""
    shown: set[int] = field(default_factory=set)
    """Rounds whose line the live view printed."""

    @property
    def stack(self) -> DevnetStack:
        return self.market.stack

    def names(self) -> dict[str, str]:
        """Node address -> provider name."""
        return {node.address: name for name, _, node in self.stack.cast.providers()}

    def node_of(self, name: str) -> str:
        return next(node.address for n, _, node in self.stack.cast.providers() if n == name)

    def start_aggregator(self, rounds: int) -> Service:
        """`proofpool trainer run` on the pool for `rounds` more rounds, as the pool's manager."""
        root = self.config.out_dir
        service = self.stack.spawn(
            AGGREGATOR,
            [
                *("trainer", "run", "--pool", str(self.stack.pool_id), "--rounds", str(rounds)),
                *("--poll-interval", str(AGGREGATOR_POLL_INTERVAL), "--state-dir", str(root / "aggregator")),
            ],
            {
                "PROOFPOOL_PRIVATE_KEY": self.stack.cast.manager.key.hex(),
                "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(root / "cache" / AGGREGATOR),
            }
            | thread_environment(self.shares[AGGREGATOR]),
        )
        self.market.trainer = service
        return service


Drill = Callable[[TrainingRun, Watch], None]


def run_diloco_devnet(
    config: DilocoConfig, console: Console, verify: Verify | None = None, during: Drill | None = None
) -> Outcome:
    """Run the training market and report; the caller exits non-zero unless `outcome.ok`.

    Ctrl-C or SIGTERM stops every process started and raises KeyboardInterrupt (exit 130), as the
    RL devnet does. `during(run, watch)` is called at every refresh (extra drills)."""
    with catch_interrupts():
        return _run(config, console, verify, during)


def _run(config: DilocoConfig, console: Console, verify: Verify | None, during: Drill | None) -> Outcome:
    from proofpool.training.published import diloco_uri, publish_diloco_spec

    check_services()
    say = sayer(console)
    pool, spec, tokens = _devnet_pool(config, say)
    stored: dict[str, DilocoSpec] = {}

    def publish(store: ObjectStore) -> str:
        stored["spec"] = publish_diloco_spec(store, spec, pool.model_dir, pool.dataset_path)
        sha = stored["spec"].sha256()
        say(f"training pool spec {sha} published with checkpoint 0 and the dataset")
        return diloco_uri(sha)

    drills = None
    if config.drills:
        from proofpool.devnet.diloco.drills import ElasticityDrills

        drills = ElasticityDrills.for_spec(spec, say)
    with market(config.market_config(), say, publish=publish) as (stack, store):
        run = start_training(config, stack, stored["spec"], say)
        auditor = Auditor(stack, store, run.spec, tokens, config.out_dir / "cache" / "audit")
        hooks: list[Drill] = [d for d in (drills, during) if d is not None]
        hooks.append(lambda _run, watch: auditor.step(watch.version))
        baselines = None
        if config.baselines:
            honest = [run.node_of(name) for name in run.market.workers if name != run.market.cheater]
            baselines = BaselineThread(pool.model_dir, run.spec, tokens, honest, stack.pool_id, config.rounds, say)
            hooks.append(baselines)
        try:
            follow_rounds(run, say, hooks)
            with deferred_interrupts():
                assert run.market.trainer is not None
                run.market.trainer.stop(timeout=30)
            show_rounds(run, say)  # the last round's line, written after its checkpoint went on-chain
            snapshot = settle(run.market, say)
        finally:
            with deferred_interrupts():
                stop_all(run.market.processes, timeout=30)
        check_interrupted()
        ledger_problems, missing = closing_checks(stack, store, snapshot, verify, say, update_key)
        audits = auditor.upto(snapshot.version)
        say(f"checkpoints 0..{snapshot.version} audited: fetched through the chain, scored, recomputed (verify-round)")
        cheater = cheater_record(stack, run.node_of(run.market.cheater)) if run.market.cheater else None
        simulated = baselines.result(say) if baselines is not None else None
    results = drills.results(run, audits) if drills is not None else []
    market_outcome = judge_market(snapshot, 0, ledger_problems, missing)
    outcome = judge_training(market_outcome, config.rounds, audits, simulated, cheater, results)
    plot = plot_losses(config.out_dir, curves_of(audits, simulated), f"training pool devnet: {config.rounds} rounds")
    print_report(console, config, snapshot, outcome, audits, simulated, results, plot)
    extra = training_json(audits, simulated, results, cheater, run.names(), plot) | {"logs": str(stack.root)}
    write_json(config.out_dir / "report.json", snapshot, outcome, extra)
    return outcome


def _devnet_pool(config: DilocoConfig, say: Say) -> tuple[DevnetDilocoPool, DilocoSpec, torch.Tensor]:
    """The devnet's offline pool (built once, cached), its spec with the run's deadline, its tokens."""
    from proofpool.devnet.diloco.corpus import build_devnet_pool

    say(f"devnet training pool (tokenizer, tiny Llama, dataset): built once under {config.cache_root()}")
    pool = build_devnet_pool(config.cache_root())
    spec = pool.devnet_spec(deadline_seconds=config.deadline_seconds)
    data = spec.dataset
    say(
        f"pool model {pool.model_dir}; dataset {data.name}: {data.sequences} rows of {data.seq_len} tokens, "
        f"{data.eval_sequences} held out; H={spec.inner.steps} inner steps of {spec.inner.batch_size} rows, "
        f"codec {spec.codec.name}, round deadline {spec.round.deadline_seconds} s"
    )
    return pool, spec, pool.tokens()


def start_training(config: DilocoConfig, stack: DevnetStack, spec: DilocoSpec, say: Say) -> TrainingRun:
    """Start the validators, the aggregator and the workers (the last one cheating, if set)."""
    market_config = config.market_config()
    run = TrainingRun(config, DevnetRun(market_config, stack), spec, compute_shares(market_config, AGGREGATOR))
    # Not waited for: a training file waits for its replay anyway, and the aggregator and workers start meanwhile.
    start_validators(run.market, run.shares, say, VALIDATOR_ENV, wait=False)
    run.start_aggregator(config.rounds)
    say(f"aggregator started: {config.rounds} rounds, deadline {spec.round.deadline_seconds} s")
    providers = stack.cast.providers()[: config.workers]
    run.market.cheater = providers[-1][0] if config.cheat else None
    for name, provider, node in providers:
        cheat = ["--train-cheat", str(config.cheat)] if name == run.market.cheater else []
        # Given after start_worker's own --idle-interval: the last value of an option wins.
        idle = ["--idle-interval", str(WORKER_IDLE_INTERVAL)]
        start_worker(run.market, name, provider, node, run.shares[name], [*idle, *cheat])
    honest = [name for name in run.market.workers if name != run.market.cheater]
    cheating = f", {run.market.cheater}'s node cheats ({config.cheat})" if run.market.cheater else ""
    say(f"workers started: {', '.join(honest)} honest{cheating}")
    return run


def follow_rounds(run: TrainingRun, say: Say, drills: list[Drill]) -> None:
    """Print a line per closed round until checkpoint N is on-chain; a process that dies on its own
    (but the cheater's worker and what a drill killed) or a market stuck for `round_timeout` ends the run."""
    config, stack = run.config, run.stack
    version, changed = -1, time.monotonic()
    while True:
        check_interrupted()
        try:
            watch = read_watch(stack)
        except ServiceUnavailable:  # the backend restarts (a drill): look again
            time.sleep(config.refresh)
            continue
        if watch.version != version:
            version, changed = watch.version, time.monotonic()
        show_rounds(run, say)
        if version >= config.rounds:
            return
        for drill in drills:
            drill(run, watch)
        aggregator = run.market.trainer
        assert aggregator is not None
        if not aggregator.alive and not any(aggregator is s for s in run.down):
            if read_watch(stack).version >= config.rounds:  # it published the last one since we looked
                continue
            raise ServiceFailed(
                f"the aggregator exited ({aggregator.process.returncode}) at checkpoint {version} of "
                f"{config.rounds}:\n{aggregator.log_tail()}"
            )
        check_processes(run.market, spared=[*run.down, aggregator])
        if time.monotonic() - changed > config.round_timeout:
            raise ProofpoolError(
                f"no new checkpoint for {config.round_timeout:.0f} s (latest {version}); the aggregator says:\n"
                f"{aggregator.log_tail()}"
            )
        time.sleep(config.refresh)


def read_watch(stack: DevnetStack) -> Watch:
    """The latest checkpoint version (chain) and the pool's submissions (ledger API)."""
    latest = stack.admin.pool.latest_checkpoint(stack.pool_id)
    with LedgerClient(stack.backend_url) as ledger:
        submissions = ledger.items("submissions", {"pool_id": stack.pool_id})
    return Watch(latest.version if latest.published_at else 0, submissions)


def show_rounds(run: TrainingRun, say: Say) -> None:
    """Print the line of every round the aggregator closed since the last call."""
    from proofpool.trainer.aggregate import read_rounds

    rows = closed_rounds(read_rounds(run.config.out_dir / "aggregator"))
    new = [row for r, row in sorted(rows.items()) if r not in run.shown]
    if not new:
        return
    with contextlib.suppress(ServiceUnavailable):
        snapshot = read_snapshot(run.stack, run.market)
        for row in new:
            say(round_line(row, run.config.rounds, snapshot, run.names()))
            run.shown.add(row.round)
