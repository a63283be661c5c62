"""The devnet's verifiable task: two-number addition below 100, prompted as "a+b=".

Workers draw problems from a seeded generator, validators recompute each sample's reward from
its `problem_id` alone, so the id encodes the problem (`add-17-58`): it is stable across
machines, versions and generator seeds, and `problem_from_id` reads it back without a dataset.

`HELD_OUT_PROBLEMS` of the 10,000 sums are held out (`held_out_ids`): the ids that rank first by
sha256 (`proofpool.envs.tokenized.held_out_slice`, the rule of every task set), a pseudo-random
sample of the same uniform distribution. Assignments never hold one (`generate_problems` with
`exclude` draws again instead); the trainer measures its checkpoints on them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Container, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final

from proofpool.core.environment import InvalidProblemId
from proofpool_arithmetic.tokenizer import decode_tokens, encode_text

MAX_OPERAND: Final = 99
"""Operands are drawn from 0..MAX_OPERAND, so answers are at most 198 (three digits)."""
ANSWER_MAX_TOKENS: Final = 4
"""Enough tokens for the longest answer (3 digits) plus `<eos>`."""
MAX_PROMPT_TOKENS: Final = 32
"""The prompt bound validators enforce: room above the 7 tokens of the longest prompt
(`<bos>99+99=`), and with an 8-token completion well inside the model's 64 positions."""

HELD_OUT_PROBLEMS: Final = 512
"""Sums held out of every assignment for the trainer's evaluation: about 5% of the 10,000, leaving
9,488 to train on; greedy accuracy on all 512 has a standard error near 0.022."""

_ID_PATTERN: Final = re.compile(r"add-(0|[1-9]\d?)-(0|[1-9]\d?)")
"""Canonical ids only (no leading zeros), so one problem has exactly one id."""
_ANSWER_PATTERN: Final = re.compile(r"\s*(\d{1,6})\s*")


@dataclass(frozen=True)
class Problem:
    """One addition problem `a + b` with a, b in 0..MAX_OPERAND."""

    a: int
    b: int

    def __post_init__(self) -> None:
        if not (0 <= self.a <= MAX_OPERAND and 0 <= self.b <= MAX_OPERAND):
            raise InvalidProblemId(f"operands must be in 0..{MAX_OPERAND}, got {self.a} and {self.b}")

    @property
    def problem_id(self) -> str:
        """Stable id that also encodes the problem, e.g. `add-7-42`."""
        return f"add-{self.a}-{self.b}"

    @property
    def prompt(self) -> str:
        """What the model sees after `<bos>`: `"7+42="`."""
        return f"{self.a}+{self.b}="

    @property
    def answer(self) -> int:
        """The exact sum."""
        return self.a + self.b

    @property
    def target(self) -> str:
        """The completion text a perfect policy writes before `<eos>`."""
        return str(self.answer)

    def prompt_tokens(self) -> list[int]:
        """Token ids of the prompt, starting with `<bos>` as the model was trained."""
        return encode_text(self.prompt, add_bos=True)


def problem_from_id(problem_id: str) -> Problem:
    """The problem named by `problem_id`; raises `InvalidProblemId` for anything else."""
    match = _ID_PATTERN.fullmatch(problem_id)
    if match is None:
        raise InvalidProblemId(f"not an arithmetic problem id: {problem_id!r}")
    return Problem(int(match.group(1)), int(match.group(2)))


def generate_problems(seed: int, count: int, exclude: Container[str] = ()) -> list[Problem]:
    """`count` problems drawn uniformly (with replacement) by a generator seeded with `seed`,
    skipping any whose id is in `exclude` (the generator draws the next pair instead).

    A private `random.Random` keeps the draw independent of global state, so the same seed
    gives the same problems in the worker, the trainer and the tests. Skipping leaves a draw
    that meets no excluded problem as it was without `exclude`.
    """
    rng = random.Random(seed)
    problems: list[Problem] = []
    while len(problems) < count:
        problem = Problem(rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND))
        if problem.problem_id not in exclude:
            problems.append(problem)
    return problems


def all_problem_ids() -> list[str]:
    """The ids of every problem of the task, `add-0-0` .. `add-99-99`."""
    return [Problem(a, b).problem_id for a in range(MAX_OPERAND + 1) for b in range(MAX_OPERAND + 1)]


@cache
def held_out_ids() -> tuple[str, ...]:
    """The `HELD_OUT_PROBLEMS` held-out ids, in held-out order (computed once per process)."""
    from proofpool.envs.tokenized import held_out_slice

    return held_out_slice(all_problem_ids(), HELD_OUT_PROBLEMS)


@cache
def held_out_set() -> frozenset[str]:
    return frozenset(held_out_ids())


def parse_answer(completion: str | Sequence[int]) -> int | None:
    """The integer a completion answers, or None if it is not a bare number.

    Token ids are decoded up to the first `<eos>`; surrounding whitespace is tolerated, anything
    else (signs, a second number, trailing `+`) makes the answer unreadable, which scores 0.
    """
    text = completion if isinstance(completion, str) else decode_tokens(completion)
    match = _ANSWER_PATTERN.fullmatch(text)
    return int(match.group(1)) if match else None


def reward(problem: Problem | str, completion: str | Sequence[int]) -> float:
    """1.0 if the completion states the exact sum, else 0.0.

    `problem` may be a `Problem` or its id; `completion` the generated text or its token ids
    (specials ignored, cut at `<eos>`). A completion the parser cannot read is simply wrong.
    """
    if isinstance(problem, str):
        problem = problem_from_id(problem)
    return 1.0 if parse_answer(completion) == problem.answer else 0.0
