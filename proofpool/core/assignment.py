"""Work assignments: which problems a node solves next, with which sampling seed.

Everything is a pure function of public inputs (pool id, node address, checkpoint version,
batch counter): no secret, no clock, no randomness of the server. So a heartbeat retried
returns the same batch, two backend workers agree without talking, and a validator can
recompute the seed a node was told to use and check its rollouts against it.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, replace
from typing import Final

from eth_utils import to_canonical_address

from proofpool.core.environment import Taskset

ASSIGNMENT_DOMAIN: Final = b"proofpool-assignment-v1"
"""Domain tag of every derived seed; bump it if the derivation ever changes."""
UINT64_MAX: Final = 2**64 - 1
MIN_TEMPERATURE: Final = 0.05
"""Lowest sampling temperature validators accept: near 0, logits / T overflow float32, and a pool
learns from samples, not near-greedy decodes. Workers refuse to start outside the range, so a
misconfigured honest node is not slashed for it."""
MAX_TEMPERATURE: Final = 10.0
MAX_COMPLETION_TOKENS: Final = 131_072
"""Largest completion budget a pool may set: reasoning traces run to tens of thousands of tokens."""


@dataclass(frozen=True)
class AssignmentConfig:
    """Per-pool knobs of an assignment; the defaults fit the devnet's arithmetic environment.

    A pool may override any field in `pool_assignment_config`; NULL columns keep these defaults.
    """

    batch_size: int = 8
    """Problems per batch (prompts the node generates for before it asks for the next batch)."""
    group_size: int = 8
    """Samples per problem; GRPO advantages are computed within each group."""
    max_tokens: int = 8
    """Completion budget per sample (the devnet's answers, below 199, need at most 4 with `<eos>`)."""
    temperature: float = 1.0
    """Sampling temperature of every sample. The pool's, never the node's: a node free to choose it
    could sample colder to raise its rewards or hotter to lengthen completions and farm work units,
    with every token still genuine. Validators reject rows at any other temperature."""

    def __post_init__(self) -> None:
        for name, high in (("batch_size", 4096), ("group_size", 4096), ("max_tokens", MAX_COMPLETION_TOKENS)):
            value = getattr(self, name)
            if not 1 <= value <= high:
                raise ValueError(f"{name} must be in 1..{high}, got {value}")
        if not MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE:
            raise ValueError(f"temperature must be in {MIN_TEMPERATURE}..{MAX_TEMPERATURE}, got {self.temperature}")
        # The value every party compares: rows store float32, so the pool's setting is rounded alike.
        # (struct's "f" is C's double-to-float conversion, numpy's float32 rounding, without numpy:
        # the base install, which creates pools, has none.)
        object.__setattr__(self, "temperature", struct.unpack("f", struct.pack("f", self.temperature))[0])

    def with_overrides(
        self,
        batch_size: int | None = None,
        group_size: int | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> AssignmentConfig:
        """This config with the non-None overrides applied (a pool's row may set only some)."""
        overrides = {
            "batch_size": batch_size,
            "group_size": group_size,
            "max_tokens": max_tokens,
            "temperature": temperature,
        }
        changes = {k: v for k, v in overrides.items() if v is not None}
        return replace(self, **changes) if changes else self


DEFAULT_ASSIGNMENT: Final = AssignmentConfig()


@dataclass(frozen=True)
class Checkpoint:
    """The model a node must run: latest published version of its pool (0 = the initial model)."""

    version: int = 0
    manifest_sha256: bytes | None = None
    uri: str | None = None


@dataclass(frozen=True)
class Assignment:
    """What a node is told to do by one heartbeat."""

    pool_id: int
    checkpoint: Checkpoint
    batch: int
    task_ids: tuple[str, ...]
    sampling_seed: int
    group_size: int
    max_tokens: int
    temperature: float


def derive_seed(purpose: bytes, pool_id: int, node: str, version: int, batch: int) -> int:
    """A uint64 from sha256 over the domain, `purpose` and the assignment's public inputs."""
    if pool_id < 0 or version < 0 or batch < 0:
        raise ValueError("pool id, version and batch must be non-negative")
    digest = hashlib.sha256(
        ASSIGNMENT_DOMAIN
        + b"/"
        + purpose
        + pool_id.to_bytes(32, "big")
        + to_canonical_address(node)
        + version.to_bytes(8, "big")
        + batch.to_bytes(8, "big")
    ).digest()
    return int.from_bytes(digest[:8], "big")


def sampling_seed(pool_id: int, node: str, version: int, batch: int) -> int:
    """The seed of the node's Gumbel-max sampler for this batch."""
    return derive_seed(b"sampling", pool_id, node, version, batch)


def task_ids(taskset: Taskset, pool_id: int, node: str, version: int, batch: int, count: int) -> tuple[str, ...]:
    """The problem ids of this batch, drawn from the pool's task set with a seed of the public inputs."""
    seed = derive_seed(b"problems", pool_id, node, version, batch)
    return tuple(taskset.draw(seed, count))


def assign(
    taskset: Taskset,
    pool_id: int,
    node: str,
    checkpoint: Checkpoint,
    batch: int,
    config: AssignmentConfig = DEFAULT_ASSIGNMENT,
) -> Assignment:
    """The assignment of `node` in `pool_id` for batch number `batch` of `checkpoint`, from the pool's
    task set (its environment's, `proofpool.envs.environment_for`)."""
    return Assignment(
        pool_id=pool_id,
        checkpoint=checkpoint,
        batch=batch,
        task_ids=task_ids(taskset, pool_id, node, checkpoint.version, batch, config.batch_size),
        sampling_seed=sampling_seed(pool_id, node, checkpoint.version, batch),
        group_size=config.group_size,
        max_tokens=config.max_tokens,
        temperature=config.temperature,
    )
