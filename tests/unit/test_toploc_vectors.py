"""TOPLOC against the reference library's vectors, byte for byte and stat for stat."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from proofpool.core.toploc import build_proofs, toploc_verdict, verify_proofs
from proofpool.core.toploc.field import PRIME, evaluate, find_injective_modulus, interpolate, inverse_table
from tests.toploc_vectors import VECTOR_DIR, VECTOR_FILES


def _activations(b64: str, shape: list[int]) -> torch.Tensor:
    bits = np.frombuffer(base64.b64decode(b64), dtype="<i2").reshape(shape)
    return torch.from_numpy(bits.copy()).view(torch.bfloat16)


@pytest.fixture(params=VECTOR_FILES, ids=[p.stem for p in VECTOR_FILES])
def vector(request: pytest.FixtureRequest) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(request.param).read_text())
    assert data["dtype"] == "bfloat16" and data["skip_prefill"] is True
    return data


def test_vectors_are_present() -> None:
    assert VECTOR_FILES, f"no TOPLOC vectors in {VECTOR_DIR}"


def test_build_matches_reference_bytes(vector: dict[str, Any]) -> None:
    acts = _activations(vector["activations_b64_le_int16"], vector["shape"])
    proofs = build_proofs(acts, chunk_size=vector["decode_batching_size"], topk=vector["topk"])
    assert [p.hex() for p in proofs] == vector["proofs_hex"]
    assert [int.from_bytes(p[:2], "big") for p in proofs] == vector["moduli"]
    assert all(len(p) == 2 + 2 * vector["topk"] for p in proofs)


@pytest.mark.parametrize("candidate", ["same", "noise_1pct", "unrelated"])
def test_verify_matches_reference_stats(vector: dict[str, Any], candidate: str) -> None:
    entry = vector["candidates"][candidate]
    acts = _activations(entry["activations_b64_le_int16"], vector["shape"])
    proofs = [bytes.fromhex(h) for h in vector["proofs_hex"]]
    checks = verify_proofs(acts, proofs, chunk_size=vector["decode_batching_size"], topk=vector["topk"])
    got = [
        {"exp_mismatches": c.exp_mismatches, "mant_err_mean": c.mant_err_mean, "mant_err_median": c.mant_err_median}
        for c in checks
    ]
    assert got == entry["reference_stats"]
    assert all(c.error is None for c in checks)
    assert all(isinstance(c.mant_err_mean, float) and isinstance(c.exp_mismatches, int) for c in checks)


@pytest.mark.parametrize(
    "candidate, expected",
    [("same", (True, None)), ("noise_1pct", (True, None)), ("unrelated", (False, "toploc_exp_mismatch"))],
)
def test_verdict_on_reference_candidates(vector: dict[str, Any], candidate: str, expected: tuple) -> None:
    acts = _activations(vector["candidates"][candidate]["activations_b64_le_int16"], vector["shape"])
    proofs = [bytes.fromhex(h) for h in vector["proofs_hex"]]
    assert toploc_verdict(verify_proofs(acts, proofs)) == expected


def test_small_modulus_vector_is_exercised() -> None:
    moduli = [m for p in VECTOR_FILES for m in json.loads(p.read_text())["moduli"]]
    assert any(m < PRIME for m in moduli), "no vector has a chunk whose modulus is below 65497"


# --- the field underneath ---------------------------------------------------------------------


def _lagrange_eval(xs: list[int], ys: list[int], at: int) -> int:
    total = 0
    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        num, den = 1, 1
        for j, xj in enumerate(xs):
            if j != i:
                num = num * (at - xj) % PRIME
                den = den * (xi - xj) % PRIME
        total = (total + yi * num * pow(den, PRIME - 2, PRIME)) % PRIME
    return total


def test_interpolation_agrees_with_textbook_lagrange() -> None:
    rng = np.random.default_rng(0)
    xs = rng.choice(PRIME, size=(3, 12), replace=False)
    ys = rng.integers(0, 65536, size=(3, 12))  # bits above the prime reduce mod PRIME
    coeffs = interpolate(xs, ys)
    probes = rng.integers(0, PRIME, size=(3, 5))
    got = evaluate(coeffs, probes)
    for b in range(3):
        want = [_lagrange_eval(xs[b].tolist(), (ys[b] % PRIME).tolist(), int(p)) for p in probes[b]]
        assert got[b].tolist() == want
        assert evaluate(coeffs[b], xs[b]).tolist() == (ys[b] % PRIME).tolist()


def test_inverse_table() -> None:
    table = inverse_table()
    sample = np.arange(1, PRIME, 997)
    assert ((table[sample] * sample) % PRIME == 1).all()


def test_injective_modulus_steps_down_past_collisions() -> None:
    assert find_injective_modulus([0, 5, 70000]) == PRIME
    # 5 and 5 + PRIME collide mod PRIME; 5 and 5 + PRIME + ... : the next modulus that separates them
    m = find_injective_modulus([5, 5 + PRIME, 10 + 2 * (PRIME - 1)])
    residues = [v % m for v in [5, 5 + PRIME, 10 + 2 * (PRIME - 1)]]
    assert m < PRIME and len(set(residues)) == 3
    assert all(len({v % k for v in [5, 5 + PRIME, 10 + 2 * (PRIME - 1)]}) < 3 for k in range(m + 1, PRIME + 1))
