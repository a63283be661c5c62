"""`proofpool trainer run`: GRPO steps on accepted rollouts, each published as the next checkpoint.

Step n starts from checkpoint version n (the pool's base model for n = 0), gathers at least
`samples_per_step` rows from accepted files of versions >= n - k, takes one GRPO step
(`proofpool.trainer.step.grpo_step`), and publishes the result as version n + 1: sharded safetensors and a
manifest in the store, the manifest's sha256 on-chain (`proofpool.infra.checkpoint.publish_checkpoint`),
so heartbeats hand it to workers and validators load it; the checkpoint carries the step's
figures (`proofpool-metrics.json`, `proofpool.trainer.metrics.checkpoint_figures`), which the
ledger serves per version. The last k + 1 versions stay in the store; older ones are deleted
(their manifest and figures stay, in the metrics record). After each publication the state
(weights, optimizer, step, files used) is saved, so a restarted trainer continues where it
stopped. Then the published version is
measured on the pool's held-out problems (`proofpool.trainer.heldout`; the base model too, before
the first step of a fresh run), and the step's row goes to `metrics.csv` and `reward.png`.

Under `torchrun` (`torch.distributed`, FSDP) rank 0 runs `run_trainer` and every other rank
`follow_trainer`: rank 0 alone reads the chain, the ledger and the store, broadcasts each step's
rows, and publishes; all ranks take the step together (`proofpool.trainer.policy`). The held-out
evaluation runs on rank 0 alone, on the published weights it keeps (no collective), while the
other ranks wait for its next command.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from proofpool.trainer.behavior import BehaviorPolicies
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.data import RolloutSource, gather
from proofpool.trainer.heldout import HeldOut, HeldOutScore
from proofpool.trainer.metrics import append_csv, checkpoint_figures, plot, read_csv
from proofpool.trainer.policy import Policy
from proofpool.trainer.screen import ModelLimits, PoisonList
from proofpool.trainer.state import TrainerState, load_state, save_state
from proofpool.trainer.world import SINGLE, World, broadcast
from pydantic import BaseModel, ConfigDict, Field

from proofpool.core.environment import Environment
from proofpool.core.errors import ProofpoolError
from proofpool.envs import UnknownEnvironment, pool_assignment, pool_environment, resolve_base_model
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.checkpoint import (
    DEFAULT_SHARD_SIZE,
    ensure_published_checkpoint,
    onchain_manifest_sha256,
    prune_checkpoints,
    publish_checkpoint,
)
from proofpool.infra.config import get_settings
from proofpool.infra.http.ledger_client import LedgerClient
from proofpool.infra.storage.s3 import ObjectStore

log = logging.getLogger(__name__)


class TrainerConfig(BaseModel):
    """How one trainer serves one pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pool_id: int = Field(ge=1)
    steps: int = Field(20, ge=1)
    """Steps to run in this invocation (the step counter itself continues across restarts)."""
    samples_per_step: int = Field(256, ge=1)
    """Rows gathered before a step is taken."""
    async_level: int = Field(2, ge=0)
    """k: step n trains on files of versions >= n - k; the last k + 1 versions are kept in the store."""
    wait_timeout: float = Field(600.0, gt=0)
    """Seconds a step waits for enough accepted rollouts before the trainer gives up."""
    poll_interval: float = Field(2.0, gt=0)
    shard_size: int = Field(DEFAULT_SHARD_SIZE, ge=1024)
    state_dir: Path
    out_dir: Path
    """metrics.csv and reward.png."""
    checkpoint_cache_dir: Path
    relays: tuple[str, ...] = ()
    """Checkpoint relays to fetch published versions through (S3 is the fallback)."""
    base_model: Path | None = None
    heldout_problems: int = Field(64, ge=0)
    """Held-out problems each published version (and the base model) is evaluated on, greedily
    (`proofpool.trainer.heldout`); 0 turns the evaluation off. Fewer when the pool holds out fewer."""
    grpo: GrpoConfig = Field(default_factory=GrpoConfig)


def run_trainer(
    config: TrainerConfig,
    client: ChainClient,
    store: ObjectStore,
    ledger: LedgerClient,
    *,
    stop: threading.Event | None = None,
    say: Callable[[str], None] = print,
    world: World = SINGLE,
) -> int:
    """Run `config.steps` steps; returns the last published version.

    Under `torch.distributed` this is rank 0: the only rank that reads the chain, the ledger, the
    store and the state directory (where it also keeps the poison list of refused rollout files,
    `proofpool.trainer.screen`). It tells the other ranks (`follow_trainer`) what to do next with one
    broadcast `Command` per step: the rows to train on, or stop, or abort after a failure here, so
    a rank 0 that gives up never leaves the others waiting for a collective.
    """
    from proofpool.inference.model import load_model

    stop = stop or threading.Event()
    pool = config.pool_id
    try:
        latest = client.pool.latest_checkpoint(pool).version
        state = load_state(config.state_dir)
        step = latest if state is None else state.step
        if state is not None and latest > state.step:
            say(
                f"the chain has checkpoint {latest} but the saved state is at step {state.step}: "
                "continuing from the state"
            )
        base_dir = _model_dir(client, store, config, pool)
        start_dir = base_dir if step == 0 else _fetched(client, store, config, version=step)
        model = load_model(start_dir, "fp32")
        if state is not None:
            model.load_state_dict(state.model)
        behavior = BehaviorPolicies(model, lambda version: _published_state(client, store, config, pool, version))
        behavior.remember(step, model.state_dict())  # what version `step` was published as
        environment = _environment(client, pool)
        grpo = config.grpo.for_budget(pool_assignment(environment).max_tokens, config.samples_per_step)
        policy = Policy.whole(model, grpo, None if state is None else state.optimizer)
        held_out = _held_out(environment, config)
    except BaseException as exc:
        abort_followers(world, exc)
        raise
    _tell(world, Command("start", (policy.blueprint(), grpo)))
    policy = policy.shard(world, grpo)
    source = RolloutSource(
        ledger,
        store,
        pool,
        set() if state is None else set(state.seen),
        limits=ModelLimits.of(policy.whole_model.config),
        poisoned=PoisonList.load(config.state_dir),
        judged=not getattr(environment.taskset, "reproducible_scores", True),
    )
    csv_path, png_path = config.out_dir / "metrics.csv", config.out_dir / "reward.png"
    ranks = f" on {world.size} ranks" if world.size > 1 else ""
    say(
        f"trainer for pool {pool}: from checkpoint {step}, {config.steps} steps of >= {config.samples_per_step} "
        f"samples{ranks}, loss normalizer {grpo.normalizer:g}"
    )
    if config.heldout_problems and held_out is None:
        say("held-out evaluation off: the pool's task set holds no problem out")
    followers_waiting = True  # the other ranks wait for a command, not inside a collective
    base_score: HeldOutScore | None = None
    try:
        if held_out is not None and step == 0:  # a fresh run: the base model, for comparison
            base_score = held_out.evaluate(behavior.policy(0), 0)
            say(base_score.line())
        for _ in range(config.steps):
            gather_started = time.monotonic()
            rows = gather(
                source,
                step=step,
                async_level=config.async_level,
                samples=config.samples_per_step,
                timeout=config.wait_timeout,
                stop=stop,
                say=say,
                poll=config.poll_interval,
            )
            waited = time.monotonic() - gather_started
            step_started = time.monotonic()
            old = behavior.logprobs(rows)  # the ratio's denominator: the policies that sampled the rows
            _tell(world, Command("step", (rows, old)))
            followers_waiting = False
            metrics = policy.step(rows, grpo, old)
            trained = time.monotonic() - step_started
            policy.sync()  # rank 0's whole model now holds the step's weights
            followers_waiting = True
            published = publish_checkpoint(
                client,
                store,
                pool,
                step + 1,
                policy.whole_model,
                config.shard_size,
                assets_dir=base_dir,
                figures=checkpoint_figures(metrics),
            )
            pruned = prune_checkpoints(store, pool, keep_from=step + 1 - config.async_level)
            behavior.remember(step + 1, policy.whole_model.state_dict())
            behavior.forget_below(step + 1 - config.async_level)
            step += 1
            save_state(config.state_dir, TrainerState(step, *policy.state_dicts(), source.seen))
            publish_seconds = time.monotonic() - step_started - trained
            score = None if held_out is None else held_out.evaluate(behavior.policy(step), step)
            row = {
                "step": step,
                "version": published.version,
                **_flat(metrics),
                "wait_seconds": waited,
                "train_seconds": trained,
                "publish_seconds": publish_seconds,
                **(score.columns() if score else {}),
                **(base_score.columns("base_heldout") if base_score else {}),  # the first row of a fresh run
            }
            base_score = None
            append_csv(csv_path, row)
            plot(read_csv(csv_path), png_path, f"pool {pool}: GRPO on accepted rollouts")
            log.info("checkpoint published", extra={"pool": pool, "version": published.version, "pruned": pruned})
            if metrics.skipped_nonfinite:
                say(f"step {step}: non-finite loss or gradient, optimizer step skipped (weights unchanged)")
            say(
                f"step {step}: {len(rows)} samples, mean reward {row.get('mean_reward', float('nan')):.3f}, "
                f"loss {row.get('loss', float('nan')):.4f} -> checkpoint {published.version} "
                f"(tx 0x{published.tx_hash.hex()[:12]}…){f', pruned {pruned}' if pruned else ''}"
            )
            if score is not None:
                say(score.line())
            if stop.is_set():
                break
    except BaseException as exc:
        if followers_waiting:  # inside a collective they cannot hear us: the group's timeout ends them
            abort_followers(world, exc)
        raise
    _tell(world, Command("stop", step))
    return step


def follow_trainer(world: World) -> int:
    """Ranks > 0 under `torch.distributed`: build this rank's FSDP shard from what rank 0 sends,
    then for each step take the rows rank 0 gathered, train on this rank's share and hand the
    shards to rank 0 for publishing. Touches no chain, ledger, store or state directory: every
    setting, the GRPO ones included, comes from rank 0's `start` command.

    Returns the last version rank 0 published; `TrainerAborted` when rank 0 gave up.
    """
    command = _heard(world)
    blueprint, grpo = command.payload  # rank 0's settings: its normalizer comes from the pool
    policy = Policy.follow(world, blueprint, grpo)
    while True:
        command = _heard(world)
        if command.kind == "stop":
            return int(command.payload)
        rows, old = command.payload
        policy.step(rows, grpo, old)
        policy.sync()


class TrainerAborted(ProofpoolError):
    """Rank 0 of a distributed trainer failed or was stopped before it could finish."""


@dataclass(frozen=True)
class Command:
    """What rank 0 tells the other ranks to do next (one broadcast, pickled).

    `start`: build the shards (payload: the `Blueprint` and the run's `GrpoConfig`); `step`: train
    on the payload's rows (payload: the rows and their behaviour log-probabilities);
    `stop`: done (payload: the last published version); `abort`: rank 0 failed (payload: why).
    """

    kind: Literal["start", "step", "stop", "abort"]
    payload: Any = None


def abort_followers(world: World, reason: BaseException) -> None:
    """Rank 0: tell the other ranks, waiting for a command, that it failed (they raise
    `TrainerAborted`); without it they would wait for the process group's timeout."""
    _tell(world, Command("abort", _describe(reason)))


def _tell(world: World, command: Command) -> None:
    if world.size > 1:
        broadcast(world, command)


def _heard(world: World) -> Command:
    command: Command = broadcast(world)
    if command.kind == "abort":
        raise TrainerAborted(f"rank 0 stopped the trainer: {command.payload}")
    return command


def _describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__


def _environment(client: ChainClient, pool: int) -> Environment:
    """The pool's environment: its held-out problems, and whether its rewards are the files' or, for a
    task set that does not score reproducibly, the validators' judgements (`RolloutSource.judged`)."""
    info = client.pool.get_pool(pool)
    try:
        return pool_environment(info.model_uri, info.spec_sha256)
    except UnknownEnvironment as exc:
        hint = "the trainer needs it for the held-out evaluation and to know whose rewards to train on"
        raise UnknownEnvironment(f"{exc}; {hint}") from exc


def _held_out(environment: Environment, config: TrainerConfig) -> HeldOut | None:
    """The pool's held-out problems to evaluate on, None when the evaluation is off or the pool's
    task set holds none out. Completions get the pool's assignment budget (`pool_assignment`)."""
    if config.heldout_problems == 0:
        return None
    max_tokens = pool_assignment(environment).max_tokens
    held = HeldOut.of_pool(environment, config.heldout_problems, max_tokens, config.grpo.micro_batch)
    return held if held.problem_ids else None


def _published_state(
    client: ChainClient, store: ObjectStore, config: TrainerConfig, pool: int, version: int
) -> dict[str, torch.Tensor]:
    """The weights workers ran as `version`: the pool's base model, or the published checkpoint."""
    from proofpool.inference.model import load_model

    directory = _model_dir(client, store, config, pool) if version == 0 else _fetched(client, store, config, version)
    return load_model(directory, "fp32").state_dict()


def _model_dir(client: ChainClient, store: ObjectStore, config: TrainerConfig, pool: int) -> Path:
    """The pool's version-0 model: tokenizer and model config come from it for every version."""
    if onchain_manifest_sha256(client, pool, 0) is not None:
        return _fetched(client, store, config, 0)
    info = client.pool.get_pool(pool)
    return resolve_base_model(info.model_uri, config.base_model, spec_sha256=info.spec_sha256)


def _fetched(client: ChainClient, store: ObjectStore, config: TrainerConfig, version: int) -> Path:
    """Published checkpoint `version`, verified against the chain, through the relays if any."""
    return ensure_published_checkpoint(
        client,
        store,
        config.pool_id,
        version,
        config.checkpoint_cache_dir,
        relays=config.relays,
        max_bytes=get_settings().checkpoint_max_bytes,
    )


def _flat(metrics: object) -> dict[str, float]:
    values = dataclasses.asdict(metrics) if dataclasses.is_dataclass(metrics) else dict(metrics)  # type: ignore[call-overload]
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float)}
