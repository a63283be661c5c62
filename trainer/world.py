"""Scale-out: the trainer under `torch.distributed`, the model sharded with FSDP (fully_shard).

Every rank holds a shard of the parameters and trains on a share of the step's groups (a group
never straddles ranks, so its advantages stay whole). FSDP averages gradients across ranks; the
GRPO loss is a sum over tokens divided by a constant, so each rank multiplies its loss by the
world size to get exactly the single-process gradient. Side effects (publishing a checkpoint,
writing metrics) happen on rank 0 only. Tested with the gloo backend on CPU; NCCL on GPUs.

Started by `torchrun --nproc-per-node N`, which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import torch
import torch.distributed as dist
from proofpool.trainer.batch import group_key

from proofpool.core.rollout import RolloutSample


@dataclass(frozen=True)
class World:
    rank: int
    size: int

    @property
    def main(self) -> bool:
        """Rank 0: the one that publishes and reports."""
        return self.rank == 0

    def shard(self, rows: Sequence[RolloutSample]) -> list[RolloutSample]:
        """This rank's rows: whole groups, dealt round-robin in a fixed order (every rank agrees)."""
        groups: dict[tuple[int, int, str, int], list[RolloutSample]] = defaultdict(list)
        for row in rows:
            groups[group_key(row)].append(row)
        ordered = [groups[k] for k in sorted(groups)]
        return [row for i, group in enumerate(ordered) if i % self.size == self.rank for row in group]

    def sum(self, values: Sequence[float]) -> list[float]:
        """Element-wise sum of `values` over all ranks."""
        if self.size == 1:
            return list(values)
        tensor = torch.tensor(list(values), dtype=torch.float64)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def max(self, value: int) -> int:
        """The largest `value` over all ranks: what every rank must do as many times as the busiest
        (a collective; FSDP hangs when ranks run different numbers of forward/backward passes)."""
        if self.size == 1:
            return value
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

    `timeout` bounds every collective. Ranks > 0 of the trainer wait in one while rank 0 gathers
    rollouts and publishes, so it must exceed the longest of those, not torch's 30 min default.
    """
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size == 1:
        return SINGLE
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
    if world.size > 1 and dist.is_initialized():
        if finished:
            dist.barrier()
        dist.destroy_process_group()


def broadcast(world: World, value: T | None = None) -> T:
    """`value` of rank 0 on every rank (pickled; for commands and rollout rows, not weights)."""
    if world.size == 1:
        return value  # type: ignore[return-value]
    box = [value if world.main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[return-value]


def shard_model(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """FSDP: each block the model says must stay whole (`_no_split_modules`: its decoder layers),
    then the whole model, sharded across the ranks."""
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
