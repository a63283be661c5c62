"""Scale-out: the trainer under `torch.distributed`, the model sharded with FSDP (fully_shard).

Every rank holds a shard of the parameters and trains on a share of the step's groups (a group
never straddles ranks, so its advantages stay whole: `shard`). FSDP averages gradients across
ranks; the GRPO loss is a sum over tokens divided by a constant, so each rank multiplies its loss
by the world size to get exactly the single-process gradient. Side effects (publishing a
checkpoint, writing metrics) happen on rank 0 only.

The generic part (the world, the process group, FSDP sharding, the full state dict) is the
training adapter's, `proofpool.training.distributed`, shared with a training pool's inner phase;
it is re-exported here so the trainer imports its world from one place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from proofpool.trainer.batch import group_key

from proofpool.core.rollout import RolloutSample
from proofpool.training.distributed import (
    SINGLE,
    World,
    broadcast,
    close_world,
    full_state_dict,
    init_world,
    shard_model,
    unsplit_blocks,
)


def shard(world: World, rows: Sequence[RolloutSample]) -> list[RolloutSample]:
    """This rank's rows: whole groups, dealt round-robin in a fixed order (every rank agrees)."""
    groups: dict[tuple[int, int, str, int], list[RolloutSample]] = defaultdict(list)
    for row in rows:
        groups[group_key(row)].append(row)
    ordered = [groups[k] for k in sorted(groups)]
    return [row for i, group in enumerate(ordered) if i % world.size == world.rank for row in group]


__all__ = [
    "SINGLE",
    "World",
    "broadcast",
    "close_world",
    "full_state_dict",
    "init_world",
    "shard",
    "shard_model",
    "unsplit_blocks",
]
