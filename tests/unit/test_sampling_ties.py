"""The tie-steering test: honest near-ties pass, steered ones do not.

Synthetic logits stand in for a model: an honest engine samples with the seeded sampler from the
validator's logits plus its own rounding noise; a steering node commits, wherever it can, a token
within the tie tolerance of the best that is not the seeded argmax. The honest-noise bound
(`flip_log_e_value`, a likelihood ratio) is checked to have mean at most 1, exactly.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from proofpool.core.sampling import DEFAULT_TIE_TOLERANCE, SamplingInput, sample_tokens, scores, verify, verify_batch
from proofpool.core.sampling.ties import DEFAULT_TIE_ALPHA, flip_log_e_value, tie_test
from proofpool.core.sampling.verify import DEFAULT_TIE_NOISE_SCALE

VOCAB, EOS = 64, 63
ROWS, TOKENS = 64, 8


def _exact_mean_e(probs: np.ndarray, flip_chance: np.ndarray) -> float:
    """E[E] when position i flips with chance `flip_chance[i]`, by enumerating every flip pattern."""
    total = 0.0
    for pattern in itertools.product([False, True], repeat=probs.size):
        x = np.array(pattern)
        weight = float(np.prod(np.where(x, flip_chance, 1 - flip_chance)))
        total += weight * math.exp(flip_log_e_value(probs, x))
    return total


@pytest.mark.parametrize("seed", range(20))
def test_e_value_has_mean_at_most_one_for_an_honest_engine(seed: int) -> None:
    """Exactly 1 when flips follow the model's probabilities, below 1 when the engine flips less:
    Markov's inequality then bounds the false-positive rate by alpha."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 10))
    probs = 0.5 * rng.uniform(0, 1, n) ** rng.uniform(1, 4)
    assert _exact_mean_e(probs, probs) == pytest.approx(1.0, rel=1e-9)
    assert _exact_mean_e(probs, probs * rng.uniform(0, 1, n)) <= 1.0 + 1e-12


def test_false_positive_rate_is_bounded_by_alpha() -> None:
    """100,000 simulated honest files of 200 near-ties: rejections at alpha 1e-3 stay below 1e-3."""
    rng = np.random.default_rng(0)
    probs = 0.5 * np.exp(-rng.uniform(0, 0.5, 200) / DEFAULT_TIE_NOISE_SCALE)
    rejected = sum(
        flip_log_e_value(probs, rng.uniform(0, 1, probs.size) < probs) >= math.log(1e3) for _ in range(100_000)
    )
    assert rejected <= 100


def test_e_value_edges() -> None:
    probs = np.array([0.5, 0.25, 0.1])
    none = flip_log_e_value(probs, np.array([False, False, False]))
    assert none < 0  # near-ties that did not flip count against steering
    all_flipped = flip_log_e_value(probs, np.array([True, True, True]))
    assert all_flipped > flip_log_e_value(probs, np.array([True, False, False]))
    assert flip_log_e_value(np.array([]), np.array([], bool)) == pytest.approx(0.0)
    assert flip_log_e_value(np.array([1.0, 1.0]), np.array([True, True])) == pytest.approx(0.0)  # certain flips
    assert flip_log_e_value(np.array([0.0, 0.5]), np.array([True, False])) == math.inf  # an impossible flip
    assert tie_test([]).p_value == 1.0
    with pytest.raises(ValueError, match="indicators"):
        flip_log_e_value(probs, np.array([True]))


def test_flip_probability_follows_the_gap_and_the_temperature() -> None:
    """One competitor d behind the best scores 1/2 exp(-d / b); at temperature T both the gap and b
    are in score units (divided by T); none within the tolerance: no near-tie."""
    for temperature in (1.0, 0.5, 0.0):
        base = torch.full((1, VOCAB), -30.0)
        base[0, 9] = 0.0  # far ahead of every other token but the one placed next to it
        row = scores(base, temperature, 3, 0, torch.tensor([0]))[0].double()
        best, other = 9, 7
        scale = temperature or 1.0
        for d in (0.0, 0.1, 0.3):  # in logit units
            logits = base.clone()
            logits[0, other] += float((row[best] - row[other]) * scale) - d  # `other` trails by d / scale
            check = verify(logits, [best], temperature, 3, 0, {EOS}, 1)
            if d == 0.0 and check.tolerated_ties:
                continue  # exactly tied in float32: argmax may be either, flip_probs still 1/2
            assert check.flip_probs == pytest.approx((0.5 * math.exp(-d / DEFAULT_TIE_NOISE_SCALE),), rel=1e-3)
        logits = base.clone()
        logits[0, other] += float((row[best] - row[other]) * scale) - 1.2 * DEFAULT_TIE_TOLERANCE
        assert verify(logits, [best], temperature, 3, 0, {EOS}, 1).near_ties == 0


def test_exactly_tied_tokens_union_bound() -> None:
    """k tokens tied exactly: an honest pick misses the argmax with chance (k-1)/k <= min(1, (k-1)/2)."""
    logits = torch.full((1, VOCAB), -30.0)
    row = scores(logits, 0.0, 0, 0, torch.tensor([0]))[0]
    logits[0, [3, 4, 5]] = 5.0  # greedy (T=0): the scores are the logits, ties are exact
    check = verify(logits, [3], 0.0, 0, 0, {EOS}, 1)
    assert check.flip_probs == (1.0,) and check.tolerated_ties == 0 and row.shape[0] == VOCAB


def _logits(seed: int) -> torch.Tensor:
    """High-entropy rows (many near-ties): a worst case for honest flips."""
    logits = torch.randn(ROWS * TOKENS, VOCAB, generator=torch.Generator().manual_seed(seed)) * 1.5
    logits[:, EOS] = -1e4
    return logits


def _file(seed: int, engine_noise: float, steer: int = 0) -> list[SamplingInput]:
    """A file of ROWS rows of TOKENS tokens. The engine samples from the validator's logits plus
    Gaussian noise of `engine_noise` logit units; `steer` > 0 makes it take, at up to `steer`
    near-tie positions, the runner-up instead (if within the tolerance)."""
    logits = _logits(seed)
    noise = torch.randn(logits.shape, generator=torch.Generator().manual_seed(seed + 10_000)) * engine_noise
    engine = logits + noise
    steered = 0
    inputs = []
    for row in range(ROWS):
        lo = row * TOKENS
        positions = torch.arange(TOKENS)
        tokens = sample_tokens(engine[lo : lo + TOKENS], 1.0, seed, row, positions).tolist()
        if steered < steer:
            s = scores(logits[lo : lo + TOKENS], 1.0, seed, row, positions).double()
            top2 = s.topk(2, dim=1)
            for pos in range(TOKENS):
                gap = float(top2.values[pos, 0] - top2.values[pos, 1])
                if steered < steer and 0 < gap <= DEFAULT_TIE_TOLERANCE * 0.95:
                    tokens[pos] = int(top2.indices[pos, 1])
                    steered += 1
        inputs.append(SamplingInput(logits[lo : lo + TOKENS], tokens, 1.0, seed, row))
    return inputs


def _judge(inputs: list[SamplingInput]):
    checks = verify_batch(inputs, {EOS}, TOKENS)
    return checks, tie_test(c for c in checks if c.reproduced == c.n_tokens)


def test_honest_files_with_engine_noise_pass() -> None:
    """60 files of 512 high-entropy tokens, with engine noise of 0.05 logit units (the validator's
    honest flips on the devnet sit far below that, see docs/verifiable-inference.md): many
    near-ties, some flips, never a rejection."""
    smallest = 1.0
    flips = 0
    for seed in range(60):
        _, test = _judge(_file(seed, engine_noise=0.05))
        assert test.near_ties > 50
        flips += test.flips
        smallest = min(smallest, test.p_value)
        assert not test.rejected, test
    assert flips > 0  # the engine noise does flip near-ties: the test is not vacuous
    assert smallest > 1e3 * DEFAULT_TIE_ALPHA


def test_exact_engine_has_no_flips() -> None:
    checks, test = _judge(_file(1, engine_noise=0.0))
    assert test.flips == 0 and test.p_value == 1.0 and test.near_ties > 0
    assert all(c.reproduced == c.n_tokens for c in checks)


def test_zero_near_ties_pass() -> None:
    """Confident rows: no competitor within the tolerance anywhere, nothing to test."""
    logits = torch.full((TOKENS, VOCAB), -20.0)
    logits[:, 5] = 20.0
    tokens = sample_tokens(logits, 1.0, 0, 0, torch.arange(TOKENS)).tolist()
    check = verify(logits, tokens, 1.0, 0, 0, {EOS}, TOKENS)
    test = tie_test([check])
    assert (test.near_ties, test.flips, test.log_e_value, test.p_value, test.rejected) == (0, 0, 0.0, 1.0, False)
    assert tie_test([]).p_value == 1.0


@pytest.mark.parametrize("steer", [24, 40])
def test_steered_ties_are_rejected(steer: int) -> None:
    """Every steered token passes the per-row check, but the file's flips are beyond chance. These
    high-entropy rows hold ~190 near-ties per file, several times the devnet's: a dozen steered
    tokens here can hide among them (the power on real files is measured in bench/detection.py)."""
    checks, test = _judge(_file(3, engine_noise=0.0, steer=steer))
    assert all(c.reproduced == c.n_tokens for c in checks)  # the per-row check sees nothing wrong
    assert test.flips == steer
    assert test.rejected, test


def test_steering_hidden_in_engine_noise_is_still_rejected() -> None:
    _, test = _judge(_file(5, engine_noise=0.05, steer=40))
    assert test.flips >= 40 and test.rejected, test
