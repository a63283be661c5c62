"""What the checks judge a file against: the chain's record of the submission and the pool's limits.

Both are plain values the caller assembles (the Celery task from Postgres and the chain), so the
checks need no database, chain or store and can be run by anyone who holds the file, e.g. an
auditor re-deriving a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from proofpool.core.assignment import DEFAULT_ASSIGNMENT, MAX_TEMPERATURE, MIN_TEMPERATURE
from proofpool.core.environment import Environment, Taskset
from proofpool.core.spec import NO_SPEC
from proofpool.envs import environment_spec_sha256

MIB: Final = 2**20


@dataclass(frozen=True)
class SubmissionFacts:
    """What the chain recorded for the submission (`WorkSubmitted`), which the file must match."""

    pool_id: int
    work_key: bytes
    """sha256 of the file, the submission's key on-chain."""
    node: str
    """The submitting node's address (any hex case)."""
    work_units: int
    """Work the provider claimed: total completion tokens of the file."""
    model_version: int
    """Checkpoint version the provider says it generated with."""


@dataclass(frozen=True)
class PoolRules:
    """The limits a validator enforces for one pool.

    The task set, the token limits and the spec hash come from the pool's environment
    (`PoolRules.of`), the rest from the pool's assignment settings and the validator's own. Invalid
    settings raise ValueError: they are the operator's mistake, not the submitter's.
    """

    latest_version: int
    """The pool's newest checkpoint version on-chain (0 if none was published)."""
    taskset: Taskset
    """The pool's task set: the problems an assignment draws, their prompts and their rewards."""
    vocab_size: int
    """Token ids must be below it (the environment's tokenizer)."""
    stop_token_ids: frozenset[int]
    """The ids that end a completion (the environment's stop set)."""
    max_prompt_tokens: int
    """The environment's longest prompt."""
    max_completion_tokens: int
    """The completion budget workers are assigned (`max_tokens`). Also the sampling check's budget: a
    completion shorter than this must end with EOS, so it must equal what workers were told."""
    async_window: int = 2
    """Accept files generated with versions latest - async_window .. latest (the trainer's async level)."""
    max_rows: int = 4096
    temperature: float = DEFAULT_ASSIGNMENT.temperature
    """The pool's sampling temperature (`AssignmentConfig.temperature`): every row must carry it."""
    batch_size: int = DEFAULT_ASSIGNMENT.batch_size
    """Problems per assigned batch: a file holds exactly this many groups."""
    group_size: int = DEFAULT_ASSIGNMENT.group_size
    """Samples per problem: every group holds exactly this many rows."""
    hidden_size: int | None = None
    """The model's hidden size, which fixes each TOPLOC proof's length
    (`proofpool.core.toploc.proof.expected_proof_lengths`); None for any model of hidden size >= 128
    (every proof then covers the full top-128), which is every causal LM in use."""
    check_assignment: bool = True
    """Require the file to answer one batch assigned to the node (`proofpool.validator.checks.assignment`).
    Off only for files that were not made from an assignment (hand-built test files)."""
    last_issued_batch: int | None = None
    """Highest batch counter the orchestrator handed this node for the submission's checkpoint
    version (`issued_batches`); a file answering a later batch is refused. None where that record
    is not at hand (an auditor re-checking a file offline): then every counter below
    `proofpool.validator.checks.assignment.MAX_BATCHES` is searched."""
    stale_grace: float = 0.0
    """Seconds: a file one version below the window is not stale when the latest checkpoint (the
    one that pushed its version out) was published less than this before the submission's block
    (`proofpool.validator.checks.version`). 0: no grace."""
    latest_published_before: float | None = None
    """Seconds from the latest checkpoint's publication to the submission's block, both chain
    timestamps; None when not at hand (then no grace applies)."""
    max_file_bytes: int = 64 * MIB
    max_decoded_bytes: int = 256 * MIB
    """Upper bound on the decoded table, estimated from the Parquet footer before anything is
    decompressed: a few KiB of run-length or dictionary encoding can decode to gigabytes."""
    spec_sha256: bytes = NO_SPEC
    """The pool's on-chain `specSha256`, which every file must carry (`proofpool.spec_sha256`);
    `NO_SPEC` for a pool without a spec."""

    @classmethod
    def of(cls, environment: Environment, latest_version: int, **values: Any) -> PoolRules:
        """The rules of a pool running `environment`: its task set, token limits and spec hash (the
        completion budget defaults to the environment's; a pool's assignment settings override it).

        The spec hash is the one the environment was built from (`proofpool.envs.environment_spec_sha256`):
        a validator gets a pool's environment only through `proofpool.envs.pool_environment`, which
        refuses the pool unless that hash is the pool's on-chain `specSha256`."""
        tokens = environment.tokens
        limits = {
            "vocab_size": tokens.vocab_size,
            "stop_token_ids": tokens.stop_ids,
            "max_prompt_tokens": tokens.max_prompt_tokens,
            "max_completion_tokens": tokens.max_completion_tokens,
            "spec_sha256": environment_spec_sha256(environment),
        }
        return cls(latest_version=latest_version, taskset=environment.taskset, **{**limits, **values})

    def for_parsing(self) -> PoolRules:
        """These rules without the task set, for the decoding child: parsing reads limits only, and
        a pool's task set can hold a tokenizer and a dataset that would be pickled with every file."""
        return replace(self, taskset=NO_TASKS)

    def __post_init__(self) -> None:
        for name in ("max_rows", "max_prompt_tokens", "max_completion_tokens", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.latest_version < 0 or self.async_window < 0:
            raise ValueError("latest_version and async_window must be >= 0")
        if not self.stop_token_ids or not all(0 <= t < self.vocab_size for t in self.stop_token_ids):
            ids = sorted(self.stop_token_ids)
            raise ValueError(f"stop_token_ids {ids} empty or outside the vocabulary of {self.vocab_size}")
        if not (math.isfinite(self.temperature) and MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE):
            raise ValueError(f"temperature must be in {MIN_TEMPERATURE}..{MAX_TEMPERATURE}, got {self.temperature}")
        for name in ("batch_size", "group_size"):
            if not 1 <= getattr(self, name) <= 4096:
                raise ValueError(f"{name} must be in 1..4096, got {getattr(self, name)}")
        if self.hidden_size is not None and self.hidden_size < 1:
            raise ValueError(f"hidden_size must be >= 1, got {self.hidden_size}")
        if self.last_issued_batch is not None and self.last_issued_batch < 0:
            raise ValueError(f"last_issued_batch must be >= 0, got {self.last_issued_batch}")
        if self.max_file_bytes < 1 or self.max_decoded_bytes < 1:
            raise ValueError("byte limits must be >= 1")
        if len(self.spec_sha256) != len(NO_SPEC):
            raise ValueError(f"spec_sha256 must be 32 bytes, got {len(self.spec_sha256)}")


class _NoTasks:
    """The task set of rules used for parsing only (`PoolRules.for_parsing`): never asked anything."""

    def draw(self, seed: int, count: int) -> list[str]:
        raise NotImplementedError("parsing rules have no task set")

    def prompt_tokens(self, problem_id: str) -> tuple[int, ...]:
        raise NotImplementedError("parsing rules have no task set")

    def score(self, problem_id: str, completion_tokens: Sequence[int]) -> float:
        raise NotImplementedError("parsing rules have no task set")

    def held_out(self, count: int) -> list[str]:
        raise NotImplementedError("parsing rules have no task set")


NO_TASKS: Final[Taskset] = _NoTasks()
