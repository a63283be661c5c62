"""The validator's sampling check: were the committed tokens drawn by the seeded sampler?

TOPLOC proves the activations, not the choice of tokens: a cheater can generate with a cheap
model (or edit a completion) and still prove with the right one. The validator recomputes the
logits in its prefill, rebuilds the perturbed scores from the sample's seed, and checks that each
committed token is their argmax. Two engines never produce bit-identical logits, so a token that
is not the argmax still counts when its score is within `tie_tolerance` of the best one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt
import torch

from proofpool.core.sampling.eos import eos_placement_ok
from proofpool.core.sampling.gumbel import batch_score_blocks

DEFAULT_TIE_TOLERANCE: Final = 1.0
"""In logit units (divided by the temperature before comparing perturbed scores, since engine
noise in the logits is scaled the same way). bf16 logits of magnitude 16..32 have an ulp of
0.125, and vLLM's bf16 kernels and the validator's recompute round differently at every layer, so
the disagreement grows with depth: on the devnet's 4-layer model (272 honest files, 61,048
tokens) the worst committed token trailed the recomputed best by 0.258, and by 0.87 at one
ill-conditioned position of a trained checkpoint (`tests/data/ill_conditioned`); on SmolLM2-135M (30
layers; 1,104 honest rows, 64,872 tokens, at temperature 0.7 and 1: `bench/real_model.py` and
`make demo-real`) by 0.59, a row that at a tolerance of 0.5 needed the float32 recheck. 1.0 leaves
1.7 times the worst gap seen on the real model, while an edited, cheap-model or wrong-temperature
token trails the winner by whole units (2.4 to 30 score units in the same runs)."""
DEFAULT_TIE_NOISE_SCALE: Final = 0.0625
"""b, in logit units: the honest-noise model of the tie-steering test (`proofpool.core.sampling.ties`).
An honest engine commits a token j other than the validator's argmax, whose perturbed score trails
the best by d, with probability at most 1/2 exp(-d / b) (Laplace noise on the score difference: a
true tie, d = 0, goes either way; the chance falls off with d). Honest devnet files (vLLM bf16
worker) fit b = 0.02-0.03 by maximum likelihood with bf16 and fp32 validators (bench/detection.py),
and no honest flip was further than 0.063 behind; 0.0625 leaves 2-3x. Like the tolerance, it
follows the engine's rounding: a pool whose logits are larger (bf16's ulp grows with magnitude) or
whose hardware differs must re-measure it."""
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
    """A stop id appears only as the last token, and ends every completion shorter than max_tokens."""
    length_ok: bool
    """The completion has at most max_tokens tokens."""
    max_gap: float
    """Largest (best score - committed score) seen, in perturbed-score units (0 when all exact)."""
    flip_probs: tuple[float, ...] = ()
    """One entry per near-tie position (a token other than the argmax scores within the tolerance
    of the best): the chance, under the honest-noise model, that an honest engine commits a token
    other than the validator's argmax there (`DEFAULT_TIE_NOISE_SCALE`). `tolerated_ties` of these
    positions were such flips; `proofpool.core.sampling.ties` asks whether chance explains that many."""
    flipped: tuple[bool, ...] = ()
    """Per entry of `flip_probs`: whether the committed token there was not the validator's argmax
    (a tolerated tie); `sum(flipped) == tolerated_ties`."""

    @property
    def near_ties(self) -> int:
        """Positions where a token other than the argmax scores within the tolerance of the best."""
        return len(self.flip_probs)

    @property
    def fraction_reproduced(self) -> float:
        """Reproduced tokens over all tokens; 1.0 for an empty completion."""
        return self.reproduced / self.n_tokens if self.n_tokens else 1.0


@dataclass(frozen=True)
class SamplingInput:
    """One completion to check: the verifier's logits for it and the stream it claims to come from."""

    logits: torch.Tensor
    """[n, vocab]: row i are the verifier's logits that produced completion token i."""
    completion_tokens: Sequence[int]
    temperature: float
    seed: int
    sample_index: int
    """The row's index in its rollout file."""


def verify_batch(
    samples: Sequence[SamplingInput],
    stop_ids: Collection[int],
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
    tie_noise_scale: float = DEFAULT_TIE_NOISE_SCALE,
) -> list[SamplingCheck]:
    """`verify` for many completions at once: their rows are scored in one pass over one noise
    computation (`batch_score_blocks`), so the cost is per token, not per sample. Near-tie
    positions get their honest flip probability (`SamplingCheck.flip_probs`) in the same pass.

    Token ids outside the vocabulary count as not reproduced (they come from an untrusted file); a
    logits row count that differs from its completion is the verifier's own bug and raises ValueError.
    """
    tokens = [[int(t) for t in s.completion_tokens] for s in samples]
    for s, toks in zip(samples, tokens, strict=True):
        if s.logits.dim() != 2 or s.logits.shape[0] != len(toks):
            raise ValueError(f"logits shape {tuple(s.logits.shape)} does not match {len(toks)} completion tokens")
    counts = np.array([len(t) for t in tokens], dtype=np.int64)
    total = int(counts.sum())
    vocab = int(samples[0].logits.shape[1]) if samples else 0
    safe = np.array([t if 0 <= t < vocab else -1 for toks in tokens for t in toks], dtype=np.int64).reshape(total)
    in_vocab = safe >= 0
    safe[~in_vocab] = 0  # hostile ids: any in-vocabulary id, then counted as not reproduced
    exact = np.zeros(total, dtype=bool)
    gaps = np.full(total, np.inf, dtype=np.float32)
    flip = np.zeros(total, dtype=np.float64)
    # Both in perturbed-score units: engine noise in the logits is divided by T as they are.
    scale = np.array([s.temperature if s.temperature > 0 else 1.0 for s in samples], dtype=np.float64)
    # Compared in float32, as a Python-float tolerance against float32 gaps always was.
    row_tolerance = np.repeat((tie_tolerance / scale).astype(np.float32), counts)
    row_noise = np.repeat(tie_noise_scale / scale, counts)
    logits, temperatures = [s.logits for s in samples], [s.temperature for s in samples]
    streams = [s.seed for s in samples], [s.sample_index for s in samples]
    for start, block in batch_score_blocks(logits, temperatures, *streams):
        rows = slice(start, start + block.shape[0])
        mine = block[np.arange(block.shape[0]), safe[rows]]
        best = block.max(axis=1)
        exact[rows] = block.argmax(axis=1) == safe[rows]
        gaps[rows] = best - mine
        flip[rows] = _flip_probabilities(block, best, row_tolerance[rows], row_noise[rows])
    tied = ~exact & (gaps <= row_tolerance) & in_vocab
    near = flip > 0  # every tolerated tie is one: its committed token is a competitor within the tolerance
    ok = (exact | tied) & in_vocab
    gaps[~in_vocab] = np.inf
    ends = np.cumsum(counts)
    starts = ends - counts
    reproduced = _segment_sums(ok, ends)
    ties = _segment_sums(tied, ends)
    bad = np.flatnonzero(~ok)
    first_bad = bad[np.minimum(np.searchsorted(bad, starts), max(bad.size - 1, 0))] if bad.size else starts
    nonempty = np.flatnonzero(counts)
    max_gaps = np.zeros(len(samples), dtype=np.float32)
    if nonempty.size:
        max_gaps[nonempty] = np.maximum.reduceat(gaps, starts[nonempty])
    return [
        SamplingCheck(
            n_tokens=len(toks),
            reproduced=int(reproduced[i]),
            tolerated_ties=int(ties[i]),
            first_mismatch=int(first_bad[i] - starts[i]) if bad.size and starts[i] <= first_bad[i] < ends[i] else None,
            eos_ok=eos_placement_ok(toks, stop_ids, max_tokens),
            length_ok=len(toks) <= max_tokens,
            max_gap=float(max_gaps[i]),
            flip_probs=tuple(float(p) for p in flip[starts[i] : ends[i]][near[starts[i] : ends[i]]]),
            flipped=tuple(bool(t) for t in tied[starts[i] : ends[i]][near[starts[i] : ends[i]]]),
        )
        for i, toks in enumerate(tokens)
    ]


def _flip_probabilities(
    block: npt.NDArray[np.float32],
    best: npt.NDArray[np.float32],
    tolerance: npt.NDArray[np.float32],
    noise_scale: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]:
    """float64 [rows]: per row of perturbed scores, the honest chance of committing a token other
    than the argmax within the tolerance, sum over such tokens j of 1/2 exp(-d_j / b) (d_j: how far
    j trails the best), at most 1; 0 where no other token is within the tolerance.

    A union bound over the competitors, so k exactly tied tokens give (k - 1) / 2 >= (k - 1) / k,
    the chance of missing a uniform pick among them. Only tokens within the tolerance count: a
    flip to any other is a `sampling_mismatch`, not a tolerated tie."""
    behind = best[:, None] - block  # float32 [rows, vocab], >= 0
    row, col = np.nonzero(behind <= tolerance[:, None])  # includes each row's argmax (d = 0)
    terms = 0.5 * np.exp(-behind[row, col].astype(np.float64) / noise_scale[row])
    others = np.bincount(row, weights=terms, minlength=block.shape[0]) - 0.5  # the argmax's own 1/2
    return np.clip(others, 0.0, 1.0)


def verify(
    logits: torch.Tensor,
    completion_tokens: Sequence[int],
    temperature: float,
    seed: int,
    sample_index: int,
    stop_ids: Collection[int],
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
    tie_noise_scale: float = DEFAULT_TIE_NOISE_SCALE,
) -> SamplingCheck:
    """Check a completion against the verifier's logits [n_completion, vocab] (`verify_batch` for one).

    `logits[i]` are the logits that produced completion token i. Token ids outside the vocabulary
    count as not reproduced (they come from an untrusted file); a row count that differs from the
    completion is the verifier's own bug and raises ValueError.
    """
    sample = SamplingInput(logits, completion_tokens, temperature, seed, sample_index)
    return verify_batch([sample], stop_ids, max_tokens, tie_tolerance, tie_noise_scale)[0]


def _segment_sums(values: npt.NDArray[np.bool_], ends: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Per segment [ends[i-1], ends[i]) of a flat array: its number of True values."""
    totals = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return totals[ends] - totals[np.concatenate([[0], ends[:-1]])]


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
