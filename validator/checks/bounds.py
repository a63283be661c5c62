"""Check 2b: every row's values are within the pool's bounds.

These bounds are what makes the expensive checks safe to run: the prefill indexes the embedding
table with the token ids and needs a non-empty prompt, the sampling check divides by the
temperature, and the model serves only so many positions. Rows are scanned in order and the first
offending row is reported, rule by rule in the order below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from proofpool.rollout import RolloutSample
from validator.checks.facts import PoolRules, SubmissionFacts
from validator.checks.verdict import Verdict, reject

_COLUMNS = ("prompt_tokens", "completion_tokens")


def check_bounds(samples: Sequence[RolloutSample], sub: SubmissionFacts, rules: PoolRules) -> Verdict | None:
    """Token ids, lengths, temperatures and model versions of every row, or the first rejection.

    Reasons: `token_out_of_range` (an id outside 0..vocab_size-1), `length_out_of_range` (prompt of
    1..max_prompt_tokens, completion of 1..max_completion_tokens tokens), `temperature_out_of_range`
    (not finite, or outside min_temperature..max_temperature), `model_version_mismatch` (a row's
    version differs from the one submitted on-chain).
    """
    rows = len(samples)
    for row, s in enumerate(samples):
        for column in _COLUMNS:
            tokens: tuple[int, ...] = getattr(s, column)
            if tokens and not (min(tokens) >= 0 and max(tokens) < rules.vocab_size):
                bad = next(t for t in tokens if not 0 <= t < rules.vocab_size)
                return reject(
                    "token_out_of_range", rows, row=row, column=column, token=bad, vocab_size=rules.vocab_size
                )
    limits = {"prompt_tokens": rules.max_prompt_tokens, "completion_tokens": rules.max_completion_tokens}
    for row, s in enumerate(samples):
        for column, limit in limits.items():
            length = len(getattr(s, column))
            if not 1 <= length <= limit:
                return reject("length_out_of_range", rows, row=row, column=column, length=length, min=1, max=limit)
    for row, s in enumerate(samples):
        t = s.temperature
        if not (math.isfinite(t) and rules.min_temperature <= t <= rules.max_temperature):
            return reject(
                "temperature_out_of_range",
                rows,
                row=row,
                temperature=t if math.isfinite(t) else str(t),
                min=rules.min_temperature,
                max=rules.max_temperature,
            )
    for row, s in enumerate(samples):
        if s.model_version != sub.model_version:
            return reject("model_version_mismatch", rows, row=row, file=s.model_version, submission=sub.model_version)
    return None
