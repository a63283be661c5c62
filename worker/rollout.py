"""One assignment to one rollout file: requests for the engine, then rows, then Parquet bytes.

The sample index of row i is i: the validator replays the seeded sampler with the row index, so
the request order here is the row order of the file. Group g holds `group_size` samples of the
g-th problem of the assignment, which is how GRPO advantages are grouped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from proofpool.worker.engine import Generation, GenerationRequest, InferenceEngine
from proofpool.worker.sampler import SamplerSettings

from proofpool.core.environment import Taskset
from proofpool.core.rollout import RolloutFileMeta, RolloutSample, rollouts_bytes
from proofpool.inference.rollouts import CompletedSample, to_rollout_samples


@dataclass(frozen=True)
class BatchPlan:
    """What to generate: the requests in row order and, per row, its problem and group."""

    requests: tuple[GenerationRequest, ...]
    problem_ids: tuple[str, ...]
    group_ids: tuple[int, ...]


@dataclass(frozen=True)
class RolloutFile:
    """A finished rollout file, ready to upload and submit."""

    data: bytes
    sha256: bytes
    work_units: int
    """Completion tokens of all rows (see `work_units`)."""
    samples: int


def plan_batch(
    taskset: Taskset,
    task_ids: Sequence[str],
    *,
    group_size: int,
    sampling_seed: int,
    temperature: float,
    max_tokens: int,
    stop_ids: frozenset[int],
) -> BatchPlan:
    """`group_size` seeded samples of each problem (prompted as the pool's task set builds it), row i
    with sample index i."""
    requests, problem_ids, group_ids = [], [], []
    for group, task_id in enumerate(task_ids):
        prompt = taskset.prompt_tokens(task_id)
        for _ in range(group_size):
            index = len(requests)
            settings = SamplerSettings(sampling_seed, index, temperature)
            requests.append(GenerationRequest(prompt, settings, max_tokens, stop_ids))
            problem_ids.append(task_id)
            group_ids.append(group)
    return BatchPlan(tuple(requests), tuple(problem_ids), tuple(group_ids))


def rollout_samples(
    taskset: Taskset,
    plan: BatchPlan,
    generations: Sequence[Generation],
    *,
    sampling_seed: int,
    temperature: float,
    model_version: int,
) -> list[RolloutSample]:
    """Rows with proofs, rewards (the task set's scores) and group advantages for the generations of
    `plan` (same order)."""
    completed = [
        CompletedSample(pid, gid, g.request.prompt_tokens, g.completion_tokens, g.hidden_states)
        for g, pid, gid in zip(generations, plan.problem_ids, plan.group_ids, strict=True)
    ]
    return to_rollout_samples(
        taskset, completed, sampling_seed=sampling_seed, temperature=temperature, model_version=model_version
    )


def work_units(samples: Sequence[RolloutSample]) -> int:
    """The work a file claims on-chain: its completion tokens, which validators count again."""
    return sum(len(s.completion_tokens) for s in samples)


def generate_rollout_file(
    engine: InferenceEngine,
    taskset: Taskset,
    meta: RolloutFileMeta,
    task_ids: Sequence[str],
    *,
    group_size: int,
    sampling_seed: int,
    temperature: float,
    max_tokens: int,
    stop_ids: frozenset[int],
    model_version: int,
) -> RolloutFile:
    """Generate, prove, score and serialize one assignment's batch (ending at the pool's `stop_ids`)."""
    plan = plan_batch(
        taskset,
        task_ids,
        group_size=group_size,
        sampling_seed=sampling_seed,
        temperature=temperature,
        max_tokens=max_tokens,
        stop_ids=stop_ids,
    )
    generations = engine.generate(plan.requests)
    samples = rollout_samples(
        taskset, plan, generations, sampling_seed=sampling_seed, temperature=temperature, model_version=model_version
    )
    data = rollouts_bytes(meta, samples)
    return RolloutFile(data, hashlib.sha256(data).digest(), work_units(samples), len(samples))
