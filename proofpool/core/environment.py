"""What a pool's environment provides, as every role needs it: tasks, their scoring, token limits.

A pool names its model and task set in its on-chain `modelUri`; the environment behind that URI
(found by `proofpool.envs.environment_for`) is the one thing that knows the task. Workers draw the
problems of an assignment and build their prompts from it, validators re-derive the same problems
and re-score every completion with it, the trainer pads and normalizes with its token limits. The
rest of the market only moves problem ids, token ids and rewards, so it works for any model,
tokenizer and task that implements this protocol.

Everything here must be deterministic: two machines given the same seed draw the same problem
ids, and the same problem id and completion tokens always score the same reward, since a
validator slashes a worker whose numbers differ from its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from proofpool.core.errors import ProofpoolError

Progress = Callable[[str], None]
"""Where long work (building or fetching a model) reports what it is doing."""


class InvalidProblemId(ProofpoolError):
    """A problem id names no problem of the task set (e.g. a tampered rollout row)."""


@dataclass(frozen=True)
class TokenLimits:
    """The token ids and lengths every party must agree on for a pool's model and task set."""

    vocab_size: int
    """Token ids are in 0..vocab_size - 1; a row holding any other id is rejected."""
    eos_id: int
    """The id that ends a completion: a completion shorter than its budget must end with it."""
    pad_id: int
    """The id the trainer pads batches with (never attended to)."""
    bos_id: int | None
    """The id prompts start with, if the tokenizer has one."""
    max_prompt_tokens: int
    """The longest prompt the task set builds."""
    max_completion_tokens: int
    """The longest completion worth generating (the default completion budget of a pool)."""

    def __post_init__(self) -> None:
        if self.vocab_size < 1 or self.max_prompt_tokens < 1 or self.max_completion_tokens < 1:
            raise ValueError(f"token limits must be positive: {self}")
        for name in ("eos_id", "pad_id", "bos_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"{name} {value} is outside the vocabulary of {self.vocab_size}")


@runtime_checkable
class Taskset(Protocol):
    """Problems named by ids that encode them, so anyone can rebuild and score one from its id."""

    def draw(self, seed: int, count: int) -> list[str]:
        """`count` problem ids drawn by a generator seeded with `seed` (same seed, same ids)."""
        ...

    def prompt_tokens(self, problem_id: str) -> tuple[int, ...]:
        """The prompt the model sees for the problem; raises `InvalidProblemId` for a foreign id."""
        ...

    def score(self, problem_id: str, completion_tokens: Sequence[int]) -> float:
        """The completion's reward, in [0, 1] (raises `InvalidProblemId` for a foreign id)."""
        ...


@runtime_checkable
class Environment(Protocol):
    """A pool's model family and task set, as a plugin (entry point group `proofpool.environments`)."""

    name: str
    taskset: Taskset
    tokens: TokenLimits

    def base_model(self, model_uri: str, progress: Progress | None = None) -> Path:
        """The local Hugging Face model directory of the pool's checkpoint version 0."""
        ...
