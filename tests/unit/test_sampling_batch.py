"""Batched sampling check and batched file checks: the same verdicts as one sample at a time.

Also the validator's spot-checking: which rows a selection seed picks and what that costs in
detection. `check_samples` runs here on a tiny untrained model (PyTorch, no vLLM).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch
from proofpool_arithmetic.build import ModelSpec, create_model
from proofpool_arithmetic.tokenizer import EOS_ID

from proofpool.core.rollout import RolloutSample
from proofpool.core.sampling import SamplingInput, sample_tokens, scores, verify, verify_batch
from proofpool.core.sampling.gumbel import batch_score_blocks
from proofpool.core.toploc import build_proofs_batch, join_proofs
from proofpool.inference.check import (
    SampleVerdict,
    check_sample,
    check_samples,
    detection_probability,
    spot_check_rows,
)
from proofpool.inference.prefill import prefill, prefill_batch

VOCAB, EOS = 1000, 999


def _logits(seed: int, n: int, vocab: int = VOCAB) -> torch.Tensor:
    logits = torch.randn(n, vocab, generator=torch.Generator().manual_seed(seed)) * 3
    logits[:, EOS % vocab] = -1e4
    return logits


def _inputs(vocab: int = VOCAB) -> list[SamplingInput]:
    """Honest, edited, hostile, greedy, empty and near-tie samples of different lengths and streams."""
    cases = []
    specs = [(1.0, 11, 0, 20), (0.5, 11, 1, 7), (0.0, 3, 2, 9), (2.0, 2**64 - 1, 3, 0), (1.0, 5, 4, 1), (0.7, 5, 9, 33)]
    for i, (temperature, seed, index, n) in enumerate(specs):
        logits = _logits(i, n, vocab)
        tokens = sample_tokens(logits, temperature, seed, index, torch.arange(n)).tolist()
        out = [SamplingInput(logits, tokens, temperature, seed, index)]
        if n > 3:
            edited = list(tokens)
            edited[2] = int(scores(logits, temperature, seed, index, torch.arange(n))[2].argmin())
            hostile = [*tokens[:-2], -1, 2**40]
            with_eos = [*tokens[:-1], EOS % vocab]
            out += [SamplingInput(logits, t, temperature, seed, index) for t in (edited, hostile, with_eos)]
            out.append(SamplingInput(logits, tokens, temperature, seed + 1, index))  # another stream
            near = logits.clone()  # token 1 now trails another by a fifth of the tolerance: a near-tie
            row = scores(near, temperature, seed, index, torch.arange(n))[1].double()
            other = int(row.argsort()[-2])
            scale = temperature if temperature > 0 else 1.0
            near[1, other] += float((row.max() - row[other] + 0.05) * scale)
            out.append(SamplingInput(near, tokens, temperature, seed, index))
        cases += out
    return cases


def _verify_one(s: SamplingInput, eos: int, max_tokens: int):
    return verify(s.logits, s.completion_tokens, s.temperature, s.seed, s.sample_index, {eos}, max_tokens)


@pytest.mark.parametrize("max_tokens", [1, 20, 40])
def test_batch_equals_per_sample(max_tokens: int) -> None:
    inputs = _inputs()
    batch = verify_batch(inputs, {EOS}, max_tokens)
    assert batch == [_verify_one(s, EOS, max_tokens) for s in inputs]
    assert {c.first_mismatch for c in batch} >= {None, 2}
    assert any(c.tolerated_ties for c in batch) and any(not c.eos_ok for c in batch)


def test_blocks_spanning_samples_give_the_same_scores() -> None:
    """A vocabulary of 87,381 makes 3-row noise blocks, so blocks start and end inside samples."""
    vocab = 87_381
    inputs = [s for s in _inputs(vocab) if s.logits.shape[0] < 12][:8]
    streams = [s.temperature for s in inputs], [s.seed for s in inputs], [s.sample_index for s in inputs]
    blocks = batch_score_blocks([s.logits for s in inputs], *streams)
    rows = torch.cat([torch.from_numpy(block.copy()) for _, block in blocks])
    want = [scores(s.logits, s.temperature, s.seed, s.sample_index, torch.arange(s.logits.shape[0])) for s in inputs]
    assert torch.equal(rows, torch.cat(want))
    assert verify_batch(inputs, {EOS % vocab}, 40) == [_verify_one(s, EOS % vocab, 40) for s in inputs]


def test_bad_batches_raise() -> None:
    good = SamplingInput(_logits(0, 3), [1, 2, 3], 1.0, 0, 0)
    assert verify_batch([], {EOS}, 10) == []
    with pytest.raises(ValueError):
        verify_batch([good, SamplingInput(_logits(0, 3, 500), [1, 2, 3], 1.0, 0, 1)], {EOS}, 10)  # two vocabularies
    with pytest.raises(ValueError):
        verify_batch([good, SamplingInput(_logits(0, 3), [1, 2], 1.0, 0, 1)], {EOS}, 10)  # rows != tokens
    with pytest.raises(ValueError):
        verify_batch([good, SamplingInput(_logits(0, 3), [1, 2, 3], -1.0, 0, 1)], {EOS}, 10)


# --- whole files, and spot-checking ---------------------------------------------------------------

MAX_TOKENS = 6


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return create_model(ModelSpec(seed=0, hidden=64, layers=2, heads=2)).eval()


@pytest.fixture(scope="module")
def rows(model) -> list[RolloutSample]:
    """A small honest file: seeded sampling from the model, proofs from its own prefill."""
    prompts = [[1, 4 + i % 10, 14, 4 + (3 * i) % 10, 15] for i in range(24)]
    completions = []
    with torch.inference_mode():
        for index, prompt in enumerate(prompts):
            tokens: list[int] = []
            while len(tokens) < MAX_TOKENS and (not tokens or tokens[-1] != EOS_ID):
                logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0, -1:].float()
                tokens.append(int(sample_tokens(logits, 1.0, 7, index, torch.tensor([len(tokens)]))[0]))
            completions.append(tokens)
    recs = prefill_batch(model, list(zip(prompts, completions, strict=True)))
    proofs = build_proofs_batch([r.hidden_states for r in recs])
    return [
        RolloutSample("add-0-0", i, tuple(p), tuple(c), 0.0, 0.0, 7, 1.0, 0, join_proofs(pr))
        for i, (p, c, pr) in enumerate(zip(prompts, completions, proofs, strict=True))
    ]


def _cheat(rows: list[RolloutSample], cheated: set[int]) -> list[RolloutSample]:
    """Rows in `cheated` get their first completion token changed, proofs kept."""
    out = []
    for i, s in enumerate(rows):
        if i in cheated:
            first = (s.completion_tokens[0] + 1) % 14
            s = dataclasses.replace(s, completion_tokens=(first, *s.completion_tokens[1:]))
        out.append(s)
    return out


def _without_flip_probs(v: SampleVerdict) -> SampleVerdict:
    """The verdict with its honest flip probabilities dropped: they are continuous functions of the
    logits, which a batched prefill and a single one round differently (see the approx check)."""
    return dataclasses.replace(v, sampling=dataclasses.replace(v.sampling, flip_probs=()))


def test_file_check_equals_per_row_checks(model, rows) -> None:
    files = [rows, _cheat(rows, {1, 5, 22})]
    for samples in files:
        verdicts = check_samples(model, samples, stop_ids={EOS_ID}, max_tokens=MAX_TOKENS)
        singles = [
            check_sample(
                prefill(model, s.prompt_tokens, s.completion_tokens),
                s.completion_tokens,
                s.proofs,
                temperature=s.temperature,
                sampling_seed=s.sampling_seed,
                sample_index=i,
                stop_ids={EOS_ID},
                max_tokens=MAX_TOKENS,
            )
            for i, s in enumerate(samples)
        ]
        assert [_without_flip_probs(v) for v in verdicts] == [_without_flip_probs(v) for v in singles]
        for batched, single in zip(verdicts, singles, strict=True):  # batched kernels round differently
            assert batched.sampling.flip_probs == pytest.approx(single.sampling.flip_probs, rel=1e-3, abs=1e-6)
        assert [v.row for v in verdicts] == list(range(len(samples)))
    honest = check_samples(model, files[0], stop_ids={EOS_ID}, max_tokens=MAX_TOKENS)
    assert all(v.accepted for v in honest)
    cheated = check_samples(model, files[1], stop_ids={EOS_ID}, max_tokens=MAX_TOKENS)
    assert {v.row for v in cheated if not v.accepted} == {1, 5, 22}


def test_spot_check_recomputes_only_the_drawn_rows(model, rows) -> None:
    samples = _cheat(rows, {1, 5, 22})
    full = check_samples(model, samples, stop_ids={EOS_ID}, max_tokens=MAX_TOKENS)
    for seed in (b"block-hash-1", b"block-hash-2", bytes(32)):
        drawn = spot_check_rows(len(samples), 0.25, seed)
        verdicts = check_samples(
            model, samples, stop_ids={EOS_ID}, max_tokens=MAX_TOKENS, sample_rate=0.25, selection_seed=seed
        )
        assert [v.row for v in verdicts] == drawn and len(drawn) == 6
        assert verdicts == [full[i] for i in drawn]


def test_spot_check_rows_are_a_deterministic_uniform_draw() -> None:
    assert spot_check_rows(10, 1.0, None) == list(range(10))
    assert spot_check_rows(0, 0.5, b"x") == []
    assert spot_check_rows(256, 1 / 32, b"seed") == spot_check_rows(256, 1 / 32, b"seed")
    assert len(spot_check_rows(256, 1 / 32, b"seed")) == 8
    assert len(spot_check_rows(30, 0.1, b"seed")) == 3  # not 4: 0.1 * 30 is 3.0000000000000004
    assert len(spot_check_rows(5, 0.01, b"seed")) == 1  # at least one row
    assert spot_check_rows(256, 1 / 32, b"seed") != spot_check_rows(256, 1 / 32, b"seee")
    picked = [0] * 40
    for s in range(2000):
        for row in spot_check_rows(40, 0.1, s.to_bytes(4, "big")):
            picked[row] += 1
    assert all(abs(count - 200) < 60 for count in picked), picked  # each row about 4/40 of 2000 draws
    for rate, seed in ((0.0, b"x"), (1.5, b"x"), (0.5, None), (0.5, b""), (0.5, "text")):
        with pytest.raises(ValueError):
            spot_check_rows(10, rate, seed)  # type: ignore[arg-type]


def test_detection_probability_is_the_hypergeometric_miss_complement() -> None:
    n = 9
    for cheated, checked in itertools.product(range(n + 1), range(n + 1)):
        caught = sum(1 for draw in itertools.combinations(range(n), checked) if set(draw) & set(range(cheated)))
        assert detection_probability(n, cheated, checked) == pytest.approx(caught / math.comb(n, checked))
    assert detection_probability(256, 1, 8) == pytest.approx(8 / 256)
    assert detection_probability(256, 64, 8) == pytest.approx(0.9, abs=0.01)
    with pytest.raises(ValueError):
        detection_probability(10, 11, 1)
