"""The validator's sampling check: were the committed tokens drawn by the seeded sampler?

TOPLOC proves the activations, not the choice of tokens: a cheater can generate with a cheap
model (or edit a completion) and still prove with the right one. The validator recomputes the
logits in its prefill, rebuilds the perturbed scores from the sample's seed, and checks that each
committed token is their argmax. Two engines never produce bit-identical logits, so a token that
is not the argmax still counts when its score is within `tie_tolerance` of the best one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import torch

from proofpool.sampling.gumbel import score_blocks

DEFAULT_TIE_TOLERANCE: Final = 0.25
"""In logit units (divided by the temperature before comparing perturbed scores, since engine
noise in the logits is scaled the same way). bf16 logits of magnitude 16..32 have an ulp of
0.125, so two engines can honestly disagree by that much; 0.25 covers it while an edited or
cheap-model token usually trails the winner by whole units."""
DEFAULT_MIN_FRACTION: Final = 1.0
"""Every token must be reproduced: the tolerance already absorbs engine numerics, and a single
edited token (e.g. the final answer) is exactly the cheat that earns reward."""

SamplingReason = Literal["length_exceeded", "sampling_mismatch", "eos_mismatch"]
"""Why `sampling_verdict` rejected a sample."""


@dataclass(frozen=True)
class SamplingCheck:
    """How far one completion is reproduced by the seeded sampler on the verifier's logits."""

    n_tokens: int
    reproduced: int
    """Tokens that are the argmax of the perturbed scores, or within the tie tolerance of it."""
    tolerated_ties: int
    """Of `reproduced`, those that were not the exact argmax (numeric near-ties)."""
    first_mismatch: int | None
    """Position of the first token beyond the tolerance, None if there is none."""
    eos_ok: bool
    """EOS appears only as the last token, and ends every completion shorter than max_tokens."""
    length_ok: bool
    """The completion has at most max_tokens tokens."""
    max_gap: float
    """Largest (best score - committed score) seen, in perturbed-score units (0 when all exact)."""

    @property
    def fraction_reproduced(self) -> float:
        """Reproduced tokens over all tokens; 1.0 for an empty completion."""
        return self.reproduced / self.n_tokens if self.n_tokens else 1.0


def verify(
    logits: torch.Tensor,
    completion_tokens: Sequence[int],
    temperature: float,
    seed: int,
    sample_index: int,
    eos_token_id: int,
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> SamplingCheck:
    """Check a completion against the verifier's logits [n_completion, vocab].

    `logits[i]` are the logits that produced completion token i. Token ids outside the vocabulary
    count as not reproduced (they come from an untrusted file); a row count that differs from the
    completion is the verifier's own bug and raises ValueError.
    """
    tokens = [int(t) for t in completion_tokens]
    n, vocab = logits.shape if logits.dim() == 2 else (-1, -1)
    if n != len(tokens):
        raise ValueError(f"logits shape {tuple(logits.shape)} does not match {len(tokens)} completion tokens")
    in_vocab = np.array([0 <= t < vocab for t in tokens], dtype=bool)
    safe = np.array([t if 0 <= t < vocab else 0 for t in tokens], dtype=np.int64)  # hostile ids: any int
    exact = np.zeros(n, dtype=bool)
    gaps = np.full(n, np.inf, dtype=np.float32)
    positions = torch.arange(n, dtype=torch.int64)
    for start, block in score_blocks(logits, temperature, seed, sample_index, positions):
        rows = slice(start, start + block.shape[0])
        mine = block[np.arange(block.shape[0]), safe[rows]]
        exact[rows] = block.argmax(axis=1) == safe[rows]
        gaps[rows] = block.max(axis=1) - mine
    tolerance = tie_tolerance / temperature if temperature > 0 else tie_tolerance
    tied = ~exact & (gaps <= tolerance) & in_vocab
    ok = (exact | tied) & in_vocab
    gaps[~in_vocab] = np.inf
    bad = np.flatnonzero(~ok)
    return SamplingCheck(
        n_tokens=n,
        reproduced=int(ok.sum()),
        tolerated_ties=int(tied.sum()),
        first_mismatch=int(bad[0]) if bad.size else None,
        eos_ok=_eos_ok(tokens, eos_token_id, max_tokens),
        length_ok=n <= max_tokens,
        max_gap=float(gaps.max()) if n else 0.0,
    )


def _eos_ok(tokens: list[int], eos_token_id: int, max_tokens: int) -> bool:
    """EOS only at the end, and required there unless the completion hit max_tokens."""
    if eos_token_id in tokens[:-1]:
        return False
    ended = bool(tokens) and tokens[-1] == eos_token_id
    return ended or len(tokens) >= max_tokens


def sampling_verdict(
    check: SamplingCheck, min_fraction: float = DEFAULT_MIN_FRACTION
) -> tuple[bool, SamplingReason | None]:
    """Accept or reject one sample; the reason code names the first failing rule:
    `length_exceeded`, `sampling_mismatch` (reproduced fraction below `min_fraction`),
    `eos_mismatch`."""
    if not check.length_ok:
        return False, "length_exceeded"
    if check.fraction_reproduced < min_fraction:
        return False, "sampling_mismatch"
    if not check.eos_ok:
        return False, "eos_mismatch"
    return True, None
