"""Seeded Gumbel-max sampling (worker) and its reproduction check (validator).

See `gumbel` for the noise definition, a protocol constant shared by both sides.
"""

from proofpool.sampling.gumbel import gumbel_noise, sample_tokens, scores
from proofpool.sampling.verify import (
    DEFAULT_MIN_FRACTION,
    DEFAULT_TIE_TOLERANCE,
    SamplingCheck,
    sampling_verdict,
    verify,
)

__all__ = [
    "DEFAULT_MIN_FRACTION",
    "DEFAULT_TIE_TOLERANCE",
    "SamplingCheck",
    "gumbel_noise",
    "sample_tokens",
    "sampling_verdict",
    "scores",
    "verify",
]
