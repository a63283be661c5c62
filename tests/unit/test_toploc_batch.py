"""Batched TOPLOC: one pass over many samples gives exactly the per-sample proofs and checks.

The per-sample functions are thin wrappers over the batched ones, so "batch == per sample" pins
that a sample's result does not depend on the others in its batch; the slow textbook reference
below (Python integers, sorted topk, one chunk at a time) pins the bytes independently.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from proofpool.core.toploc import (
    PRIME,
    ToplocError,
    build_proofs,
    build_proofs_batch,
    join_proofs,
    toploc_verdict,
    verify_proof_blob,
    verify_proof_blobs_batch,
    verify_proofs,
    verify_proofs_batch,
)
from proofpool.core.toploc.field import evaluate, find_injective_moduli, find_injective_modulus, interpolate
from tests.toploc_vectors import VECTOR_DIR, VECTOR_FILES

VECTORS = [json.loads(p.read_text()) for p in VECTOR_FILES]


def _activations(b64: str, shape: list[int]) -> torch.Tensor:
    bits = np.frombuffer(base64.b64decode(b64), dtype="<i2").reshape(shape)
    return torch.from_numpy(bits.copy()).view(torch.bfloat16)


# --- a slow, independent reference -------------------------------------------------------------


def _newton_coeffs(xs: list[int], ys: list[int]) -> list[int]:
    """Textbook Newton interpolation over GF(PRIME) with Python integers, ascending coefficients."""
    n = len(xs)
    c = [y % PRIME for y in ys]
    for j in range(1, n):
        for i in range(n - 1, j - 1, -1):
            c[i] = (c[i] - c[i - 1]) * pow((xs[i] - xs[i - j]) % PRIME, PRIME - 2, PRIME) % PRIME
    coeffs = [0] * n
    for k in range(n - 1, -1, -1):  # coeffs = coeffs * (X - x_k) + c_k
        coeffs = [((coeffs[i - 1] if i else 0) - xs[k] * coeffs[i]) % PRIME for i in range(n)]
        coeffs[0] = (coeffs[0] + c[k]) % PRIME
    return coeffs


def _reference_proofs(acts: torch.Tensor, chunk_size: int, topk: int) -> list[bytes]:
    """One chunk at a time: sorted torch.topk, a one-by-one modulus scan, Newton, big-endian words."""
    bf16 = acts.to(torch.bfloat16)
    proofs = []
    for start in range(0, bf16.shape[0], chunk_size):
        flat = bf16[start : start + chunk_size].reshape(-1)
        indices = flat.abs().topk(min(topk, flat.numel())).indices
        bits = [int(b) & 0xFFFF for b in flat[indices].view(torch.int16).tolist()]
        idx = indices.tolist()
        modulus = next(m for m in range(PRIME, 0, -1) if len({i % m for i in idx}) == len(idx))
        coeffs = _newton_coeffs([i % modulus for i in idx], bits)
        proofs.append(b"".join(w.to_bytes(2, "big") for w in [modulus, *coeffs]))
    return proofs


def _samples(seed: int, shapes: list[tuple[int, int]], scale: float = 1.0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(t, h, generator=gen) * scale).to(torch.bfloat16) for t, h in shapes]


# --- building -----------------------------------------------------------------------------------


def test_batch_of_reference_vectors_matches_reference_bytes() -> None:
    """Vectors of three hidden sizes (one with a modulus below PRIME) proven in one call."""
    assert VECTORS, f"no TOPLOC vectors in {VECTOR_DIR}"
    assert len({v["decode_batching_size"] for v in VECTORS}) == len({v["topk"] for v in VECTORS}) == 1
    acts = [_activations(v["activations_b64_le_int16"], v["shape"]) for v in VECTORS]
    proofs = build_proofs_batch(acts, chunk_size=VECTORS[0]["decode_batching_size"], topk=VECTORS[0]["topk"])
    assert [[p.hex() for p in ps] for ps in proofs] == [v["proofs_hex"] for v in VECTORS]


def test_batch_equals_per_sample_and_reference_on_mixed_shapes() -> None:
    shapes = [(1, 128), (3, 128), (32, 64), (70, 64), (0, 64), (5, 7), (33, 5), (40, 16), (2, 3000)]
    acts = _samples(0, shapes)
    batch = build_proofs_batch(acts)
    assert batch == [build_proofs(a) for a in acts]
    assert batch == [_reference_proofs(a, 32, 128) for a in acts]


def test_batch_with_colliding_moduli_matches_reference() -> None:
    """Chunks of 32 x 4096 entries: indices above PRIME, some chunks needing a smaller modulus."""
    acts = _samples(1, [(64, 4096), (40, 4096)], scale=0.01)
    for a in acts:
        flat = a.view(-1)
        flat[7], flat[7 + PRIME] = 50.0, -60.0  # 7 and 7 + PRIME collide mod PRIME in the first chunk
    batch = build_proofs_batch(acts)
    assert int.from_bytes(batch[0][0][:2], "big") < PRIME
    assert batch == [_reference_proofs(a, 32, 128) for a in acts]


def test_tie_heavy_activations_match_the_sorted_topk_reference() -> None:
    """Few distinct magnitudes: which tied entries enter the top-k is torch's choice, pinned here."""
    gen = torch.Generator().manual_seed(2)
    shapes = [(1, 128), (4, 128), (32, 128), (45, 96), (9, 300)]
    acts = [(torch.randint(-6, 7, shape, generator=gen).float() / 4).to(torch.bfloat16) for shape in shapes]
    for a in acts:  # unsorted topk (what we run) selects the same set as sorted topk (the reference)
        for start in range(0, a.shape[0], 32):
            flat = a[start : start + 32].reshape(1, -1).abs()
            k = min(128, flat.shape[1])
            fast = flat.topk(k, dim=1, sorted=False).indices.sort(dim=1).values
            assert torch.equal(fast, flat.topk(k, dim=1).indices.sort(dim=1).values)
    assert build_proofs_batch(acts) == [_reference_proofs(a, 32, 128) for a in acts]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 24)), min_size=1, max_size=6),
    st.integers(1, 9),
    st.integers(1, 140),
    st.integers(0, 2**32 - 1),
)
def test_fuzz_batch_equals_per_sample_and_reference(shapes, chunk_size: int, topk: int, seed: int) -> None:
    acts = _samples(seed, shapes)
    batch = build_proofs_batch(acts, chunk_size=chunk_size, topk=topk)
    assert batch == [build_proofs(a, chunk_size=chunk_size, topk=topk) for a in acts]
    assert batch == [_reference_proofs(a, chunk_size, topk) for a in acts]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("shape", [(4, 16), (40, 300), (1, 3)])
def test_batch_rejects_a_non_finite_sample_by_index(bad: float, shape: tuple[int, int]) -> None:
    """Non-finite values are found among the top-k, wherever they are and however many."""
    gen = torch.Generator().manual_seed(3)
    for trial in range(20):
        acts = _samples(trial, [(4, 16), shape, (6, 16)])
        flat = acts[1].view(-1)
        flat[torch.randint(0, flat.numel(), (1 + trial % 3,), generator=gen)] = bad
        with pytest.raises(ToplocError, match="sample 1"):
            build_proofs_batch(acts)
    assert build_proofs_batch([]) == []


# --- verifying ----------------------------------------------------------------------------------


def _word(proof: bytes, index: int, value: int) -> bytes:
    return proof[: 2 * index] + value.to_bytes(2, "big") + proof[2 * index + 2 :]


TAMPERS = [
    ("honest", lambda p: p),
    ("truncated", lambda p: [p[0][:-1], *p[1:]]),
    ("modulus zero", lambda p: [_word(p[0], 0, 0), *p[1:]]),
    ("modulus above prime", lambda p: [_word(p[0], 0, PRIME + 1), *p[1:]]),
    ("modulus below points", lambda p: [_word(p[0], 0, 3), *p[1:]]),
    ("coefficient 0xffff", lambda p: [_word(p[0], 1, 0xFFFF), *p[1:]]),
    ("coefficient edited", lambda p: [_word(p[0], 4, 12345), *p[1:]]),
    ("None", lambda p: [None, *p[1:]]),
    ("str", lambda p: [p[0].hex(), *p[1:]]),
    ("one missing", lambda p: p[:-1]),
    ("one extra", lambda p: [*p, p[0]]),
    ("no proofs", lambda p: []),
    ("not a list", lambda p: None),
    ("a blob", lambda p: join_proofs(p)),
    ("a tuple", lambda p: tuple(p)),
    ("bytearray", lambda p: [bytearray(x) for x in p]),
]


@pytest.fixture(scope="module")
def honest() -> tuple[list[torch.Tensor], list[list[bytes]]]:
    acts = _samples(4, [(70, 64), (3, 128), (33, 5), (0, 64), (32, 64), (1, 128)])
    return acts, build_proofs_batch(acts)


def test_batch_verify_equals_per_sample_under_every_tamper(honest) -> None:
    """Each sample of one batch gets another tamper; every result equals its own verify_proofs."""
    acts, proofs = honest
    cases = [(a, tamper(list(p))) for _, tamper in TAMPERS for a, p in zip(acts, proofs, strict=True) if p]
    claimed = [p for _, p in cases]
    gen = torch.Generator().manual_seed(5)
    exact = [a for a, _ in cases]
    noisy = [a.float() * (1 + 0.01 * torch.randn(a.shape, generator=gen)) for a in exact]
    for verifier_acts in (exact, noisy):
        batch = verify_proofs_batch(verifier_acts, claimed)
        assert batch == [verify_proofs(a, p) for a, p in zip(verifier_acts, claimed, strict=True)]
    reasons = [toploc_verdict(checks)[1] for checks in verify_proofs_batch(exact, claimed)]
    honest_cases = sum(1 for p in proofs if p)  # the empty sample has no proofs, so no case
    assert reasons[:honest_cases] == [None] * honest_cases
    assert set(reasons[honest_cases:]) >= {"proof_malformed", "proof_count_mismatch", "toploc_exp_mismatch"}


def test_batch_verify_of_empty_and_proofless_samples(honest) -> None:
    acts, proofs = honest
    empty = torch.zeros(0, 64)
    got = verify_proofs_batch([empty, acts[0], empty], [[], proofs[0], [b"\x00" * 258]])
    assert got == [verify_proofs(empty, []), verify_proofs(acts[0], proofs[0]), verify_proofs(empty, [b"\x00" * 258])]
    assert toploc_verdict(got[2]) == (False, "proof_count_mismatch")
    assert verify_proofs_batch([], []) == []
    with pytest.raises(ValueError):
        verify_proofs_batch([acts[0]], [])


def test_batch_blob_verify_equals_per_sample(honest) -> None:
    acts, proofs = honest
    blobs = [join_proofs(p) for p in proofs]
    hostile = [blobs[0][:-2], b"", bytes(len(blobs[1])), blobs[2] + b"\x01", None, memoryview(blobs[4]), [blobs[5]]]
    all_acts = acts + [acts[i % len(acts)] for i in range(len(hostile))]
    all_blobs = blobs + hostile
    batch = verify_proof_blobs_batch(all_acts, all_blobs)
    assert batch == [verify_proof_blob(a, b) for a, b in zip(all_acts, all_blobs, strict=True)]
    assert [toploc_verdict(c) for c in batch[: len(acts)]] == [(True, None)] * len(acts)


_proof_like = st.one_of(
    st.binary(max_size=300),
    st.binary(min_size=258, max_size=258),
    st.binary(min_size=12, max_size=12),
    st.none(),
    st.integers(),
    st.text(max_size=5),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.lists(_proof_like, max_size=4), _proof_like), min_size=1, max_size=5))
def test_fuzz_hostile_batches_never_raise_and_equal_per_sample(hostile) -> None:
    acts = _samples(6, [(70, 64), (33, 5), (1, 128), (0, 8), (40, 3)])
    chosen = [acts[i % len(acts)] for i in range(len(hostile))]
    assert verify_proofs_batch(chosen, hostile) == [verify_proofs(a, p) for a, p in zip(chosen, hostile, strict=True)]
    blob_checks = verify_proof_blobs_batch(chosen, hostile)
    assert blob_checks == [verify_proof_blob(a, p) for a, p in zip(chosen, hostile, strict=True)]


# --- the field underneath -----------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 127, 128, 129, 200])
@pytest.mark.parametrize("domain", [300, PRIME])
def test_interpolation_matches_textbook_newton(n: int, domain: int) -> None:
    rng = np.random.default_rng(n * 7 + domain)
    batch = 3
    xs = np.stack([rng.choice(max(domain, n), n, replace=False) for _ in range(batch)])
    ys = rng.integers(0, 65536, (batch, n))
    ys[0] = PRIME - 1  # the largest values: the widest sums the float64 arithmetic must hold exactly
    coeffs = interpolate(xs, ys)
    for b in range(batch):
        assert coeffs[b].tolist() == _newton_coeffs(xs[b].tolist(), ys[b].tolist())
    assert (evaluate(coeffs, xs) == ys % PRIME).all()


def test_evaluate_matches_horner_with_python_integers() -> None:
    rng = np.random.default_rng(8)
    coeffs = rng.integers(0, PRIME, (4, 131))
    coeffs[0] = PRIME - 1
    points = rng.integers(0, 3 * PRIME, (4, 9))
    got = evaluate(coeffs, points)
    for b in range(4):
        for j, x in enumerate(points[b].tolist()):
            want = 0
            for c in reversed(coeffs[b].tolist()):
                want = (want * x + c) % PRIME
            assert got[b, j] == want
    assert evaluate(coeffs[0], points[0]).tolist() == got[0].tolist()
    assert evaluate(np.zeros((2, 0), dtype=np.int64), points[:2]).tolist() == [[0] * 9] * 2
    assert evaluate(np.zeros((0, 5), dtype=np.int64), np.zeros((0, 3), dtype=np.int64)).shape == (0, 3)
    assert interpolate(np.zeros((0, 5), dtype=np.int64), np.zeros((0, 5), dtype=np.int64)).shape == (0, 5)
    assert interpolate(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)).shape == (0,)


def test_batched_moduli_equal_one_by_one() -> None:
    rng = np.random.default_rng(9)
    rows = np.stack([rng.choice(32 * 4096, 128, replace=False) for _ in range(40)])
    rows[0, :2] = [11, 11 + PRIME]  # a forced collision at PRIME
    moduli = find_injective_moduli(rows)
    assert moduli.tolist() == [find_injective_modulus(r) for r in rows]
    assert moduli[0] < PRIME and (moduli < PRIME).sum() >= 1
    for m, r in zip(moduli.tolist(), rows, strict=True):
        assert len(set((r % m).tolist())) == r.size
        assert m == PRIME or all(len(set((r % k).tolist())) < r.size for k in range(m + 1, min(m + 50, PRIME + 1)))
    with pytest.raises(ToplocError):
        find_injective_moduli([[1, 2, 2]])
    with pytest.raises(ToplocError):
        interpolate([3, 3 + PRIME], [1, 2])
