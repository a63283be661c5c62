"""`proofpool.infra.chain.bundles`: the bundle key as the contract computes it, and the canonical order.

The contract's own answer for random bundles is checked on anvil
(tests/contracts/test_bundles.py::TestSubmit::test_the_contract_key_is_the_python_key); here the
key is checked against a second encoder (eth_abi's standard encoding, whose array words are the
32-byte words abi.encodePacked concatenates) and a vector pinned from the contract.
"""

from __future__ import annotations

import hashlib
import random

import pytest
from eth_abi import encode as abi_encode
from eth_utils import keccak

from proofpool.infra.chain.bundles import MAX_BUNDLE_FILES, bundle_key, canonical, is_canonical

PINNED_FILES = [(hashlib.sha256(b"rollout-%d" % i).digest(), 4096 + i) for i in range(3)]
PINNED_KEY = bytes.fromhex("c528e792b49acc6bc2555ad471c1378de91f1ad7cfae8597a2126234d686bb73")
"""submitWorkBundle's key for PINNED_FILES, as the contract returned it (also asserted on anvil)."""


def _reference_key(keys: list[bytes], units: list[int]) -> bytes:
    """keccak of the array words cut out of the standard ABI encoding of (bytes32[], uint64[])."""
    encoded = abi_encode(["bytes32[]", "uint64[]"], [keys, units])
    count = len(keys)
    keys_words = encoded[96 : 96 + 32 * count]  # after two offsets and the first length
    units_words = encoded[128 + 32 * count :]  # after the second length
    return keccak(keys_words + units_words)


def test_pinned_vector() -> None:
    assert bundle_key(*canonical(PINNED_FILES)) == PINNED_KEY


@pytest.mark.parametrize("seed", range(20))
def test_key_matches_the_reference_encoding(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.randint(1, MAX_BUNDLE_FILES)
    keys, units = canonical((rng.randbytes(32), rng.randint(1, 2**64 - 1)) for _ in range(count))
    assert bundle_key(keys, units) == _reference_key(keys, units)


def test_key_commits_to_order_and_units() -> None:
    keys, units = canonical(PINNED_FILES)
    assert bundle_key(keys[::-1], units[::-1]) != PINNED_KEY
    assert bundle_key(keys, [units[0] + 1, *units[1:]]) != PINNED_KEY
    assert bundle_key(keys[:2], units[:2]) != PINNED_KEY


def test_canonical_sorts_by_key_and_keeps_units_alongside() -> None:
    keys, units = canonical([(b"\x03" * 32, 3), (b"\x01" * 32, 1), (b"\x02" * 32, 2)])
    assert keys == [b"\x01" * 32, b"\x02" * 32, b"\x03" * 32]
    assert units == [1, 2, 3]
    assert is_canonical(keys, units)
    assert not is_canonical(keys[::-1], units)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ([], "at least one file"),
        ([(bytes([i]) * 32, 1) for i in range(MAX_BUNDLE_FILES + 1)], "at most 128"),
        ([(b"\x01" * 32, 1), (b"\x01" * 32, 2)], "twice"),
        ([(b"\x01" * 31, 1)], "32 bytes"),
        ([(b"\x01" * 32, 0)], "work units"),
        ([(b"\x01" * 32, 2**64)], "work units"),
        ([(b"\x01" * 32, True)], "work units"),
        ([("ab" * 32, 1)], "32 bytes"),
    ],
    ids=["empty", "too_many", "duplicate", "short_key", "zero_units", "units_overflow", "bool_units", "hex_key"],
)
def test_canonical_refuses(files: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        canonical(files)


def test_bundle_key_refuses_arrays_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="2 file keys but 1 unit counts"):
        bundle_key([b"\x01" * 32, b"\x02" * 32], [1])


def test_a_bundle_of_max_files_is_canonical() -> None:
    keys, units = canonical((bytes([i // 256, i % 256]) * 16, 1) for i in range(MAX_BUNDLE_FILES))
    assert is_canonical(keys, units)
    assert not is_canonical([*keys, b"\xff" * 32], [*units, 1])
