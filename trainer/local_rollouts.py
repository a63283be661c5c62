"""Rollouts from the trainer's own PyTorch policy, for tests and the learning demo only.

The real trainer trains on validated rollout files from workers (vLLM + proofs). To test that
GRPO learns without vLLM, this module generates rows the way a worker does: `group_size` samples
per arithmetic problem, row i sampled with the seeded Gumbel-max sampler at sample index i (group
g holds the g-th problem's samples), rewards from the task's verifier and group advantages from
the shared `group_advantages`. Proofs are left empty: nobody validates these rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from proofpool.model.tokenizer import EOS_ID, PAD_ID
from proofpool.rl import group_advantages
from proofpool.rollout import RolloutSample
from proofpool.sampling import sample_tokens
from proofpool.tasks.arithmetic import ANSWER_MAX_TOKENS, Problem, reward

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def _next_logits(model: PreTrainedModel, sequences: Sequence[list[int]]) -> torch.Tensor:
    """float32 [n, vocab]: the logits after the last token of each sequence (right-padded batch).

    No KV cache: arithmetic sequences are at most ~11 tokens, so recomputing the prefix at every
    step costs less than managing a cache for rows of different lengths.
    """
    lengths = torch.tensor([len(s) for s in sequences])
    input_ids = torch.full((len(sequences), int(lengths.max())), PAD_ID, dtype=torch.long)
    for i, seq in enumerate(sequences):
        input_ids[i, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    attention_mask = (torch.arange(input_ids.shape[1])[None, :] < lengths[:, None]).long()
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits  # [n, len, vocab]
    return logits[torch.arange(len(sequences)), lengths - 1].float()


def generate_completions(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    *,
    sampling_seed: int,
    temperature: float = 1.0,
    max_tokens: int = ANSWER_MAX_TOKENS,
) -> list[list[int]]:
    """Completion tokens of each prompt (prompt i sampled with sample index i), ending with EOS
    unless `max_tokens` was reached first. Temperature 0 is greedy decoding."""
    completions: list[list[int]] = [[] for _ in prompts]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for position in range(max_tokens):
                active = [i for i, c in enumerate(completions) if not c or c[-1] != EOS_ID]
                if not active:
                    break
                logits = _next_logits(model, [[*prompts[i], *completions[i]] for i in active])
                where = torch.tensor([position])
                for k, i in enumerate(active):
                    token = sample_tokens(logits[k : k + 1], temperature, sampling_seed, i, where)
                    completions[i].append(int(token[0]))
    finally:
        model.train(was_training)
    return completions


def generate_rollouts(
    model: PreTrainedModel,
    problems: Sequence[Problem],
    *,
    group_size: int,
    sampling_seed: int,
    temperature: float = 1.0,
    max_tokens: int = ANSWER_MAX_TOKENS,
    model_version: int = 0,
) -> list[RolloutSample]:
    """`group_size` scored samples of each problem as rollout rows (group g = problem g), no proofs."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    problem_of_row = [p for p in problems for _ in range(group_size)]
    group_of_row = [g for g in range(len(problems)) for _ in range(group_size)]
    prompts = [p.prompt_tokens() for p in problem_of_row]
    completions = generate_completions(
        model, prompts, sampling_seed=sampling_seed, temperature=temperature, max_tokens=max_tokens
    )
    rewards = [reward(p, c) for p, c in zip(problem_of_row, completions, strict=True)]
    advantages = group_advantages(rewards, group_of_row)
    return [
        RolloutSample(
            problem_id=problem.problem_id,
            group_id=group,
            prompt_tokens=tuple(prompt),
            completion_tokens=tuple(completion),
            reward=r,
            advantage=a,
            sampling_seed=sampling_seed,
            temperature=temperature,
            model_version=model_version,
            proofs=b"",
        )
        for problem, group, prompt, completion, r, a in zip(
            problem_of_row, group_of_row, prompts, completions, rewards, advantages, strict=True
        )
    ]
