"""`proofpool trainer run` under torchrun: 2 gloo processes against the real market (anvil,
PostgreSQL, indexer, backend, SeaweedFS) take one FSDP step on accepted rollouts; rank 0 alone
publishes, so the pool gets exactly one `CheckpointPublished`, and the checkpoint is a loadable,
chain-verified model trained with the whole step's gradient (the same loss and gradient norm as
one process on the same rows). Rank 0 alone evaluates the base model and the published checkpoint
on the held-out problems while rank 1 waits (the subprocess timeout bounds the run). The market
setup is the one of `test_trainer_run.py`.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.heldout import HeldOut
from proofpool.trainer.state import load_state
from proofpool.trainer.step import grpo_step, make_optimizer
from proofpool_arithmetic import ENVIRONMENT

from proofpool.envs import pool_assignment, resolve_base_model
from proofpool.inference.model import load_model
from proofpool.infra.chain.anvil import free_port
from proofpool.infra.chain.signing import sign_invite
from proofpool.infra.checkpoint import ensure_published_checkpoint
from proofpool.infra.config import get_settings
from proofpool.infra.storage import ObjectStore
from proofpool.infra.storage.seaweed import SeaweedProcess
from tests.fixtures.market import Market
from tests.integration.test_trainer_run import rows_for, submit_accepted, wait_accepted

pytestmark = pytest.mark.slow


def torchrun_trainer(market: Market, state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`torchrun --nproc-per-node 2 -m proofpool.cli.main trainer run ...` (torchrun is torch.distributed.run)."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
         "-m", "proofpool.cli.main", "trainer", "run", "--pool", str(market.pool_id),
         "--key", market.stack.cast.manager.key.hex(), "--state-dir", str(state), "--samples-per-step", "128",
         "--wait-timeout", "60", "--shard-mb", "0.5", *args],
        env={**market.stack.env, "PROOFPOOL_CHECKPOINT_CACHE_DIR": str(state / "cache")},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def published_events(market: Market) -> list[int]:
    """Versions of every `CheckpointPublished` of the pool, from the chain's logs."""
    client = market.stack.admin
    logs = client.w3.eth.get_logs({"fromBlock": client.book.deploy_block, "address": client.pool.address})
    return [
        event["version"]
        for event in client.decoder().decode_logs(logs)
        if event.name == "CheckpointPublished" and event["poolId"] == market.pool_id
    ]


def test_two_ranks_take_one_step_and_rank_0_publishes_it_once(
    market: Market, seaweed: SeaweedProcess, tmp_path: Path
) -> None:
    stack, client = market.stack, market.stack.admin
    store = ObjectStore.from_settings(seaweed.settings(get_settings()))
    expiry = client.w3.eth.get_block("latest")["timestamp"] + 3600
    invite = sign_invite(
        stack.cast.manager, market.pool_id, market.node, 78, expiry, client.chain_id, client.pool.address
    )
    client.as_account(stack.cast.alice_node).pool.join_pool(invite)
    files = {seed: rows_for(seed, 8, 0) for seed in (11, 12)}
    wait_accepted(market, [submit_accepted(market, store, rows, 0) for rows in files.values()])

    state = tmp_path / "trainer"
    done = torchrun_trainer(market, state, "--steps", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "on 2 ranks" in done.stdout and done.stdout.count("step 1: 128 samples") == 1, done.stdout
    assert published_events(market) == [1]  # rank 0 only, once
    assert client.pool.latest_checkpoint(market.pool_id).version == 1

    published = load_model(ensure_published_checkpoint(client, store, market.pool_id, 1, tmp_path / "cache"))
    base_dir = resolve_base_model(client.pool.get_pool(market.pool_id).model_uri)
    base = load_model(base_dir)
    assert published.state_dict().keys() == base.state_dict().keys()
    assert any(not torch.equal(published.state_dict()[k], t) for k, t in base.state_dict().items())

    # The same step in one process: the two ranks together computed the whole step's gradient.
    single = load_model(base_dir)
    rows = [row for seed in sorted(files) for row in files[seed]]
    cfg = GrpoConfig().for_budget(pool_assignment(ENVIRONMENT).max_tokens, 128)  # the pool's normalizer
    assert f"loss normalizer {cfg.normalizer:g}" in done.stdout
    expected = grpo_step(single, make_optimizer(single, cfg), rows, cfg)
    (metrics,) = list(csv.DictReader((state / "metrics.csv").open()))
    assert float(metrics["loss"]) == pytest.approx(expected.loss, rel=1e-3, abs=1e-6)
    assert float(metrics["grad_norm"]) == pytest.approx(expected.grad_norm, rel=1e-3)
    assert float(metrics["samples"]) == expected.samples == 128

    # Held-out: rank 0 alone evaluated the base model and the published checkpoint, once each.
    assert done.stdout.count("held-out: checkpoint 0 greedy accuracy") == 1, done.stdout
    assert done.stdout.count("held-out: checkpoint 1 greedy accuracy") == 1, done.stdout
    held = HeldOut.of_pool(ENVIRONMENT, 64, pool_assignment(ENVIRONMENT).max_tokens)
    assert float(metrics["heldout_accuracy"]) == held.evaluate(published, 1).accuracy
    assert float(metrics["base_heldout_accuracy"]) == held.evaluate(base, 0).accuracy

    # The saved state is the single-process one (a restart without torchrun can resume it).
    saved = load_state(state)
    assert saved is not None and saved.step == 1 and len(saved.seen) == 2
    assert saved.optimizer["state"] and all(isinstance(k, int) for k in saved.optimizer["state"])
    assert (state / "reward.png").is_file()


def test_when_rank_0_fails_the_other_ranks_stop_instead_of_waiting(tmp_path: Path) -> None:
    """No chain answers: rank 0 fails before the first step and tells rank 1, which exits at once
    with the reason rather than sitting in a collective until the group's timeout (over an hour)."""
    dead = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
         "-m", "proofpool.cli.main", "trainer", "run", "--pool", "1", "--key", "0x" + "ab" * 32,
         "--rpc-url", dead, "--backend-url", dead, "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "rank 0 stopped the trainer" in done.stdout + done.stderr, done.stdout + done.stderr
    assert not (tmp_path / "state").exists()  # nothing was trained or saved
