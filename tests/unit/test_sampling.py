"""Seeded Gumbel-max sampling and the validator's reproduction check."""

from __future__ import annotations

import math

import pytest
import torch

from proofpool.core.sampling import (
    DEFAULT_TIE_TOLERANCE,
    SamplingCheck,
    gumbel_noise,
    sample_tokens,
    sampling_verdict,
    scores,
    verify,
)

U64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def _step(z: int) -> int:
    """splitmix64 output from state z, written the slow obvious way: the protocol's definition."""
    z = (z + GOLDEN) & U64
    z ^= z >> 30
    z = z * 0xBF58476D1CE4E5B9 & U64
    z ^= z >> 27
    z = z * 0x94D049BB133111EB & U64
    return z ^ (z >> 31)


def _reference_noise(seed: int, sample_index: int, position: int, token: int) -> float:
    key = _step(_step(_step(seed) ^ sample_index) ^ position)
    u = ((_step((key + token * GOLDEN) & U64) >> 12) + 0.5) / 2**52
    return -math.log(-math.log(u))


@pytest.mark.parametrize("seed", [0, 1, 2**63, U64, 12345678901234567890])
def test_noise_matches_the_protocol_definition(seed: int) -> None:
    positions = [0, 5, 1000, 2**40]
    got = gumbel_noise(seed, 7, torch.tensor(positions), 40)
    want = torch.tensor([[_reference_noise(seed, 7, p, t) for t in range(40)] for p in positions], dtype=torch.float32)
    assert torch.equal(got, want)


def test_noise_golden_values() -> None:
    """Pinned bits: changing any constant of the noise breaks every deployed worker."""
    got = gumbel_noise(0, 0, torch.tensor([0, 1]), 3).view(torch.int32).flatten().tolist()
    assert got == [-0x40C91D67, -0x40737DD3, 0x3F6A9410, 0x3FE9C864, -0x40FB757E, 0x3E7356DE]
    got = gumbel_noise(U64, 12345, torch.tensor([4095]), 2).view(torch.int32).flatten().tolist()
    assert got == [-0x40736ECE, -0x40AC50B8]


def test_noise_is_independent_of_batch_composition() -> None:
    vocab = 300_001  # several rows per block boundary: rows must not depend on their block
    full = gumbel_noise(9, 2, torch.arange(12), vocab)
    for p in (0, 3, 4, 11):
        assert torch.equal(gumbel_noise(9, 2, torch.tensor([p]), vocab)[0], full[p])
    assert torch.equal(gumbel_noise(9, 2, torch.tensor([11, 3]), vocab), full[[11, 3]])


def test_noise_differs_by_every_input() -> None:
    base = gumbel_noise(1, 1, torch.tensor([1]), 64)
    for other in (gumbel_noise(2, 1, torch.tensor([1]), 64), gumbel_noise(1, 2, torch.tensor([1]), 64),
                  gumbel_noise(1, 1, torch.tensor([2]), 64)):  # fmt: skip
        assert not torch.equal(base, other)


def test_noise_is_standard_gumbel() -> None:
    g = gumbel_noise(3, 0, torch.arange(100), 10_000).double()
    assert torch.isfinite(g).all()
    assert g.mean().item() == pytest.approx(0.5772156649, abs=0.01)
    assert g.std().item() == pytest.approx(math.pi / math.sqrt(6), abs=0.01)


def test_sampling_follows_the_softmax() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).repeat(40_000, 1)
    tokens = sample_tokens(logits, 0.7, seed=5, sample_index=0, positions=torch.arange(40_000))
    freq = torch.bincount(tokens, minlength=4).double() / 40_000
    assert torch.allclose(freq, torch.softmax(logits[0].double() / 0.7, dim=0), atol=0.01)


def test_temperature_zero_is_plain_argmax() -> None:
    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample_tokens(logits, 0.0, 1, 0, torch.arange(16)), logits.argmax(dim=1))
    assert torch.equal(scores(logits, 0.0, 1, 0, torch.arange(16)), logits)


def test_sample_is_argmax_of_scores_and_accepts_bf16_logits() -> None:
    logits = torch.randn(8, 500, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    s = scores(logits, 0.9, 42, 3, torch.arange(8))
    assert s.dtype == torch.float32 and s.shape == (8, 500)
    assert torch.equal(s, logits.float() / 0.9 + gumbel_noise(42, 3, torch.arange(8), 500))
    assert torch.equal(sample_tokens(logits, 0.9, 42, 3, torch.arange(8)), s.argmax(dim=1))


@pytest.mark.parametrize(
    "call",
    [
        lambda: gumbel_noise(-1, 0, torch.tensor([0]), 4),
        lambda: gumbel_noise(2**64, 0, torch.tensor([0]), 4),
        lambda: gumbel_noise(0, -1, torch.tensor([0]), 4),
        lambda: gumbel_noise(0, 0, torch.tensor([-1]), 4),
        lambda: gumbel_noise(0, 0, torch.tensor([0]), 0),
        lambda: sample_tokens(torch.zeros(2, 4), -0.5, 0, 0, torch.arange(2)),
        lambda: sample_tokens(torch.zeros(2, 4), 1.0, 0, 0, torch.arange(3)),
    ],
)
def test_bad_arguments_raise(call) -> None:
    with pytest.raises(ValueError):
        call()


# --- verification -----------------------------------------------------------------------------

VOCAB, N, EOS, SEED, INDEX, TEMP = 1000, 48, 999, 77, 4, 1.0


@pytest.fixture(scope="module")
def logits() -> torch.Tensor:
    logits = torch.randn(N, VOCAB, generator=torch.Generator().manual_seed(11)) * 3
    logits[:, EOS] = -1e4  # keep EOS out of the honest completion
    return logits


@pytest.fixture(scope="module")
def honest(logits: torch.Tensor) -> list[int]:
    return sample_tokens(logits, TEMP, SEED, INDEX, torch.arange(N)).tolist()


def _check(logits, tokens, temperature=TEMP, max_tokens=N, **kw) -> SamplingCheck:
    return verify(logits, tokens, temperature, SEED, INDEX, {EOS}, max_tokens, **kw)


def test_honest_tokens_reproduce_fully(logits, honest) -> None:
    check = _check(logits, honest)
    assert (check.n_tokens, check.reproduced, check.tolerated_ties, check.first_mismatch) == (N, N, 0, None)
    assert check.fraction_reproduced == 1.0 and check.max_gap == 0.0
    assert sampling_verdict(check) == (True, None)


def test_one_edited_token_fails(logits, honest) -> None:
    edited = list(honest)
    worst = int(scores(logits, TEMP, SEED, INDEX, torch.arange(N))[20].argmin())
    edited[20] = worst
    check = _check(logits, edited)
    assert (check.reproduced, check.first_mismatch) == (N - 1, 20)
    assert sampling_verdict(check) == (False, "sampling_mismatch")


def test_other_temperature_seed_or_index_fails(logits, honest) -> None:
    assert sampling_verdict(_check(logits, honest, temperature=0.5)) == (False, "sampling_mismatch")
    assert sampling_verdict(_check(logits, honest, temperature=0.0)) == (False, "sampling_mismatch")
    other_seed = verify(logits, honest, TEMP, SEED + 1, INDEX, {EOS}, N)
    other_index = verify(logits, honest, TEMP, SEED, INDEX + 1, {EOS}, N)
    assert other_seed.fraction_reproduced < 0.5 and other_index.fraction_reproduced < 0.5


def test_tokens_from_other_logits_fail(logits) -> None:
    cheap = torch.randn(N, VOCAB, generator=torch.Generator().manual_seed(12)) * 3
    cheap[:, EOS] = -1e4
    tokens = sample_tokens(cheap, TEMP, SEED, INDEX, torch.arange(N)).tolist()
    check = _check(logits, tokens)
    assert check.fraction_reproduced < 0.5
    assert sampling_verdict(check) == (False, "sampling_mismatch")


def _trailing(logits: torch.Tensor, row: int, token: int, temperature: float, gap: float) -> torch.Tensor:
    """Logits where `token` trails the best other token of `row` by `gap` perturbed-score units."""
    out = logits.clone()
    s = scores(out, temperature, SEED, INDEX, torch.arange(N))[row].double()
    scale = temperature if temperature > 0 else 1.0
    noise = s[token] - out[row, token].double() / scale
    s[token] = -math.inf
    out[row, token] = float((s.max() - gap - noise) * scale)
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.0])
def test_near_ties_are_tolerated_and_real_gaps_are_not(logits, honest, temperature: float) -> None:
    """The committed token lost by less than the tolerance on the verifier's logits: engine noise."""
    tokens = sample_tokens(logits, temperature, SEED, INDEX, torch.arange(N)).tolist()
    tokens[5] = (tokens[5] + 1) % EOS
    tolerance = DEFAULT_TIE_TOLERANCE / temperature if temperature > 0 else DEFAULT_TIE_TOLERANCE
    near = _check(_trailing(logits, 5, tokens[5], temperature, 0.5 * tolerance), tokens, temperature)
    assert (near.reproduced, near.tolerated_ties, near.first_mismatch) == (N, 1, None)
    assert near.max_gap == pytest.approx(0.5 * tolerance, rel=1e-3)
    assert sampling_verdict(near) == (True, None)
    far = _check(_trailing(logits, 5, tokens[5], temperature, 3 * tolerance), tokens, temperature)
    assert (far.reproduced, far.tolerated_ties, far.first_mismatch) == (N - 1, 0, 5)
    assert sampling_verdict(far) == (False, "sampling_mismatch")


@pytest.mark.parametrize(
    "edit, max_tokens, expected",
    [
        (lambda t: t, N, (True, None)),  # hit max_tokens: no EOS needed
        (lambda t: [*t[:-1], EOS], N, (True, None)),  # EOS as the last token
        (lambda t: [*t[:-1], EOS], N + 5, (True, None)),  # stopped early, with EOS
        (lambda t: t, N + 5, (False, "eos_mismatch")),  # stopped early without EOS
        (lambda t: [*t[:10], EOS, *t[11:]], N, (False, "eos_mismatch")),  # EOS mid-way
        (lambda t: [], 4, (False, "eos_mismatch")),  # empty completion
        (lambda t: t, N - 1, (False, "length_exceeded")),
    ],
)
def test_eos_and_length_rules(logits, honest, edit, max_tokens: int, expected) -> None:
    tokens = edit(list(honest))
    verifier_logits = logits[: len(tokens)].clone()
    for row in (i for i, t in enumerate(tokens) if t == EOS):
        verifier_logits[row, EOS] = logits.max() + 100  # EOS really was the sampler's choice there
    check = _check(verifier_logits, tokens, max_tokens=max_tokens)
    assert check.fraction_reproduced == 1.0
    assert sampling_verdict(check) == expected


def test_eos_before_the_end_is_an_eos_mismatch() -> None:
    logits = torch.zeros(3, 8)
    logits[:, 2] = 100.0  # greedy picks 2 everywhere
    check = verify(logits, [2, 2, 2], 0.0, 0, 0, stop_ids={2}, max_tokens=10)
    assert check.reproduced == 3 and not check.eos_ok
    assert sampling_verdict(check) == (False, "eos_mismatch")


def test_hostile_token_ids_are_mismatches_not_crashes(logits, honest) -> None:
    for bad in (-1, VOCAB, 2**40):
        tokens = list(honest)
        tokens[3] = bad
        check = _check(logits, tokens)
        assert check.first_mismatch == 3 and check.reproduced == N - 1


def test_logits_rows_must_match_completion(logits, honest) -> None:
    with pytest.raises(ValueError):
        _check(logits[:-1], honest)
