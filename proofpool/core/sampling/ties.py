"""Can chance explain a file's tolerated ties? The tie-steering test.

The sampling check tolerates a committed token that is not the validator's seeded argmax when its
perturbed score is within the tie tolerance of the best (`verify`): two engines round differently,
so an honest engine may pick either token of a near-tie. That leaves a choice to a cheater: among
near-tied tokens, commit the one that makes the answer right. Each such token passes, but an
honest engine's flips are rare and fall where the gap is tiny, while a steering node flips at
whatever gap the tolerance allows.

Honest-noise model: at a near-tie position an honest engine commits a token j other than the
validator's argmax, whose perturbed score trails the best by d, with probability at most
p(d) = 1/2 exp(-d / b) (`SamplingCheck.flip_probs`, summed over such j, capped at 1). At d = 0 that
is a coin flip, the most any symmetric engine noise can do; b is `DEFAULT_TIE_NOISE_SCALE`, set
from honest files at about 2.5x the maximum-likelihood b they show (bench/detection.py,
docs/verifiable-inference.md "File-level tests").

The test is a likelihood ratio against steering. Under the alternative "the node also steers a
share r of near-ties its way", a position flips with chance p_i + r (1 - p_i); the ratio of the
observed flips' likelihoods is

    E(r) = prod over flipped positions (p_i + r (1 - p_i)) / p_i  x  prod over the others (1 - r).

If the honest engine flips position i with chance q_i <= p_i, independently, each factor has mean
at most 1 (the mean is increasing in q_i and exactly 1 at q_i = p_i), so E(r), and its average E over
a fixed grid of r, has mean at most 1, and by Markov's inequality P(E >= 1 / alpha) <= alpha. The
file is rejected when E >= 1 / `DEFAULT_TIE_ALPHA`, i.e. p = 1 / E < alpha: a false-positive rate of
at most alpha per file whenever the noise model holds, with no approximation in the bound. A flip at
a gap honest noise does not reach (p_i small) multiplies E by about r / p_i, while every near-tie
that did not flip divides it by 1 / (1 - r), so a few flips at clear gaps stand out among many
coin-flip ties, and many honest near-ties without flips count against steering.

E is an e-value: the e-values of a node's successive files multiply to a test of the node (Ville's
inequality bounds the chance that the running product ever exceeds 1 / alpha), which is how a
cheater that steers too few tokens per file to be caught in one can still be caught in a few
(`TieTest.log_e_value`; not yet kept per node).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from proofpool.core.sampling.verify import SamplingCheck

DEFAULT_TIE_ALPHA: Final = 1e-6
"""Largest honest false-positive rate per file. At 1e-6 an honest node submitting a file a minute is
wrongly rejected about once in two years, if the noise model holds; it is an upper bound, so less
often."""

STEERING_RATES: Final = tuple(2.0**-k for k in range(1, 9))
"""The grid of alternatives r (1/2 .. 1/256 of near-ties steered), averaged with equal weights: it
costs log(8) = 2.1 nats against knowing r, and needs no tuning to the cheater."""


@dataclass(frozen=True)
class TieTest:
    """The tie-steering test over the checked rows of one file."""

    near_ties: int
    """Near-tie positions: a token other than the argmax scored within the tolerance of the best."""
    flips: int
    """Of those, positions whose committed token was not the validator's argmax (tolerated ties)."""
    expected_flips: float
    """Sum of the honest flip probabilities over the near-tie positions (the model's bound)."""
    log_e_value: float
    """Natural log of the likelihood ratio E against steering (0 without near-ties)."""
    p_value: float
    """min(1, 1 / E): an upper bound on the chance an honest file scores E or more."""
    alpha: float = DEFAULT_TIE_ALPHA

    @property
    def rejected(self) -> bool:
        """Chance does not explain the flips: E >= 1 / alpha."""
        return self.p_value < self.alpha


def tie_test(checks: Iterable[SamplingCheck], alpha: float = DEFAULT_TIE_ALPHA) -> TieTest:
    """Pool the near-tie positions of `checks` (the checked rows of one file) and test their flips."""
    probs: list[float] = []
    flipped: list[bool] = []
    for check in checks:
        probs.extend(check.flip_probs)
        flipped.extend(check.flipped)
    p = np.clip(np.asarray(probs, dtype=np.float64), 0.0, 1.0)
    hit = np.asarray(flipped, dtype=bool)
    log_e = flip_log_e_value(p, hit)
    return TieTest(
        near_ties=int(p.size),
        flips=int(hit.sum()),
        expected_flips=float(p.sum()),
        log_e_value=log_e,
        p_value=float(math.exp(-log_e)) if log_e > 0 else 1.0,
        alpha=alpha,
    )


def flip_log_e_value(probs: npt.NDArray[np.float64], flipped: npt.NDArray[np.bool_]) -> float:
    """log E, E = the average over `STEERING_RATES` of prod_i LR_i(r): LR_i = (p_i + r (1 - p_i)) / p_i
    where position i flipped, 1 - r where it did not (p_i = `probs`). +inf for a flip at p_i = 0,
    which the model calls impossible (only a bug in the caller gets there: such a token is not a
    near-tie)."""
    p = np.clip(np.asarray(probs, dtype=np.float64), 0.0, 1.0)
    hit = np.asarray(flipped, dtype=bool)
    if p.shape != hit.shape:
        raise ValueError(f"{p.size} probabilities but {hit.size} flip indicators")
    if (hit & (p == 0)).any():
        return math.inf
    r = np.asarray(STEERING_RATES)[:, None]
    with np.errstate(divide="ignore"):
        flip_terms = np.log(p + r * (1 - p)) - np.log(np.where(p > 0, p, 1.0))
    per_rate = np.where(hit, flip_terms, np.log1p(-r)).sum(axis=1)
    return float(np.logaddexp.reduce(per_rate) - math.log(len(STEERING_RATES)))
