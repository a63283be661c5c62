"""Scale-out: one GRPO step under torch.distributed with FSDP on 2 CPU processes (gloo) gives the
same loss and the same updated weights as the step in one process, also when the ranks get
different numbers of micro-batches (FSDP hangs unless they run as many forward and backward
passes), and both ranks skip a step whose gradient is not finite; rank 0 evaluates the held-out
problems alone while the other ranks wait, and gets one process's figures.

No test here can wait forever: every process group has a 60 s collective timeout, the parent
kills ranks still running after `RANK_TIMEOUT`, and pytest-timeout ends each test (300 s, or 900 s
for the one that may first have to build the devnet model)."""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from proofpool.trainer.behavior import BehaviorPolicies
from proofpool.trainer.config import GrpoConfig
from proofpool.trainer.heldout import HeldOut, HeldOutScore
from proofpool.trainer.policy import Policy
from proofpool.trainer.step import grpo_step, make_optimizer
from proofpool.trainer.train import Command, follow_trainer
from proofpool.trainer.world import SINGLE, World, broadcast, full_state_dict, shard_model
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.build import ModelSpec, create_model
from proofpool_arithmetic.cache import ensure_devnet_model
from proofpool_arithmetic.task import generate_problems

from proofpool.core.rollout import RolloutSample
from proofpool.envs import pool_assignment
from proofpool.inference.model import load_model
from tests.fixtures.local_rollouts import generate_rollouts

pytestmark = pytest.mark.slow

CFG = GrpoConfig(micro_batch=16)


GLOO_TIMEOUT = timedelta(seconds=60)
"""Any collective a rank waits in longer than this raises, so a deadlock ends the rank."""
RANK_TIMEOUT = 240.0
"""Seconds the two processes get in all before the parent kills them."""


def _run_two_ranks(fn: Callable, *args: object, timeout: float = RANK_TIMEOUT) -> None:
    """`fn(rank, port, *args)` in 2 spawned processes; fails (and ends them) after `timeout` s
    instead of waiting forever for ranks stuck in a collective."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = mp.start_processes(fn, args=(port, *args), nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    while not context.join(timeout=1.0):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"2 gloo ranks did not finish within {timeout:.0f} s (deadlock?)")


def rows() -> list[RolloutSample]:
    model = load_model(ensure_devnet_model(progress=None), "fp32")
    return generate_rollouts(model, generate_problems(5, 8), group_size=8, sampling_seed=5)


def one_step(world: World, data: list[RolloutSample]) -> tuple[float, float, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = shard_model(load_model(ensure_devnet_model(progress=None), "fp32"), world)
    optimizer = make_optimizer(model, CFG)
    metrics = grpo_step(model, optimizer, data, CFG, world=world)
    weights = {k: v.detach().clone() for k, v in full_state_dict(model, world).items()}
    return metrics.loss, metrics.grad_norm, weights


def _rank(rank: int, port: int, data: list[RolloutSample], out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2, timeout=GLOO_TIMEOUT)
    try:
        loss, grad_norm, weights = one_step(World(rank, 2), data)
        if rank == 0:
            out["loss"], out["grad_norm"], out["weights"] = loss, grad_norm, weights
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.timeout(900)  # the first use of the devnet model builds it: minutes on 2 busy cores
def test_two_gloo_processes_match_one() -> None:
    data = rows()
    single_loss, single_norm, single_weights = one_step(SINGLE, data)
    with mp.Manager() as manager:
        out = manager.dict()
        _run_two_ranks(_rank, data, out)
        loss, grad_norm, weights = out["loss"], out["grad_norm"], out["weights"]
    assert loss == pytest.approx(single_loss, rel=1e-4, abs=1e-6)
    assert grad_norm == pytest.approx(single_norm, rel=1e-4)  # the whole gradient, not an average of halves
    assert weights.keys() == single_weights.keys()
    start = load_model(ensure_devnet_model(progress=None), "fp32").state_dict()
    for name, tensor in single_weights.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-4, atol=1e-6)
    assert any(not torch.equal(t, start[n]) for n, t in single_weights.items())  # the step moved the weights


TINY = ModelSpec(seed=5, hidden=32, layers=2, heads=1)
UNEVEN = GrpoConfig(micro_batch=2)


def _groups(sizes: list[int], nan_group: int | None = None) -> list[RolloutSample]:
    """Groups of `sizes[g]` rows (even), half right and half wrong. Groups are dealt round-robin
    (`proofpool.trainer.world.shard`) and micro-batches hold 2 rows, so rank 0 runs (sizes[0] + sizes[2] + ...) / 2
    passes and rank 1 (sizes[1] + sizes[3] + ...) / 2. `nan_group` gets a NaN advantage."""
    return [
        RolloutSample("add-1-2", g, (1, 5, 6), (7, 2), r, math.nan if g == nan_group and r else a, 7, 1.0, 0, b"")
        for g, size in enumerate(sizes)
        for r, a in ((1.0, 0.5), (0.0, -0.5)) * (size // 2)
    ]


def _tiny_steps(world: World, steps: list[list[RolloutSample]]) -> list[tuple[bool, dict[str, torch.Tensor]]]:
    """(stepped, whole weights on rank 0) after each of `steps`, from the same seeded tiny model."""
    model = shard_model(create_model(TINY), world)
    optimizer = make_optimizer(model, UNEVEN)
    out = []
    for data in steps:
        metrics = grpo_step(model, optimizer, data, UNEVEN, world=world)
        out.append((metrics.stepped, {k: v.detach().clone() for k, v in full_state_dict(model, world).items()}))
    return out


def _tiny_rank(rank: int, port: int, runs: list[list[list[RolloutSample]]], out: dict) -> None:
    """Each run: a fresh tiny model taking the run's steps; rank 0 reports the weights."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2, timeout=GLOO_TIMEOUT)
    try:
        results = [_tiny_steps(World(rank, 2), steps) for steps in runs]
        out[f"stepped{rank}"] = [[stepped for stepped, _ in run] for run in results]
        if rank == 0:
            out["weights"] = [[weights for _, weights in run] for run in results]
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.timeout(300)
def test_uneven_micro_batch_counts_finish_and_match_one_process() -> None:
    """Rank 0 runs 3, 2 and 1 micro-batches, rank 1 runs 1, 1 and none: the ranks with fewer run
    padding passes, in the no-grad pass for the old log-probabilities and in the training pass."""
    cases = [_groups([4, 2, 2]), _groups([2, 2, 2]), _groups([2])]
    singles = [_tiny_steps(SINGLE, [data])[0][1] for data in cases]
    with mp.Manager() as manager:
        out = manager.dict()
        _run_two_ranks(_tiny_rank, [[data] for data in cases], out)
        stepped, weights = (out["stepped0"], out["stepped1"]), out["weights"]
    assert stepped == ([[True]] * 3, [[True]] * 3)
    start = create_model(TINY).state_dict()
    for single, [sharded] in zip(singles, weights, strict=True):
        for name, tensor in single.items():
            torch.testing.assert_close(sharded[name], tensor, rtol=1e-4, atol=1e-6)
        assert any(not torch.equal(t, start[n]) for n, t in single.items())


@pytest.mark.timeout(300)
def test_a_nan_on_one_rank_makes_both_ranks_skip_the_step() -> None:
    clean, poisoned = _groups([2, 2, 2]), _groups([2, 2, 2], nan_group=1)  # group 1 is rank 1's
    with mp.Manager() as manager:
        out = manager.dict()
        _run_two_ranks(_tiny_rank, [[clean, poisoned]], out)
        stepped, [weights] = (out["stepped0"], out["stepped1"]), out["weights"]
    assert stepped == ([[True, False]], [[True, False]])  # the same decision on both ranks
    for name, tensor in weights[0].items():
        assert torch.equal(weights[1][name], tensor), name  # the skipped step left the weights alone
        assert bool(torch.isfinite(weights[1][name]).all()), name


HELD_OUT = 64


def _lead_one_step(world: World, data: list[RolloutSample]) -> tuple[HeldOutScore, HeldOutScore]:
    """Rank 0's part of `run_trainer` for a fresh run of one step, chain and store left out: the
    base model's held-out evaluation, the step (commanded to the other ranks), then the published
    weights' evaluation. Both evaluations run while the other ranks wait in `follow_trainer` for
    the next command: a collective inside one would hang until the gloo timeout."""
    model = load_model(ensure_devnet_model(progress=None), "fp32")
    behavior = BehaviorPolicies(model, lambda version: pytest.fail(f"version {version} was not remembered"))
    behavior.remember(0, model.state_dict())
    held = HeldOut.of_pool(ENVIRONMENT, HELD_OUT, pool_assignment(ENVIRONMENT).max_tokens, CFG.micro_batch)
    policy = Policy.whole(model, CFG, None)
    broadcast(world, Command("start", (policy.blueprint(), CFG)))
    policy = policy.shard(world, CFG)
    before = held.evaluate(behavior.policy(0), 0)
    old = behavior.logprobs(data)
    broadcast(world, Command("step", (data, old)))
    policy.step(data, CFG, old)
    policy.sync()
    behavior.remember(1, policy.whole_model.state_dict())
    after = held.evaluate(behavior.policy(1), 1)
    broadcast(world, Command("stop", 1))
    return before, after


def _heldout_rank(rank: int, port: int, data: list[RolloutSample], state: str, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2, timeout=GLOO_TIMEOUT)
    world = World(rank, 2)
    try:
        if world.main:
            out["scores"] = _lead_one_step(world, data)
        else:
            out["followed_to"] = follow_trainer(world)
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.timeout(900)  # the first use of the devnet model builds it
def test_rank_0_evaluates_held_out_problems_while_the_others_wait_and_scores_as_one_process(tmp_path: Path) -> None:
    data = rows()
    single = _lead_one_step(SINGLE, data)
    with mp.Manager() as manager:
        out = manager.dict()
        _run_two_ranks(_heldout_rank, data, str(tmp_path), out)
        before, after = out["scores"]
        followed_to = out["followed_to"]
    assert followed_to == 1  # rank 1 took the step and heard the stop: the commands stayed in step
    assert (before.version, after.version, before.problems) == (0, 1, HELD_OUT)
    for sharded, whole in zip((before, after), single, strict=True):
        assert (sharded.accuracy, sharded.reward) == (whole.accuracy, whole.reward)
    assert 0.1 < before.accuracy < 0.95
