"""The compiled Gumbel-max kernels against the numpy reference: same index, same float32 bits.

Both call libm's float64 log on CPUs without AVX-512. On AVX-512 CPUs numpy's SIMD log may differ
in the last float64 ulp, which survives the rounding of g to float32 with probability ~1e-9 per
score (gumbel's module docstring), so these exact comparisons hold there too in practice."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from proofpool.core.sampling.gumbel import (
    batch_score_blocks,
    gumbel_noise,
    reference_sample_tokens,
    reference_scores,
    sample_tokens,
    scores,
)

TEMPERATURES = (0.0, 0.3, 1.0, 1.7)
# (vocab, rows per case, cases): a few rows for the large vocabularies.
VOCABULARIES = ((1, 8, 6), (2, 8, 6), (16, 8, 6), (1000, 6, 4), (49_152, 2, 2), (151_936, 1, 2))


def _logits(rng: np.random.Generator, rows: int, vocab: int, kind: int) -> torch.Tensor:
    """float32 [rows, vocab] of one of several shapes a model's logits take."""
    if kind == 0:  # spread, as in the benchmark
        x = rng.standard_normal((rows, vocab)) * 4
    elif kind == 1:  # peaked: one token far ahead, the rest low
        x = rng.standard_normal((rows, vocab)) - 10
        x[np.arange(rows), rng.integers(0, vocab, rows)] = 15
    elif kind == 2:  # bf16 logits (many exact ties), as an engine hands them over
        x = torch.from_numpy(rng.standard_normal((rows, vocab)) * 3).to(torch.bfloat16).float().numpy()
    else:  # nearly flat
        x = rng.standard_normal((rows, vocab)) * 1e-3
    return torch.from_numpy(x.astype(np.float32))


def _case(rng: np.random.Generator, rows: int) -> tuple[int, int, torch.Tensor]:
    seed = int(rng.integers(0, 2**64, dtype=np.uint64))
    sample_index = int(rng.integers(0, 10_000))
    start = int(rng.integers(0, 100_000))
    return seed, sample_index, torch.arange(start, start + rows)


def _assert_same(
    logits: torch.Tensor, temperature: float, seed: int, sample_index: int, positions: torch.Tensor
) -> None:
    expected = reference_scores(logits, temperature, seed, sample_index, positions).numpy()
    got = scores(logits, temperature, seed, sample_index, positions).numpy()
    assert got.dtype == np.float32
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))  # -0.0 and NaN payloads too
    tokens = sample_tokens(logits, temperature, seed, sample_index, positions)
    assert tokens.dtype == torch.int64
    assert torch.equal(tokens, reference_sample_tokens(logits, temperature, seed, sample_index, positions))
    assert np.array_equal(tokens.numpy(), expected.argmax(axis=1))


@pytest.mark.parametrize("temperature", TEMPERATURES)
@pytest.mark.parametrize(("vocab", "rows", "cases"), VOCABULARIES)
def test_kernel_matches_numpy_reference(vocab: int, rows: int, cases: int, temperature: float) -> None:
    rng = np.random.default_rng([vocab, int(temperature * 10)])
    for case in range(cases):
        seed, sample_index, positions = _case(rng, rows)
        _assert_same(_logits(rng, rows, vocab, case % 4), temperature, seed, sample_index, positions)


def test_noise_matches_numpy_reference() -> None:
    rng = np.random.default_rng(7)
    for vocab in (1, 16, 1000, 151_936):
        seed, sample_index, positions = _case(rng, 3)
        expected = reference_scores(torch.zeros(3, vocab), 1.0, seed, sample_index, positions)  # 0 / 1 + g = g
        assert torch.equal(gumbel_noise(seed, sample_index, positions, vocab), expected)


def test_batch_score_blocks_match_per_sample_reference() -> None:
    rng = np.random.default_rng(11)
    temperatures = [0.0, 0.3, 1.0, 1.7, 0.0, 1.0]
    logits = [_logits(rng, int(rng.integers(1, 9)), 1000, i % 4) for i in range(len(temperatures))]
    seeds = [int(rng.integers(0, 2**63)) for _ in temperatures]
    indices = list(range(len(temperatures)))
    got = np.empty((sum(t.shape[0] for t in logits), 1000), dtype=np.float32)
    for start, block in batch_score_blocks(logits, temperatures, seeds, indices):
        got[start : start + block.shape[0]] = block
    expected = np.concatenate(
        [
            reference_scores(x, t, s, i, torch.arange(x.shape[0])).numpy()
            for x, t, s, i in zip(logits, temperatures, seeds, indices, strict=True)
        ]
    )
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def _tie(after: bool) -> tuple[torch.Tensor, int, int]:
    """A [1, 1000] row whose best perturbed score (T = 1) is reached by two tokens exactly:
    (logits, the earlier token, the later one). `after`: the made-up rival sits after the best."""
    seed, sample_index, position = 5, 2, torch.tensor([9])
    g = reference_scores(torch.zeros(1, 1000), 1.0, seed, sample_index, position)[0].numpy()
    best = int(g.argmax())
    rival = 999 if after else 0
    assert rival != best
    x = np.zeros(1000, dtype=np.float32)
    candidate = np.float32(g[best] - g[rival])
    for _ in range(64):  # walk float32 values around the gap until the rival lands exactly on the best
        x[rival] = candidate
        s = reference_scores(torch.from_numpy(x[None]), 1.0, seed, sample_index, position)[0].numpy()
        if s[rival] == s[best] == s.max():
            return torch.from_numpy(x[None].copy()), min(best, rival), max(best, rival)
        candidate = np.nextafter(candidate, np.float32(np.inf if s[rival] < s[best] else -np.inf))
    raise AssertionError("no exact tie found")


@pytest.mark.parametrize("after", [False, True])
def test_exact_tie_goes_to_the_first_index(after: bool) -> None:
    logits, first, _ = _tie(after)
    assert sample_tokens(logits, 1.0, 5, 2, torch.tensor([9])).tolist() == [first]
    assert reference_sample_tokens(logits, 1.0, 5, 2, torch.tensor([9])).tolist() == [first]


def test_greedy_ties_go_to_the_first_index() -> None:
    logits = torch.tensor([[1.0, 3.0, -2.0, 3.0, 3.0], [0.0, -0.0, 0.0, -1.0, -0.0]])
    assert sample_tokens(logits, 0.0, 1, 0, torch.arange(2)).tolist() == [1, 0]


def test_equal_scores_far_from_zero_go_to_the_first_index() -> None:
    # |score| > 1e6: the noise vanishes in float32 rounding, every token ties, and pruning is off.
    logits = torch.full((2, 5000), 3e9)  # float32 ulp 256 > 2 * max |g|
    for temperature in (0.3, 1.0):
        assert sample_tokens(logits, temperature, 1, 0, torch.arange(2)).tolist() == [0, 0]
        _assert_same(logits, temperature, 1, 0, torch.arange(2))


def _hostile_rows(vocab: int) -> torch.Tensor:
    rng = np.random.default_rng(vocab)
    rows = (rng.standard_normal((10, vocab)) * 4).astype(np.float32)
    rows[0, [vocab // 3, vocab // 2]] = np.nan  # the first NaN wins
    rows[1, [vocab - 1, 1]] = np.inf  # the first +inf wins
    rows[2, :] = -np.inf  # all -inf: index 0
    rows[3, rng.integers(0, vocab, vocab // 2)] = -np.inf  # a masked vocabulary
    rows[4, 5] = np.inf
    rows[4, 7] = np.nan  # a NaN after an inf still wins
    rows[5, :] = np.inf
    rows[6, vocab // 4] = 3e38  # near float32's max: x / 0.3 overflows to inf
    rows[7, :] = -3e38
    rows[8, :] = 999_990.0  # the pruning limit: scores on both sides of 1e6
    rows[9, : vocab // 2] = 0.0
    rows[9, vocab // 2 :] = -0.0
    return torch.from_numpy(rows)


@pytest.mark.parametrize("temperature", [*TEMPERATURES, 1e-50, 1e-40, 1e30])
@pytest.mark.parametrize("vocab", [16, 1000])
def test_nan_and_inf_follow_numpy(vocab: int, temperature: float) -> None:
    # 1e-50 rounds to a float32 0 (x / 0 = +-inf, 0 / 0 = NaN); 1e-40 is subnormal; 1e30 shrinks every logit.
    logits = _hostile_rows(vocab)
    with np.errstate(all="ignore"):
        _assert_same(logits, temperature, 3, 1, torch.arange(10))
    tokens = sample_tokens(logits, temperature, 3, 1, torch.arange(10)).tolist()
    if temperature in TEMPERATURES:  # NaN only where a logit is NaN, +inf only where a logit is +inf
        assert tokens[:3] == [vocab // 3, 1, 0]
        assert tokens[4] == 7
