"""Check 2b: every row's values are within the pool's bounds and fixed by its assignment.

These bounds are what makes the expensive checks safe to run: the prefill indexes the embedding
table with the token ids and needs a non-empty prompt, the sampling check divides by the
temperature, and the model serves only so many positions. They also take from the node every
choice the pool did not leave to it, on every row, whether or not the file is recomputed: the
temperature is the pool's, a completion ends where an honest engine stops (`eos_placement_ok`),
and each row carries exactly the proofs its completion length calls for. Rows are scanned in order
and the first offending row is reported, rule by rule in the order below.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.verdict import Verdict, reject

from proofpool.core.rollout import RolloutSample
from proofpool.core.sampling.eos import eos_placement_ok, first_stop
from proofpool.core.toploc.proof import DEFAULT_TOPK, expected_proof_lengths

_COLUMNS = ("prompt_tokens", "completion_tokens")


def check_bounds(samples: Sequence[RolloutSample], sub: SubmissionFacts, rules: PoolRules) -> Verdict | None:
    """Token ids, lengths, temperatures, model versions, EOS placement and proof sizes of every
    row, or the first rejection.

    Reasons: `token_out_of_range` (an id outside 0..vocab_size-1), `length_out_of_range` (prompt of
    1..max_prompt_tokens, completion of 1..max_completion_tokens tokens), `temperature_mismatch`
    (not the pool's temperature, compared as float32), `model_version_mismatch` (a row's version
    differs from the one submitted on-chain), `eos_mismatch` (a stop id before the last token, or a
    completion shorter than the budget that does not end with EOS), `proof_count_mismatch` (the
    proof blob is not exactly one proof per 32-token chunk of the completion).
    """
    return (
        _token_ranges(samples, rules)
        or _lengths(samples, rules)
        or _temperatures(samples, rules)
        or _versions(samples, sub)
        or _eos_placement(samples, rules)
        or _proof_sizes(samples, rules)
    )


def _token_ranges(samples: Sequence[RolloutSample], rules: PoolRules) -> Verdict | None:
    rows = len(samples)
    for row, s in enumerate(samples):
        for column in _COLUMNS:
            tokens: tuple[int, ...] = getattr(s, column)
            if tokens and not (min(tokens) >= 0 and max(tokens) < rules.vocab_size):
                bad = next(t for t in tokens if not 0 <= t < rules.vocab_size)
                return reject(
                    "token_out_of_range", rows, row=row, column=column, token=bad, vocab_size=rules.vocab_size
                )
    return None


def _lengths(samples: Sequence[RolloutSample], rules: PoolRules) -> Verdict | None:
    limits = {"prompt_tokens": rules.max_prompt_tokens, "completion_tokens": rules.max_completion_tokens}
    for row, s in enumerate(samples):
        for column, limit in limits.items():
            length = len(getattr(s, column))
            if not 1 <= length <= limit:
                return reject(
                    "length_out_of_range", len(samples), row=row, column=column, length=length, min=1, max=limit
                )
    return None


def _temperatures(samples: Sequence[RolloutSample], rules: PoolRules) -> Verdict | None:
    """Every row at the pool's temperature: a colder row raises rewards, a hotter one lengthens
    completions, and either is made of genuine tokens the sampling check would reproduce."""
    pool = np.float32(rules.temperature)
    for row, s in enumerate(samples):
        if np.float32(s.temperature) != pool:  # NaN differs too
            t = s.temperature
            return reject(
                "temperature_mismatch",
                len(samples),
                row=row,
                temperature=t if math.isfinite(t) else str(t),
                pool_temperature=rules.temperature,
            )
    return None


def _versions(samples: Sequence[RolloutSample], sub: SubmissionFacts) -> Verdict | None:
    for row, s in enumerate(samples):
        if s.model_version != sub.model_version:
            return reject(
                "model_version_mismatch", len(samples), row=row, file=s.model_version, submission=sub.model_version
            )
    return None


def _eos_placement(samples: Sequence[RolloutSample], rules: PoolRules) -> Verdict | None:
    for row, s in enumerate(samples):
        tokens = s.completion_tokens
        if not eos_placement_ok(tokens, rules.stop_token_ids, rules.max_completion_tokens):
            first_eos = first_stop(tokens, rules.stop_token_ids)
            return reject(
                "eos_mismatch",
                len(samples),
                row=row,
                length=len(tokens),
                first_eos=first_eos,
                max_tokens=rules.max_completion_tokens,
            )
    return None


def _proof_sizes(samples: Sequence[RolloutSample], rules: PoolRules) -> Verdict | None:
    """The blob's length is fixed by the completion's length (one proof per chunk), so a row with
    proofs missing, extra or cut short is refused here, before any recomputation is drawn."""
    hidden = rules.hidden_size or DEFAULT_TOPK  # >= top-k: every proof covers the full top-k
    for row, s in enumerate(samples):
        expected = sum(expected_proof_lengths(len(s.completion_tokens), hidden))
        if len(s.proofs) != expected:
            return reject(
                "proof_count_mismatch", len(samples), row=row, proof_bytes=len(s.proofs), expected_bytes=expected
            )
    return None
