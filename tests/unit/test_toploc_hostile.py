"""TOPLOC under hostile proofs and awkward inputs: a verdict every time, never a crash."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proofpool.core.toploc import (
    PRIME,
    ChunkCheck,
    ToplocError,
    build_proofs,
    expected_proof_lengths,
    join_proofs,
    split_proofs,
    toploc_verdict,
    verify_proof_blob,
    verify_proofs,
)

HIDDEN = 64


@pytest.fixture(scope="module")
def acts() -> torch.Tensor:
    """70 decode tokens: two full chunks of 32 and a partial one of 6."""
    return torch.randn(70, HIDDEN, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)


@pytest.fixture(scope="module")
def proofs(acts: torch.Tensor) -> list[bytes]:
    return build_proofs(acts)


def _with_word(proof: bytes, index: int, value: int) -> bytes:
    return proof[: 2 * index] + value.to_bytes(2, "big") + proof[2 * index + 2 :]


HOSTILE = [
    ("truncated", lambda p: [p[0][:-1], *p[1:]], "proof_wrong_length", "proof_malformed"),
    ("too long", lambda p: [p[0] + b"\x00\x00", *p[1:]], "proof_wrong_length", "proof_malformed"),
    ("empty", lambda p: [b"", *p[1:]], "proof_wrong_length", "proof_malformed"),
    ("modulus zero", lambda p: [_with_word(p[0], 0, 0), *p[1:]], "proof_bad_modulus", "proof_malformed"),
    ("modulus above prime", lambda p: [_with_word(p[0], 0, PRIME + 1), *p[1:]], "proof_bad_modulus", "proof_malformed"),
    ("modulus below points", lambda p: [_with_word(p[0], 0, 127), *p[1:]], "proof_bad_modulus", "proof_malformed"),
    ("coefficient = prime", lambda p: [_with_word(p[0], 5, PRIME), *p[1:]], "proof_bad_coefficient", "proof_malformed"),
    ("coefficient 0xffff", lambda p: [_with_word(p[0], 1, 0xFFFF), *p[1:]], "proof_bad_coefficient", "proof_malformed"),
    ("None", lambda p: [None, *p[1:]], "proof_not_bytes", "proof_malformed"),
    ("str", lambda p: [p[0].hex(), *p[1:]], "proof_not_bytes", "proof_malformed"),
    ("int", lambda p: [7, *p[1:]], "proof_not_bytes", "proof_malformed"),
    ("one missing", lambda p: p[:-1], "proof_missing", "proof_count_mismatch"),
    ("one extra", lambda p: [*p, p[0]], "proof_extra", "proof_count_mismatch"),
    ("no proofs", lambda p: [], "proof_missing", "proof_count_mismatch"),
    ("not a list", lambda p: None, "proofs_not_a_list", "proof_malformed"),
    ("a blob, not a list", lambda p: join_proofs(p), "proofs_not_a_list", "proof_malformed"),
]


@pytest.mark.parametrize("tamper, error, reason", [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_proof_is_a_failed_check_not_a_crash(acts, proofs, tamper, error, reason) -> None:
    checks = verify_proofs(acts, tamper(list(proofs)))
    assert error in {c.error for c in checks}
    assert toploc_verdict(checks) == (False, reason)


def test_modified_coefficient_within_field_fails_on_numbers(acts, proofs) -> None:
    bad = _with_word(proofs[0], 3, (int.from_bytes(proofs[0][6:8], "big") + 1) % PRIME)
    checks = verify_proofs(acts, [bad, *proofs[1:]])
    assert checks[0].error is None and checks[0].exp_mismatches > 38
    assert toploc_verdict(checks)[0] is False


def test_honest_proofs_verify_exactly(acts, proofs) -> None:
    assert [len(p) for p in proofs] == expected_proof_lengths(70, HIDDEN) == [258, 258, 258]
    checks = verify_proofs(acts, proofs)
    assert checks == [ChunkCheck(0, 0.0, 0.0)] * 3
    assert toploc_verdict(checks) == (True, None)


def test_small_noise_passes_and_unrelated_fails(acts, proofs) -> None:
    gen = torch.Generator().manual_seed(2)
    base = acts.float()
    noisy = base * (1 + 0.01 * torch.randn(base.shape, generator=gen))
    assert toploc_verdict(verify_proofs(noisy, proofs)) == (True, None)
    unrelated = torch.randn(base.shape, generator=gen)
    assert toploc_verdict(verify_proofs(unrelated, proofs))[0] is False


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_fp16_and_fp32_inputs_are_cast_to_bf16(dtype: torch.dtype) -> None:
    x = torch.randn(40, HIDDEN, generator=torch.Generator().manual_seed(3)).to(dtype)
    proofs = build_proofs(x)
    assert proofs == build_proofs(x.to(torch.bfloat16))
    assert toploc_verdict(verify_proofs(x, proofs)) == (True, None)
    assert toploc_verdict(verify_proofs(x.to(torch.bfloat16), proofs)) == (True, None)


def test_chunk_smaller_than_topk_proofs_all_entries() -> None:
    x = torch.randn(33, 5, generator=torch.Generator().manual_seed(4))
    proofs = build_proofs(x)
    assert [len(p) for p in proofs] == [258, 2 + 2 * 5]  # 32 x 5 = 160 entries, then only 5
    assert toploc_verdict(verify_proofs(x, proofs)) == (True, None)
    assert verify_proofs(x, [proofs[0], proofs[0]])[1].error == "proof_wrong_length"


def test_honest_chunk_with_small_modulus_is_not_falsely_rejected() -> None:
    """The reference evaluated at the raw index, rejecting every honest chunk with m < 65497."""
    x = torch.randn(32, 4096, generator=torch.Generator().manual_seed(5)) * 0.01
    flat = x.view(-1)
    flat[7] = 50.0
    flat[7 + PRIME] = -60.0  # collides with index 7 mod 65497
    proofs = build_proofs(x)
    assert int.from_bytes(proofs[0][:2], "big") < PRIME
    noisy = x * (1 + 0.005 * torch.randn(x.shape, generator=torch.Generator().manual_seed(6)))
    assert toploc_verdict(verify_proofs(noisy, proofs)) == (True, None)


def test_blob_round_trip_and_damage(acts, proofs) -> None:
    blob = join_proofs(proofs)
    assert split_proofs(blob, 70, HIDDEN) == proofs
    assert toploc_verdict(verify_proof_blob(acts, blob)) == (True, None)
    assert toploc_verdict(verify_proof_blob(acts, blob[:-2])) == (False, "proof_malformed")
    assert toploc_verdict(verify_proof_blob(acts, blob[:258])) == (False, "proof_count_mismatch")
    assert toploc_verdict(verify_proof_blob(acts, blob + b"\x01")) == (False, "proof_count_mismatch")
    assert toploc_verdict(verify_proof_blob(acts, None)) == (False, "proof_malformed")


def test_empty_completion_has_no_chunks() -> None:
    empty = torch.zeros(0, HIDDEN)
    assert build_proofs(empty) == []
    assert verify_proofs(empty, []) == []
    assert toploc_verdict([]) == (True, None)
    assert toploc_verdict(verify_proofs(empty, [b"\x00" * 258])) == (False, "proof_count_mismatch")


@pytest.mark.parametrize(
    "bad",
    [torch.randn(4), torch.randn(2, 3, 4), torch.ones(3, 4, dtype=torch.int64), torch.full((2, 4), float("nan"))],
    ids=["1-D", "3-D", "integer", "nan"],
)
def test_build_rejects_unusable_activations(bad: torch.Tensor) -> None:
    with pytest.raises(ToplocError):
        build_proofs(bad)


def test_thresholds_are_inclusive() -> None:
    edge = ChunkCheck(exp_mismatches=38, mant_err_mean=10.0, mant_err_median=8.0)
    assert toploc_verdict([edge]) == (True, None)
    assert toploc_verdict([ChunkCheck(39, 0.0, 0.0)]) == (False, "toploc_exp_mismatch")
    assert toploc_verdict([ChunkCheck(0, 10.5, 0.0)]) == (False, "toploc_mantissa")
    assert toploc_verdict([ChunkCheck(0, 0.0, 9.0)]) == (False, "toploc_mantissa")


# --- fuzzing ----------------------------------------------------------------------------------

_proof_like = st.one_of(
    st.binary(max_size=300),
    st.binary(min_size=258, max_size=258),
    st.none(),
    st.integers(),
    st.text(max_size=10),
    st.lists(st.integers(0, 255), max_size=5),
)
_fuzz = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_fuzz
@given(st.lists(_proof_like, max_size=5))
def test_fuzz_proof_lists_never_crash(acts, proofs, hostile) -> None:
    checks = verify_proofs(acts, hostile)
    assert len(checks) == max(3, len(hostile))
    ok, reason = toploc_verdict(checks)
    assert not ok and reason is not None


@_fuzz
@given(st.one_of(_proof_like, st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)))
def test_fuzz_non_list_proofs_never_crash(acts, hostile) -> None:
    assert toploc_verdict(verify_proofs(acts, hostile))[0] is False
    assert toploc_verdict(verify_proof_blob(acts, hostile))[0] is False


@_fuzz
@given(st.integers(0, 2), st.integers(0, 257), st.integers(0, 255))
def test_fuzz_single_byte_edits_give_consistent_verdicts(acts, proofs, chunk, offset, value) -> None:
    """Any edit gives a verdict. Not every edit is rejected, by design: nudging the constant
    coefficient shifts every value by a few mantissa units, which the tolerance accepts, and a
    modulus above every index the chunk has evaluates identically."""
    damaged = bytearray(proofs[chunk])
    damaged[offset] = value
    edited = [*proofs]
    edited[chunk] = bytes(damaged)
    ok, reason = toploc_verdict(verify_proofs(acts, edited))
    assert ok == (reason is None)


@pytest.mark.parametrize("word", [2, 17, 64, 128])
@pytest.mark.parametrize("delta", [1, 1000])
def test_editing_a_higher_coefficient_is_rejected(acts, proofs, word: int, delta: int) -> None:
    value = (int.from_bytes(proofs[1][2 * word : 2 * word + 2], "big") + delta) % PRIME
    edited = [proofs[0], _with_word(proofs[1], word, value), proofs[2]]
    assert toploc_verdict(verify_proofs(acts, edited)) == (False, "toploc_exp_mismatch")


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 70), st.integers(1, 40), st.integers(1, 8), st.integers(1, 130), st.integers(0, 2**32 - 1))
def test_fuzz_shapes_round_trip(tokens: int, hidden: int, chunk_size: int, topk: int, seed: int) -> None:
    x = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(seed))
    proofs = build_proofs(x, chunk_size=chunk_size, topk=topk)
    assert [len(p) for p in proofs] == expected_proof_lengths(tokens, hidden, chunk_size, topk)
    checks = verify_proofs(x, proofs, chunk_size=chunk_size, topk=topk)
    assert all(c == ChunkCheck(0, 0.0, 0.0) for c in checks)
