"""The devnet's environment: two-number addition ("a+b="), a 16-symbol tokenizer, a tiny Llama.

It serves pools whose `modelUri` starts with `devnet://` (entry point `devnet` of the group
`proofpool.environments`). Nothing can be downloaded on the devnet, so the base model is built
here: a seeded 4-layer Llama (`build`), warmed up on the task (`warmup`) and cached by a hash of
its settings (`cache`), the same directory on every machine. It is the fast default of the
devnet and the tests, and it reaches the market only through `proofpool.core.environment`, the
interface every environment implements.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from proofpool.core.environment import Progress, TokenLimits
from proofpool_arithmetic.task import (
    ANSWER_MAX_TOKENS,
    MAX_PROMPT_TOKENS,
    generate_problems,
    held_out_ids,
    held_out_set,
    problem_from_id,
    reward,
)
from proofpool_arithmetic.tokenizer import BOS_ID, EOS_ID, PAD_ID, VOCAB_SIZE, encode_text


class ArithmeticTaskset:
    """Addition problems below 100, named by ids that encode them (`add-17-58`); 512 of them held
    out of every draw (`proofpool_arithmetic.task.held_out_ids`)."""

    def draw(self, seed: int, count: int) -> list[str]:
        return [problem.problem_id for problem in generate_problems(seed, count, exclude=held_out_set())]

    def held_out(self, count: int) -> list[str]:
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        return list(held_out_ids()[:count])

    def prompt_tokens(self, problem_id: str) -> tuple[int, ...]:
        return tuple(problem_from_id(problem_id).prompt_tokens())

    def score(self, problem_id: str, completion_tokens: Sequence[int]) -> float:
        return reward(problem_id, completion_tokens)


class ArithmeticEnvironment:
    """The devnet environment: `proofpool.core.environment.Environment` for `devnet://` pools."""

    name: Final = "arithmetic"
    taskset: Final = ArithmeticTaskset()
    tokens: Final = TokenLimits(
        vocab_size=VOCAB_SIZE,
        stop_ids=frozenset({EOS_ID}),
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        max_prompt_tokens=MAX_PROMPT_TOKENS,
        max_completion_tokens=2 * ANSWER_MAX_TOKENS,
    )

    def base_model(self, model_uri: str, progress: Progress | None = None) -> Path:
        """The warmed devnet model (built once per machine and cached); the URI's path is a label."""
        from proofpool_arithmetic.cache import ensure_devnet_model

        return ensure_devnet_model(progress=progress)

    def reference_completion(self, problem_id: str) -> tuple[int, ...]:
        """The answer's digits then `<eos>`: what the devnet's cheat drills write (`edit-tokens`)."""
        return (*encode_text(problem_from_id(problem_id).target), EOS_ID)

    def variant_model(self, seed: int, progress: Progress | None = None) -> Path:
        """The devnet model from another init seed, warmed the same way (the `other-model` drill)."""
        from proofpool_arithmetic.build import ModelSpec
        from proofpool_arithmetic.cache import ensure_devnet_model

        return ensure_devnet_model(ModelSpec(seed=seed), progress=progress)


ENVIRONMENT: Final = ArithmeticEnvironment()
"""What the entry point names."""
