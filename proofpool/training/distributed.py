"""Training on several processes: `torch.distributed` with the model sharded by FSDP (fully_shard).

The generic part of scale-out, shared by the GRPO trainer (`proofpool.trainer.world` adds how it
deals rollout groups to ranks) and a training pool's inner phase (`proofpool.training.inner`, run
by a worker with several devices under `torchrun`). A `World` is this process's rank among the
group's size; the single process is `SINGLE`, and every helper is then a no-op, so code written
for a world runs unchanged without torchrun. Side effects (publishing, writing files) belong to
rank 0 (`World.main`). Tested with the gloo backend on CPU; NCCL on GPUs.

Started by `torchrun --nproc-per-node N`, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
torch is imported where it is used, so importing this module (and `SINGLE`) costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class World:
    rank: int
    size: int

    @property
    def main(self) -> bool:
        """Rank 0: the one that publishes and reports."""
        return self.rank == 0

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of `values` over all ranks."""
        if self.size == 1:
            return list(values)
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def max(self, value: int) -> int:
        """The largest `value` over all ranks: what every rank must do as many times as the busiest
        (a collective; FSDP hangs when ranks run different numbers of forward/backward passes)."""
        if self.size == 1:
            return value
        import torch
        import torch.distributed as dist

        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    def any(self, flag: bool) -> bool:
        """True on every rank when `flag` is true on any (a collective: one decision for all)."""
        return self.max(int(flag)) > 0


SINGLE = World(0, 1)
T = TypeVar("T")


def init_world(backend: str = "gloo", timeout: timedelta | None = None) -> World:
    """Join the process group torchrun describes in the environment; a single process otherwise.

    `timeout` bounds every collective: it must exceed the longest a rank may wait for the others
    (the trainer's ranks > 0 wait while rank 0 gathers rollouts), not torch's 30 min default.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return SINGLE
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(backend, timeout=timeout)
    return World(dist.get_rank(), dist.get_world_size())


def close_world(world: World, *, finished: bool = False) -> None:
    """Leave the process group `init_world` joined (nothing to do for a single process).

    After a finished run (`finished`) the ranks meet at a barrier first, so none tears down its
    gloo connections while a peer still talks over them: in CI, rank 1 once left as rank 0 was
    finishing, and gloo's thread on the dropped connection aborted the process ("terminate called
    without an active exception"), failing a run that had done all its work. After a failure
    there is no barrier: the peer may be gone, and waiting would only hang until the timeout.
    """
    if world.size == 1:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def broadcast(world: World, value: T | None = None) -> T:
    """`value` of rank 0 on every rank (pickled; for commands and small values, not weights)."""
    if world.size == 1:
        return value  # type: ignore[return-value]
    import torch.distributed as dist

    box = [value if world.main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def shard_model(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """FSDP: each block the model says must stay whole (`_no_split_modules`: its decoder layers),
    then the whole model, sharded across the ranks. Parameter names stay those of the model."""
    if world.size == 1:
        return model
    from torch.distributed.fsdp import fully_shard

    for block in unsplit_blocks(model):
        fully_shard(block)
    fully_shard(model)
    return model


def unsplit_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The submodules whose class a transformers model lists in `_no_split_modules` (its decoder
    layers), outermost first: the units FSDP gathers one at a time."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise ValueError(f"{type(model).__name__} lists no _no_split_modules present in it: nothing to shard by")
    return blocks


def full_state_dict(model: torch.nn.Module, world: World) -> dict[str, torch.Tensor]:
    """The unsharded weights, on the CPU of rank 0 (a collective: every rank calls it; ranks > 0
    get an empty dict, so only one process ever holds the whole model twice)."""
    if world.size == 1:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


__all__ = [
    "SINGLE",
    "World",
    "broadcast",
    "close_world",
    "full_state_dict",
    "init_world",
    "shard_model",
    "unsplit_blocks",
]
