"""Seeded Gumbel-max sampling (worker) and its reproduction check (validator).

`verify_batch` checks many completions in one pass; `verify` is the same code for one.

See `gumbel` for the noise definition, a protocol constant shared by both sides.
"""

from proofpool.core.sampling.gumbel import gumbel_noise, sample_tokens, scores
from proofpool.core.sampling.verify import (
    DEFAULT_MIN_FRACTION,
    DEFAULT_TIE_TOLERANCE,
    SamplingCheck,
    SamplingInput,
    sampling_verdict,
    verify,
    verify_batch,
)

__all__ = [
    "DEFAULT_MIN_FRACTION",
    "DEFAULT_TIE_TOLERANCE",
    "SamplingCheck",
    "SamplingInput",
    "gumbel_noise",
    "sample_tokens",
    "sampling_verdict",
    "scores",
    "verify",
    "verify_batch",
]
