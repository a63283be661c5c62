"""The devnet's verifiable task: two-number addition below 100, prompted as "a+b=".

Workers draw problems from a seeded generator, validators recompute each sample's reward from
its `problem_id` alone, so the id encodes the problem (`add-17-58`): it is stable across
machines, versions and generator seeds, and `problem_from_id` reads it back without a dataset.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
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


def generate_problems(seed: int, count: int) -> list[Problem]:
    """`count` problems drawn uniformly (with replacement) by a generator seeded with `seed`.

    A private `random.Random` keeps the draw independent of global state, so the same seed
    gives the same problems in the worker, the trainer and the tests.
    """
    rng = random.Random(seed)
    return [Problem(rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)) for _ in range(count)]


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
