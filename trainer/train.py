"""`proofpool trainer run`: GRPO steps on accepted rollouts, each published as the next checkpoint.

Step n starts from checkpoint version n (the pool's base model for n = 0), gathers at least
`samples_per_step` rows from accepted files of versions >= n - k, takes one GRPO step
(`trainer.step.grpo_step`), and publishes the result as version n + 1: sharded safetensors and a
manifest in the store, the manifest's sha256 on-chain (`proofpool.checkpoint.publish_checkpoint`),
so heartbeats hand it to workers and validators load it. The last k + 1 versions stay in the
store; older ones are deleted. After each publication the state (weights, optimizer, step, files
used) is saved, so a restarted trainer continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from proofpool.chain.client import ChainClient
from proofpool.checkpoint import (
    DEFAULT_SHARD_SIZE,
    ensure_published_checkpoint,
    onchain_manifest_sha256,
    prune_checkpoints,
    publish_checkpoint,
)
from proofpool.http.ledger_client import LedgerClient
from proofpool.model.base import resolve_base_model
from proofpool.storage.s3 import ObjectStore
from trainer.config import GrpoConfig
from trainer.data import RolloutSource, gather
from trainer.metrics import append_csv, plot, read_csv
from trainer.state import TrainerState, load_state, save_state
from trainer.step import grpo_step, make_optimizer

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
    base_model: Path | None = None
    grpo: GrpoConfig = Field(default_factory=GrpoConfig)


def run_trainer(
    config: TrainerConfig,
    client: ChainClient,
    store: ObjectStore,
    ledger: LedgerClient,
    *,
    stop: threading.Event | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Run `config.steps` steps; returns the last published version."""
    from proofpool.model.build import load_model

    stop = stop or threading.Event()
    pool = config.pool_id
    latest = client.pool.latest_checkpoint(pool).version
    state = load_state(config.state_dir)
    step = latest if state is None else state.step
    if state is not None and latest > state.step:
        say(f"the chain has checkpoint {latest} but the saved state is at step {state.step}: continuing from the state")
    base_dir = _model_dir(client, store, config, pool)
    start_dir = (
        base_dir if step == 0 else ensure_published_checkpoint(client, store, pool, step, config.checkpoint_cache_dir)
    )
    model = load_model(start_dir, "fp32")
    optimizer = make_optimizer(model, config.grpo)
    if state is not None:
        model.load_state_dict(state.model)
        optimizer.load_state_dict(state.optimizer)
    model.train()
    source = RolloutSource(ledger, store, pool, set() if state is None else set(state.seen))
    csv_path, png_path = config.out_dir / "metrics.csv", config.out_dir / "reward.png"
    say(
        f"trainer for pool {pool}: from checkpoint {step}, {config.steps} steps of >= {config.samples_per_step} samples"
    )
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
        metrics = grpo_step(model, optimizer, rows, config.grpo)
        trained = time.monotonic() - step_started
        published = publish_checkpoint(client, store, pool, step + 1, model, config.shard_size, assets_dir=base_dir)
        pruned = prune_checkpoints(store, pool, keep_from=step + 1 - config.async_level)
        step += 1
        save_state(config.state_dir, TrainerState(step, model.state_dict(), optimizer.state_dict(), source.seen))
        row = {
            "step": step,
            "version": published.version,
            **_flat(metrics),
            "wait_seconds": waited,
            "train_seconds": trained,
            "publish_seconds": time.monotonic() - step_started - trained,
        }
        append_csv(csv_path, row)
        plot(read_csv(csv_path), png_path, f"pool {pool}: GRPO on accepted rollouts")
        log.info("checkpoint published", extra={"pool": pool, "version": published.version, "pruned": pruned})
        say(
            f"step {step}: {len(rows)} samples, mean reward {row.get('mean_reward', float('nan')):.3f}, "
            f"loss {row.get('loss', float('nan')):.4f} -> checkpoint {published.version} "
            f"(tx 0x{published.tx_hash.hex()[:12]}…){f', pruned {pruned}' if pruned else ''}"
        )
        if stop.is_set():
            break
    return step


def _model_dir(client: ChainClient, store: ObjectStore, config: TrainerConfig, pool: int) -> Path:
    """The pool's version-0 model: tokenizer and model config come from it for every version."""
    if onchain_manifest_sha256(client, pool, 0) is not None:
        return ensure_published_checkpoint(client, store, pool, 0, config.checkpoint_cache_dir)
    return resolve_base_model(client.pool.get_pool(pool).model_uri, config.base_model)


def _flat(metrics: object) -> dict[str, float]:
    values = dataclasses.asdict(metrics) if dataclasses.is_dataclass(metrics) else dict(metrics)  # type: ignore[call-overload]
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float)}
