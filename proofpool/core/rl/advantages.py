"""Group-relative advantages, shared by worker (writes them), validator (recomputes and compares)
and trainer (trains on them).

advantage = reward - mean reward of the sample's group, without dividing by the group's standard
deviation (Dr. GRPO, Liu et al. 2025): std normalisation turns a group with nearly equal rewards
(e.g. 7 of 8 correct) into advantages of size ~1 from a tiny signal, and weights easy and hard
prompts unequally; plain centring keeps the advantage in reward units and is exactly zero for
uniform groups, which the trainer's online filter drops.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def group_advantages(rewards: Sequence[float], group_ids: Sequence[int]) -> list[float]:
    """Per sample: reward minus its group's mean reward, with float32 semantics.

    Rewards are rounded to float32 (as stored in the rollout file), each group's mean is summed
    in float64 in sample order and rounded to float32, and the difference is taken in float32. The
    result is deterministic, so validators can compare a file's advantages exactly.

    Raises:
        ValueError: lengths differ, or a reward is not finite.
    """
    if len(rewards) != len(group_ids):
        raise ValueError(f"{len(rewards)} rewards but {len(group_ids)} group ids")
    if not len(rewards):
        return []
    r = np.asarray(rewards, dtype=np.float32)
    if not np.isfinite(r).all():
        raise ValueError("rewards must be finite")
    _, group = np.unique(np.asarray(group_ids, dtype=np.int64), return_inverse=True)
    sums = np.bincount(group, weights=r.astype(np.float64))
    counts = np.bincount(group)
    means = (sums / counts).astype(np.float32)
    return [float(a) for a in r - means[group]]
