"""Scale-out: one GRPO step under torch.distributed with FSDP on 2 CPU processes (gloo) gives the
same loss and the same updated weights as the step in one process."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from proofpool.model.build import load_model
from proofpool.model.cache import ensure_devnet_model
from proofpool.rollout import RolloutSample
from proofpool.tasks.arithmetic import generate_problems
from trainer.config import GrpoConfig
from trainer.local_rollouts import generate_rollouts
from trainer.step import grpo_step, make_optimizer
from trainer.world import SINGLE, World, full_state_dict, shard_model

pytestmark = pytest.mark.slow

CFG = GrpoConfig(micro_batch=16)


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
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        loss, grad_norm, weights = one_step(World(rank, 2), data)
        if rank == 0:
            out["loss"], out["grad_norm"], out["weights"] = loss, grad_norm, weights
    finally:
        torch.distributed.destroy_process_group()


def test_two_gloo_processes_match_one() -> None:
    data = rows()
    single_loss, single_norm, single_weights = one_step(SINGLE, data)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(port, data, out), nprocs=2, join=True)
        loss, grad_norm, weights = out["loss"], out["grad_norm"], out["weights"]
    assert loss == pytest.approx(single_loss, rel=1e-4, abs=1e-6)
    assert grad_norm == pytest.approx(single_norm, rel=1e-4)  # the whole gradient, not an average of halves
    assert weights.keys() == single_weights.keys()
    start = load_model(ensure_devnet_model(progress=None), "fp32").state_dict()
    for name, tensor in single_weights.items():
        torch.testing.assert_close(weights[name], tensor, rtol=1e-4, atol=1e-6)
    assert any(not torch.equal(t, start[n]) for n, t in single_weights.items())  # the step moved the weights
