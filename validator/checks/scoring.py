"""Checks 6-8: what the file says about its samples' value, recomputed from the samples alone.

Rewards come from the pool's task set (`Taskset.score`, what workers
call), advantages from `proofpool.core.rl.advantages.group_advantages` over the recomputed rewards, and
work units are the completion tokens. The trainer learns from the prompt, the completion and the
advantage, so the checks also tie each row's prompt to its problem id and each group to one
problem: otherwise a correct answer could be filed under another problem, or groups mixed, to
feed the trainer wrong advantages with every recomputed number matching.

A task set whose scores depend on the machine (`reproducible_scores` False, e.g. the `code`
environment: a program near its CPU limit passes on one machine and times out on another) is not
held to the validator's rewards: the file's advantages must still be its own claimed rewards'
(`group_advantages`), so the file is self-consistent, but no reward is compared and no one is
slashed over one. The validator's own judgement of every row (`judge_rows`) is what the trainer
trains on instead: the pipeline stores it beside the accepted file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

import numpy as np
from proofpool.validator.checks.facts import SubmissionFacts
from proofpool.validator.checks.verdict import Verdict, quote, reject

from proofpool.core.environment import InvalidProblemId, Score, Taskset
from proofpool.core.rl.advantages import group_advantages
from proofpool.core.rollout import RolloutSample

ADVANTAGE_TOLERANCE: Final = 1e-5
"""Absolute, in reward units. `group_advantages` is deterministic in float32, so an honest file
matches exactly; the tolerance only spares a writer that sums a group in another order."""


@runtime_checkable
class JudgingTaskset(Taskset, Protocol):
    """A task set that gives a completion's full judgement (`proofpool.envs.TokenizedTaskset`)."""

    def judge(self, problem_id: str, completion_tokens: Sequence[int]) -> Score: ...


def reproducible_scores(taskset: Taskset) -> bool:
    """Whether every machine scores the task set's completions alike (the optional attribute
    `reproducible_scores`; True when absent, as for the arithmetic task set and `NO_TASKS`)."""
    return bool(getattr(taskset, "reproducible_scores", True))


@dataclass(frozen=True)
class JudgedRows:
    """A validator's judgement of every row of a file, in row order."""

    judgements: tuple[Score, ...]
    disagreements: int
    """Rows whose claimed reward is not the validator's (compared as float32)."""
    inconclusive: int
    """Rows judged `inconclusive`: left out of training."""

    def evidence(self) -> dict[str, int]:
        """The counts a verdict's evidence records."""
        return {
            "judged_rows": len(self.judgements),
            "reward_disagreements": self.disagreements,
            "inconclusive_rows": self.inconclusive,
        }


def judge_rows(samples: Sequence[RolloutSample], taskset: JudgingTaskset) -> JudgedRows:
    """The task set's judgement of each row, and how many disagree with the file or are inconclusive.

    Raises `InvalidProblemId` for a foreign problem id: call it on files `check_scoring` passed.
    """
    judgements = tuple(taskset.judge(s.problem_id, s.completion_tokens) for s in samples)
    pairs = zip(samples, judgements, strict=True)
    disagreements = sum(np.float32(s.reward) != np.float32(j.reward) for s, j in pairs)
    inconclusive = sum(j.status == "inconclusive" for j in judgements)
    return JudgedRows(judgements, int(disagreements), inconclusive)


def check_scoring(samples: Sequence[RolloutSample], sub: SubmissionFacts, taskset: Taskset) -> Verdict | None:
    """Problem ids, prompts, rewards, groups, advantages and work units, or the first rejection.

    Reasons, in order: `bad_problem_id`, `prompt_mismatch` (prompt tokens are not the problem's
    prompt), `reward_mismatch` (compared as float32), `group_mismatch` (a group spans problems),
    `advantage_mismatch` (beyond ADVANTAGE_TOLERANCE), `work_units_mismatch`.

    For a task set without `reproducible_scores` there is no `reward_mismatch`: advantages are
    checked against the file's claimed rewards, and the rows are judged apart (`judge_rows`).
    """
    rows = len(samples)
    prompts: dict[str, tuple[int, ...]] = {}
    for row, s in enumerate(samples):
        if s.problem_id in prompts:
            continue
        try:
            prompts[s.problem_id] = tuple(taskset.prompt_tokens(s.problem_id))
        except InvalidProblemId:
            return reject("bad_problem_id", rows, row=row, problem_id=quote(s.problem_id))
    for row, s in enumerate(samples):
        expected_prompt = prompts[s.problem_id]
        if s.prompt_tokens != expected_prompt:
            return reject(
                "prompt_mismatch",
                rows,
                row=row,
                problem_id=s.problem_id,
                prompt_tokens=list(s.prompt_tokens),
                expected=list(expected_prompt),
            )
    if reproducible_scores(taskset):
        rewards = [taskset.score(s.problem_id, s.completion_tokens) for s in samples]
        for row, (s, expected) in enumerate(zip(samples, rewards, strict=True)):
            if np.float32(s.reward) != np.float32(expected):
                evidence = {"row": row, "problem_id": s.problem_id, "claimed": s.reward, "expected": expected}
                return reject("reward_mismatch", rows, **evidence)
    else:
        rewards = [s.reward for s in samples]  # the file's own: it must be consistent with them
    first_of_group: dict[int, int] = {}
    for row, s in enumerate(samples):
        first = first_of_group.setdefault(s.group_id, row)
        if samples[first].problem_id != s.problem_id:
            return reject(
                "group_mismatch",
                rows,
                row=row,
                group_id=s.group_id,
                problem_id=s.problem_id,
                group_problem_id=samples[first].problem_id,
            )
    advantages = group_advantages(rewards, [s.group_id for s in samples])
    for row, (s, expected) in enumerate(zip(samples, advantages, strict=True)):
        if not abs(s.advantage - expected) <= ADVANTAGE_TOLERANCE:  # `not <=` so NaN fails too
            return reject(
                "advantage_mismatch",
                rows,
                row=row,
                group_id=s.group_id,
                claimed=s.advantage,
                expected=expected,
                tolerance=ADVANTAGE_TOLERANCE,
            )
    counted = sum(len(s.completion_tokens) for s in samples)
    if sub.work_units != counted:
        return reject("work_units_mismatch", rows, claimed=sub.work_units, counted=counted)
    return None
