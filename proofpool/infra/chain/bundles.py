"""Bundles: many rollout files recorded as one submission (`ComputePool.submitWorkBundle`).

A bundle's on-chain key is `keccak256(abi.encodePacked(fileKeys, fileUnits))`: the packed encoding
pads every array element to 32 bytes, so the preimage is the file keys back to back followed by
each unit count as a 32-byte big-endian word. The contract refuses keys that do not strictly
ascend, which makes the key of a set of files unique (one order) and every file of a bundle
distinct; `canonical` puts a node's files in that order before it signs the transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

from eth_utils import keccak

MAX_BUNDLE_FILES = 128
"""Most files one bundle holds (the contract's `MAX_BUNDLE_FILES`)."""

_MAX_UNITS = 2**64 - 1


def _check_file(key: bytes, units: int) -> None:
    if not isinstance(key, bytes | bytearray) or len(key) != 32:
        raise ValueError(f"a file key must be 32 bytes (a sha256), got {key!r}")
    if isinstance(units, bool) or not isinstance(units, int) or not 0 < units <= _MAX_UNITS:
        raise ValueError(f"a file's work units must be an integer in 1..2^64-1, got {units!r}")


def bundle_key(file_keys: Sequence[bytes], file_units: Sequence[int]) -> bytes:
    """The key `submitWorkBundle` records for these files (32 bytes), bit for bit the contract's.

    Computed for any order given (the contract would refuse keys that do not ascend: see
    `canonical`); raises ValueError for arrays of different lengths or a malformed key or count.
    """
    if len(file_keys) != len(file_units):
        raise ValueError(f"{len(file_keys)} file keys but {len(file_units)} unit counts")
    for key, units in zip(file_keys, file_units, strict=True):
        _check_file(key, units)
    packed = b"".join(bytes(key) for key in file_keys) + b"".join(units.to_bytes(32, "big") for units in file_units)
    return keccak(packed)


def canonical(files: Iterable[tuple[bytes, int]]) -> tuple[list[bytes], list[int]]:
    """`files` ((sha256, work units) pairs) as the contract takes them: keys ascending, units alongside.

    Raises ValueError for no file, more than MAX_BUNDLE_FILES, a key given twice (the chain would
    refuse the bundle), or a malformed key or count.
    """
    given = list(files)
    for key, units in given:
        _check_file(key, units)
    if not given:
        raise ValueError("a bundle needs at least one file")
    if len(given) > MAX_BUNDLE_FILES:
        raise ValueError(f"a bundle holds at most {MAX_BUNDLE_FILES} files, got {len(given)}")
    ordered = sorted((bytes(key), units) for key, units in given)
    for (key, _), (following, _) in pairwise(ordered):
        if key == following:
            raise ValueError(f"file {key.hex()} is twice in the bundle")
    return [key for key, _ in ordered], [units for _, units in ordered]


def is_canonical(file_keys: Sequence[bytes], file_units: Sequence[int]) -> bool:
    """Whether the contract would accept this bundle's shape: 1..MAX_BUNDLE_FILES files, as many unit
    counts as keys, keys strictly ascending, each key 32 bytes and each count in 1..2^64-1."""
    if not 0 < len(file_keys) <= MAX_BUNDLE_FILES or len(file_units) != len(file_keys):
        return False
    try:
        for key, units in zip(file_keys, file_units, strict=True):
            _check_file(key, units)
    except ValueError:
        return False
    return all(bytes(a) < bytes(b) for a, b in pairwise(file_keys))
