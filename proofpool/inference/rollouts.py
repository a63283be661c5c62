"""Turn generated completions into rollout-file rows: proofs, rewards, group advantages.

The worker's engine yields, per sample, the completion tokens and the hidden states that
produced them; this module adds what a rollout row needs with the shared functions validators
recompute (`build_proofs_batch`, the task's `reward`, `group_advantages`), so worker and validator
cannot drift. The proofs of all rows are built in one batched pass, so a generation call pays
the proof's fixed costs once, not once per sample. Rows keep the generation order: a sample's
row index is the sample index its tokens were sampled with, which is what the sampling check
assumes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from proofpool.core.environment import Taskset
from proofpool.core.rl.advantages import group_advantages
from proofpool.core.rollout import RolloutSample
from proofpool.core.toploc import build_proofs_batch, join_proofs


@dataclass(frozen=True)
class CompletedSample:
    """One generated sample, before scoring and proving."""

    problem_id: str
    group_id: int
    prompt_tokens: Sequence[int]
    completion_tokens: Sequence[int]
    hidden_states: torch.Tensor
    """[len(completion_tokens), hidden]: the final-norm states that produced each token (bf16)."""


def to_rollout_samples(
    taskset: Taskset,
    completed: Sequence[CompletedSample],
    *,
    sampling_seed: int,
    temperature: float,
    model_version: int,
) -> list[RolloutSample]:
    """Rollout rows for `completed`, in order (row i must have been sampled with sample index i)."""
    rewards = [taskset.score(c.problem_id, c.completion_tokens) for c in completed]
    advantages = group_advantages(rewards, [c.group_id for c in completed])
    proofs = build_proofs_batch([c.hidden_states for c in completed])
    return [
        RolloutSample(
            problem_id=c.problem_id,
            group_id=c.group_id,
            prompt_tokens=tuple(c.prompt_tokens),
            completion_tokens=tuple(c.completion_tokens),
            reward=r,
            advantage=a,
            sampling_seed=sampling_seed,
            temperature=temperature,
            model_version=model_version,
            proofs=join_proofs(p),
        )
        for c, r, a, p in zip(completed, rewards, advantages, proofs, strict=True)
    ]
