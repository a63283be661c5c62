"""`proofpool devnet run`: the whole market on one machine, running the RL loop for N steps.

Started here, each as its own process talking over real connections: anvil with the contracts
and a funded pool, SeaweedFS, the backend and the indexer on a fresh database, two validators
(Celery worker processes with their own keys), the trainer (the pool manager's key) and four
workers: three honest and one cheater. The run ends when the trainer has published N checkpoints;
then the workers stop, every submission gets its verdict, the dispute window is closed (anvil time
travel) and accepted work finalized, the ledger is verified against the chain, and a report says
whether the market did its job: the cheater slashed and ejected, no honest node touched.

Every process started is stopped on the way out, also on Ctrl-C or SIGTERM, and an interrupted
run exits 130 whatever phase the signal lands in (`proofpool.devnet.interrupt`).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import redis
from proofpool.devnet.adversary import CheatMode, drill_environment, other_model
from proofpool.devnet.interrupt import catch_interrupts, check_interrupted, deferred_interrupts, wait_for_interrupt
from proofpool.devnet.market import (
    DEVNET_MODEL_URI,
    NODE_COMPUTE_UNITS,
    PROVIDER_NAMES,
    PROVIDER_STAKE,
    VALIDATOR_NAMES,
    onboard_node,
    time_travel,
)
from proofpool.devnet.progress import Snapshot, live_table, read_snapshot, status_line
from proofpool.devnet.report import (
    Outcome,
    heldout_curve,
    judge_market,
    provider_table,
    reward_curve,
    validator_table,
    write_json,
)
from proofpool.devnet.services import Service, ServiceFailed, cpu_shares, stop_all, thread_environment, wait_until
from proofpool.devnet.stack import DevnetStack, start_stack
from rich.console import Console
from rich.live import Live

from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.core.spec import NO_SPEC
from proofpool.envs import resolve_base_model
from proofpool.envs.published import publish_spec, spec_uri
from proofpool.infra import db
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.chain.deploy import grant_validator
from proofpool.infra.chain.tx import TxSender
from proofpool.infra.chain.units import TOKEN
from proofpool.infra.config import get_settings
from proofpool.infra.storage import rollout_key
from proofpool.infra.storage.s3 import ObjectStore
from proofpool.infra.storage.seaweed import start_seaweed

if TYPE_CHECKING:
    from eth_account.signers.local import LocalAccount

    from proofpool.core.spec import PoolSpec

POOL_BUDGET = 5_000 * TOKEN
"""Enough for a long demo: about 3 POOL per accepted file (work units plus the validator's fee)."""
FINALIZE_BATCH = 100


@dataclass(frozen=True)
class ModelPool:
    """A devnet pool that runs a task environment on a Hugging Face model (`--model DIR --env ENV`):
    created as a `spec://<sha256>` pool, exactly as `proofpool pool create --spec` does."""

    model_dir: Path
    env_id: str
    env_config: Mapping[str, Any] = field(default_factory=dict)
    batch_size: int = 4
    """Problems per assignment."""
    group_size: int = 4
    """Completions per problem (the GRPO group)."""
    max_prompt_tokens: int = 512
    max_tokens: int = 128
    """Completion budget of every sample."""
    temperature: float = 1.0

    def build_spec(self) -> PoolSpec:
        """The pool's spec, built (and its golden vectors scored) on this machine."""
        from proofpool.envs.spec import build_spec

        return build_spec(
            self.env_id,
            dict(self.env_config),
            self.model_dir,
            batch_size=self.batch_size,
            group_size=self.group_size,
            max_prompt_tokens=self.max_prompt_tokens,
            max_tokens=self.max_tokens,
            temperature=self.temperature,
        )


WORKER_NICE = 10
"""Niceness of the devnet's workers and trainer, their sessions' included (`nice_session`). On one
machine they stand in for the providers' and the pool creator's own machines; at the validators'
priority their generation and training take the validators' cores whenever a file waits to be
judged, and a provider waits that long for its verdict (bench/e2e.py: a validation waited 330 ms
for a core per 60 ms of work, submission to verdict p50 23 s). Niced, they use every cycle the
validators leave idle (p50 1 s)."""


VALIDATOR_CONCURRENCY = 1
"""Validation slots (threads) per devnet validator. Two were measured and judged no more files: a devnet
file's checks are mostly Python (claims, store, chain reads, evidence) and the slots share one
interpreter, so each file took longer (bench/e2e.py: `checks` p50 0.18 s -> 0.31 s, `queue` longer).
More validators are more processes (docs/validator-scaling.md)."""


@dataclass(frozen=True)
class DevnetConfig:
    """What `proofpool devnet run` runs."""

    out_dir: Path
    steps: int = 10
    cheat: str | None = "other-model"
    """The fourth worker's cheat (`proofpool worker run --cheat`); None: four honest workers."""
    samples_per_step: int = 256
    database: str = "proofpool_devnet"
    redis_db: int = 14
    step_timeout: float = 900.0
    """Seconds the trainer waits for one step's accepted rollouts before the run fails."""
    verdict_timeout: float = 300.0
    """Seconds, after the workers stop, for every submission to get its verdict."""
    refresh: float = 2.0
    model_pool: ModelPool | None = None
    """None: the arithmetic pool on the devnet's tiny Llama (`DEVNET_MODEL_URI`)."""
    heldout_problems: int = 64
    """Held-out problems the trainer evaluates each checkpoint on (0: none)."""
    workers: int = 4
    """Providers that run a node (alice, bob, carol, dave, in that order); the last one cheats."""
    validators: int = 2
    """Validator processes (validator, validator2)."""
    nice: int = WORKER_NICE
    """Niceness of the workers and the trainer (`WORKER_NICE`); 0 runs them at the validators' priority."""
    validator_concurrency: int = VALIDATOR_CONCURRENCY
    """Validation slots (threads) per validator process (`VALIDATOR_CONCURRENCY`)."""
    validator_env: Mapping[str, str] = field(default_factory=dict)
    """Settings added to the validators' environment (e.g. `PROOFPOOL_VERDICT_MAX_WAIT`)."""
    serve: bool = False
    """After the report, keep the backend (and its explorer), the indexer, anvil and the object store
    up until Ctrl-C, so the finished market can be browsed."""
    worker_env: Mapping[str, str] = field(default_factory=dict)
    """Settings added to the workers' environment (e.g. `PROOFPOOL_WORKER_RELOAD_IN_PLACE`)."""

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= len(PROVIDER_NAMES):
            raise ValueError(f"workers must be 1 to {len(PROVIDER_NAMES)}, not {self.workers}")
        if not 1 <= self.validators <= len(VALIDATOR_NAMES):
            raise ValueError(f"validators must be 1 to {len(VALIDATOR_NAMES)}, not {self.validators}")
        if self.cheat and self.workers < 2:
            raise ValueError("a cheater needs an honest node beside it: 2 workers or more, or no cheat")


@dataclass
class DevnetRun:
    """The running market and the processes of the loop."""

    config: DevnetConfig
    stack: DevnetStack
    workers: dict[str, Service] = field(default_factory=dict)
    """Provider name -> its node's worker."""
    validators: dict[str, Service] = field(default_factory=dict)
    trainer: Service | None = None
    cheater: str | None = None
    """Name of the provider whose node cheats."""
    metrics_ports: dict[str, int] = field(default_factory=dict)

    @property
    def processes(self) -> list[Service]:
        return [*self.workers.values(), *self.validators.values(), *([self.trainer] if self.trainer else [])]

    def service(self, name: str) -> Service:
        """A running service by its name (indexer, backend, validator, worker-alice, ...)."""
        return next(s for s in self.stack.services if s.name == name)

    def restart(self, name: str) -> Service:
        """Start service `name` again (after a stop or a SIGKILL), with the same command."""
        old = self.service(name)
        new = self.stack.restart(old)
        for group in (self.workers, self.validators):
            for key, value in group.items():
                if value is old:
                    group[key] = new
        if self.trainer is old:
            self.trainer = new
        return new


Say = Callable[[str], None]
Show = Callable[[DevnetRun, Snapshot], None]


def check_services() -> None:
    """PostgreSQL and Redis must answer; say how to start them if not."""
    settings = get_settings()
    db.connect_maintenance(settings.database_url).close()  # its error says how to start PostgreSQL
    client = redis.Redis.from_url(settings.redis_url, socket_connect_timeout=3)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        raise ServiceUnavailable(
            f"Redis is not reachable at {settings.redis_url} ({exc}).\nThe devnet needs Redis: start it "
            "(e.g. `sudo service redis-server start`, `redis-server --daemonize yes`) or set REDIS_URL."
        ) from exc
    finally:
        client.close()


Publish = Callable[[ObjectStore], str]
"""Puts a pool's model and spec into the object store before the pool exists; returns its model URI."""


@contextmanager
def market(
    config: DevnetConfig, say: Say, spec: PoolSpec | None = None, publish: Publish | None = None
) -> Iterator[tuple[DevnetStack, ObjectStore]]:
    """A fresh database, a flushed Redis db, SeaweedFS and the stack (anvil, indexer, backend).

    With `spec`, the base model and the spec are published to the object store and the pool is
    created as a `spec://<sha256>` pool; with `publish` (a training pool), the pool is created with
    the model URI it returns; else it is the arithmetic devnet pool."""
    settings = get_settings()
    root = config.out_dir
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    url = db.with_database(settings.database_url, config.database)
    db.drop_database(url)
    db.ensure_database(url)
    say(f"database {config.database}: created, migrating")
    db.upgrade(url)
    redis_url = settings.redis_url.rsplit("/", 1)[0] + f"/{config.redis_db}"
    redis.Redis.from_url(redis_url).flushdb()
    say("starting SeaweedFS (S3 on loopback)")
    with contextlib.ExitStack() as cleanup:
        # Started and its stop registered as one step: a Ctrl-C in between would leave `weed` running.
        with deferred_interrupts():
            s3 = start_seaweed(root / "s3", access_key="devnet", secret_key="devnet-secret", bucket="proofpool")
            cleanup.callback(_stop_deferred, s3.stop)
        store = ObjectStore.from_settings(s3.settings(settings))
        model_uri = DEVNET_MODEL_URI
        if spec is not None and config.model_pool is not None:
            say(f"publishing the base model ({config.model_pool.model_dir}) and the pool spec to the object store")
            stored = publish_spec(store, spec, config.model_pool.model_dir)
            model_uri = spec_uri(stored.sha256())
            say(f"pool spec {stored.sha256()}: {spec.environment.id} on {spec.model.architecture}")
        elif publish is not None:
            model_uri = publish(store)
        with deferred_interrupts():  # the same for the stack (its start takes seconds, each step timed)
            stack = start_stack(
                root / "stack",
                database_url=url,
                redis_url=redis_url,
                s3_env=s3.env(),
                extra_env={"PROOFPOOL_STATE_DIR": str(root / "state")},
                dispatch=True,
                budget=POOL_BUDGET,
                model_uri=model_uri,
                say=say,
            )
            cleanup.callback(stack.close)
        yield stack, store


def _stop_deferred(stop: Callable[[], None]) -> None:
    with deferred_interrupts():
        stop()


def start_loop(config: DevnetConfig, stack: DevnetStack, say: Say) -> DevnetRun:
    """Onboard the providers, start the validators, the trainer and the workers."""
    run = DevnetRun(config, stack)
    root, pool = config.out_dir, stack.pool_id
    providers = stack.cast.providers()[: config.workers]
    shares = compute_shares(config, "trainer")
    start_validators(run, shares, say, config.validator_env)
    run.trainer = stack.spawn(
        "trainer",
        [
            *("trainer", "run", "--pool", str(pool), "--steps", str(config.steps)),
            *("--samples-per-step", str(config.samples_per_step), "--wait-timeout", str(config.step_timeout)),
            *("--heldout-problems", str(config.heldout_problems)),
            *("--state-dir", str(root / "trainer"), "--out-dir", str(root)),
        ],
        {
            "PROOFPOOL_PRIVATE_KEY": stack.cast.manager.key.hex(),
            "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(root / "cache" / "trainer"),
        }
        | thread_environment(shares["trainer"]),
        nice=config.nice,
    )
    say(f"trainer started: {config.steps} steps of >= {config.samples_per_step} accepted samples")
    run.cheater = providers[-1][0] if config.cheat else None
    for name, provider, node in providers:
        cheat = ["--cheat", str(config.cheat)] if name == run.cheater else []
        start_worker(run, name, provider, node, shares[name], cheat)
    honest = [name for name in run.workers if name != run.cheater]
    cheating = f", {run.cheater}'s node cheats ({config.cheat})" if run.cheater else ""
    say(f"workers started: {', '.join(honest)} honest{cheating}")
    return run


def compute_shares(config: DevnetConfig, trainer: str) -> dict[str, tuple[int, ...]]:
    """The cores of the validators, the trainer (named `trainer`) and the workers (`cpu_shares`)."""
    return cpu_shares([*VALIDATOR_NAMES[: config.validators], trainer, *PROVIDER_NAMES[: config.workers]])


def start_validators(
    run: DevnetRun,
    shares: Mapping[str, tuple[int, ...]],
    say: Say,
    env: Mapping[str, str] | None = None,
    *,
    wait: bool = True,
) -> None:
    """Give the first `config.validators` validators of the cast the role and start each as
    `proofpool validator run` (a Celery worker process with its own key), with `env` added; with
    `wait`, return once each takes tasks (`validator_ready`)."""
    stack, root = run.stack, run.config.out_dir
    admin = stack.admin
    for name, validator in stack.cast.validators()[: run.config.validators]:
        if not admin.pool.has_role("VALIDATOR_ROLE", validator.address):
            grant_validator(admin.w3, TxSender(admin.w3, stack.cast.admin), admin.book, validator.address)
        port = free_port()
        run.metrics_ports[name] = port
        run.validators[name] = stack.spawn(
            name,
            [
                *("validator", "run", "--concurrency", str(run.config.validator_concurrency)),
                *("--metrics-port", str(port), "--loglevel", "WARNING"),
            ],
            {
                "PROOFPOOL_PRIVATE_KEY": validator.key.hex(),
                # A validator killed mid-task holds its claim this long before another takes over.
                "PROOFPOOL_VALIDATOR_LEASE": "60",
                "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(root / "cache" / name),
            }
            | dict(env or {})
            | thread_environment(shares[name]),
        )
    for name, service in run.validators.items() if wait else ():
        port = run.metrics_ports[name]
        wait_until(
            lambda port=port: validator_ready(port),
            timeout=VALIDATOR_READY_TIMEOUT,
            what=f"{name} ready",
            service=service,
            poll=0.5,
        )
    state = "started and warmed up" if wait else "starting"
    say(f"validators {', '.join(run.validators)} {state} (Celery worker processes)")


VALIDATOR_READY_TIMEOUT = 300.0
"""Seconds a validator may take to start and load its models (minutes on a busy machine)."""


def validator_ready(port: int) -> bool:
    """Whether the validate worker serving metrics on `port` takes tasks (`proofpool_validator_ready`).
    The devnet starts its workers only then: files submitted earlier would wait out the validators'
    start in the queue, and a queue that starts long drains only as fast as workers leave room."""
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError:
        return False
    return re.search(r"^proofpool_validator_ready 1(\.0)?$", text, re.MULTILINE) is not None


def start_worker(
    run: DevnetRun,
    name: str,
    provider: LocalAccount,
    node: LocalAccount,
    cores: Sequence[int],
    args: Sequence[str] = (),
) -> Service:
    """Stake for provider `name`, register its node, approve the pool and start `proofpool worker
    run` for the node (journal under out_dir/workers/NAME), with extra `args`."""
    stack, root = run.stack, run.config.out_dir
    admin = stack.admin
    if admin.token.balance_of(provider.address) < PROVIDER_STAKE:
        admin.token.mint(provider.address, 10_000 * TOKEN)
    onboard_node(admin, provider, node, PROVIDER_STAKE, NODE_COMPUTE_UNITS, pools=(stack.pool_id,))
    run.workers[name] = stack.spawn(
        f"worker-{name}",
        [
            *("worker", "run", "--pool", str(stack.pool_id), "--state-dir", str(root / "workers" / name)),
            *("--idle-interval", "1"),
            *args,
        ],
        {"PROOFPOOL_NODE_KEY": node.key.hex(), "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(root / "cache" / name)}
        | thread_environment(cores, vllm=True)
        | dict(run.config.worker_env),
        nice=run.config.nice,
    )
    return run.workers[name]


def follow(run: DevnetRun, show: Show, during: Show | None = None) -> Snapshot:
    """Refresh the view until the trainer finishes; a process that dies on its own ends the run.

    `during` is called after every refresh (the fault drills kill and restart services there);
    while the backend is down the view keeps its last snapshot."""
    stack = run.stack
    snapshot = read_snapshot(stack, run)
    while True:
        check_interrupted()
        if during is not None:
            during(run, snapshot)
        assert run.trainer is not None
        if not run.trainer.alive:
            code = run.trainer.process.returncode
            if code != 0:
                raise ServiceFailed(f"the trainer exited with code {code}:\n{run.trainer.log_tail()}")
            return read_snapshot(stack, run)
        check_processes(run, spared=(run.trainer,))
        show(run, snapshot)
        time.sleep(run.config.refresh)
        with contextlib.suppress(ServiceUnavailable):  # the backend restarts (a drill): keep the last view
            snapshot = read_snapshot(stack, run)


def check_processes(run: DevnetRun, spared: Collection[Service] = ()) -> None:
    """`ServiceFailed` when a process of the loop exited on its own: every one but the `spared` and
    the cheater's worker (a slashed cheater's worker gives up: that is the point)."""
    for service in run.processes:
        if service.alive or any(service is s for s in spared):
            continue
        name = service.name.removeprefix("worker-")
        if name in run.workers and name == run.cheater:
            continue
        code = service.process.returncode
        raise ServiceFailed(f"{service.name} exited ({code}) during the run:\n{service.log_tail()}")


def settle(run: DevnetRun, say: Say) -> Snapshot:
    """Stop the workers, wait for every verdict, stop the validators, close the dispute window
    and finalize the accepted work; returns the settled state."""
    stack = run.stack
    done = run.trainer.name if run.trainer is not None else "trainer"
    say(f"{done} done: stopping the workers (each finishes or journals its batch)")
    with deferred_interrupts():
        stop_all(list(run.workers.values()), timeout=40)
    deadline = time.monotonic() + run.config.verdict_timeout
    snapshot = read_snapshot(stack, run)
    while snapshot.pending:
        check_interrupted()
        if time.monotonic() > deadline:
            raise ProofpoolError(
                f"{snapshot.pending} submission(s) still without a verdict after {run.config.verdict_timeout:.0f} s"
            )
        say(f"waiting for {snapshot.pending} verdict(s)")
        time.sleep(0.5)
        snapshot = read_snapshot(stack, run)
    with deferred_interrupts():
        stop_all(list(run.validators.values()), timeout=30)
    accepted = snapshot.accepted_keys
    window = stack.admin.pool.get_pool(stack.pool_id).dispute_window
    say(f"every submission judged; closing the {window} s dispute window and finalizing {len(accepted)} submission(s)")
    time_travel(stack.admin, window + 1)
    for start in range(0, len(accepted), FINALIZE_BATCH):
        stack.admin.pool.finalize_work(stack.pool_id, accepted[start : start + FINALIZE_BATCH])
    deadline = time.monotonic() + 60
    while snapshot.accepted_keys:
        check_interrupted()
        if time.monotonic() > deadline:
            raise ProofpoolError("the indexer did not record the finalizations within 60 s")
        time.sleep(1)
        snapshot = read_snapshot(stack, run)
    return snapshot


def run_devnet(
    config: DevnetConfig, console: Console, verify: Verify | None = None, during: Show | None = None
) -> Outcome:
    """Run the whole devnet and report; the caller exits non-zero unless `outcome.ok`.

    Ctrl-C or SIGTERM at any point stops every process started and raises KeyboardInterrupt
    (exit 130), also when the signal lands where Python would drop it (see `catch_interrupts`).
    `during(run, snapshot)` is called while the loop runs (fault drills)."""
    with catch_interrupts():
        return _run_devnet(config, console, verify, during)


def _run_devnet(config: DevnetConfig, console: Console, verify: Verify | None, during: Show | None) -> Outcome:
    check_services()
    say = sayer(console)
    spec = None
    if config.model_pool is not None:
        # Every role checks its own rendering and scoring against the spec's golden vectors, so a
        # model or environment this machine cannot run fails here, before a process is started.
        pool = config.model_pool
        say(f"building the pool spec: {pool.env_id} on {pool.model_dir} (rendering and scoring golden vectors)")
        spec = pool.build_spec()
    else:
        # Built once here, before a dozen processes would each build it at the same time; the
        # cheater's model too, or its node spends the run warming it up and never submits. (A
        # model pool's cheater draws its variant itself: an initialization, seconds.)
        say(f"devnet model: {resolve_base_model(DEVNET_MODEL_URI, progress=say)}")
        if config.cheat == CheatMode.OTHER_MODEL:
            say(f"the cheater's model: {other_model(drill_environment(DEVNET_MODEL_URI, NO_SPEC), progress=say)}")
    with market(config, say, spec) as (stack, store):
        run = start_loop(config, stack, say)
        try:
            snapshot = _follow_with_view(run, console, during)
            snapshot = settle(run, say)
        finally:
            with deferred_interrupts():
                stop_all(run.processes, timeout=30)
        check_interrupted()
        ledger_problems, missing = closing_checks(stack, store, snapshot, verify, say, rollout_key)
        outcome = judge_market(snapshot, config.steps, ledger_problems, missing)
        _print_report(console, config, snapshot, outcome)
        write_json(config.out_dir / "report.json", snapshot, outcome, {"logs": str(stack.root)})
        if config.serve:
            serve_until_interrupted(stack, say)
    return outcome


def serve_until_interrupted(stack: DevnetStack, say: Callable[[str], None]) -> None:
    """Keep the finished market's services up, print where to look, and return at Ctrl-C."""
    say(
        f"the market stays up until Ctrl-C: explorer {stack.backend_url}/explorer/ , "
        f"ledger API {stack.backend_url}/v1/ledger/pools"
    )
    wait_for_interrupt()
    say("stopping the market")


Verify = Callable[[DevnetStack], list[str]]
"""Ledger verification: the differences between the chain and the database, as sentences."""


def verify_ledger_of(stack: DevnetStack) -> list[str]:
    """`proofpool ledger verify` on the devnet's database: the report's lines when it differs."""
    from proofpool.backend.indexer.ledger_diff import render_text
    from proofpool.backend.indexer.verify import verify_ledger

    diff = verify_ledger(stack.env["DATABASE_URL"], stack.anvil.url, book=stack.admin.book)
    return [] if diff.ok else render_text(diff).splitlines()[1:]


def closing_checks(
    stack: DevnetStack,
    store: ObjectStore,
    snapshot: Snapshot,
    verify: Verify | None,
    say: Say,
    key_of: Callable[[int, str, str], str],
) -> tuple[list[str] | None, list[str]]:
    """The checks after a run, for either kind of pool: the ledger rebuilt from chain events and
    diffed with PostgreSQL (`verify`, None: skipped), and the submitted files (each file of a
    bundle) not in the store under `key_of(pool, node, sha256)` (`rollout_key` or `update_key`)."""
    ledger_problems = None
    if verify is not None:
        say("verifying the ledger: rebuilding it from chain events alone and diffing it with PostgreSQL")
        ledger_problems = verify(stack)
    missing = [
        key
        for node, key in snapshot.files
        if store.head_object(key_of(stack.pool_id, node, key.removeprefix("0x"))) is None
    ]
    return ledger_problems, missing


def sayer(console: Console) -> Say:
    """Print a line with the seconds since the run started."""
    started = time.monotonic()

    def say(line: str) -> None:
        console.print(f"[dim]{time.monotonic() - started:6.1f}s[/dim] {line}")

    return say


def _follow_with_view(run: DevnetRun, console: Console, during: Show | None) -> Snapshot:
    """`follow` with a live table on a terminal, a status line every 10 s elsewhere."""
    steps = run.config.steps
    if console.is_terminal:
        with Live(console=console, refresh_per_second=1, transient=False) as live:
            return follow(run, lambda _run, snap: live.update(live_table(snap, steps)), during)
    last = [0.0]

    def show(_run: DevnetRun, snap: Snapshot) -> None:
        if time.monotonic() - last[0] >= 10:
            console.print(status_line(snap, steps), highlight=False)
            last[0] = time.monotonic()

    return follow(run, show, during)


def _print_report(console: Console, config: DevnetConfig, snapshot: Snapshot, outcome: Outcome) -> None:
    console.print()
    console.print(f"[bold]mean reward by step[/bold]: {reward_curve(snapshot)}")
    heldout = heldout_curve(snapshot)
    if heldout:
        console.print(f"[bold]held-out accuracy by version[/bold]: {heldout}")
    png = config.out_dir / "reward.png"
    if png.exists():
        console.print(f"reward, held-out accuracy and loss plot: {png}")
    console.print(provider_table(snapshot))
    console.print(validator_table(snapshot))
    if outcome.ledger_matches is not None:
        console.print(
            "ledger verify: [green]the database matches the chain[/green]"
            if outcome.ledger_matches
            else "ledger verify: [red]the database differs from the chain[/red]"
        )
    if outcome.ok:
        console.print("[green]devnet ok[/green]: the cheater was slashed and ejected, every honest node was paid")
    else:
        for problem in outcome.problems:
            console.print(f"[red]problem[/red]: {problem}")
    console.print(f"logs in {config.out_dir / 'stack'}, report in {config.out_dir / 'report.json'}")
