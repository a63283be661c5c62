"""What a URL may name, checked before the ledger is asked: a refusal names the bad value and the
form it should take (a 4xx page), never an empty page or a stack trace.

The forms are the ledger API's (docs/ledger.md): addresses in any case but a mixed-case one must
carry a valid checksum (it is probably a typo), work keys 0x and 64 hex digits (as are the file
keys and transaction hashes a search takes: `is_work_key` tells the form, not what it names),
pool ids non-negative 64-bit integers.
"""

from __future__ import annotations

import re

from eth_utils import is_checksum_address, to_checksum_address
from proofpool.explorer.errors import BadInput

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_WORK_KEY = re.compile(r"0x[0-9a-fA-F]{64}")
_POOL_ID = re.compile(r"[0-9]{1,19}")
_POSITION = re.compile(r"([0-9]{1,19})-([0-9]{1,19})")
INT64_MAX = 2**63 - 1


def is_address(text: str) -> bool:
    """Whether `text` has the form of an address (checksum not checked)."""
    return _ADDRESS.fullmatch(text) is not None


def is_work_key(text: str) -> bool:
    """Whether `text` has the form of a work key (0x and 64 hex digits: also a file key or a
    transaction hash)."""
    return _WORK_KEY.fullmatch(text) is not None


def is_pool_id(text: str) -> bool:
    return _POOL_ID.fullmatch(text) is not None and int(text) <= INT64_MAX


def parse_address(text: str) -> str:
    """The checksummed address `text` names (as the API stores and returns it)."""
    if not is_address(text):
        raise BadInput(f"{text!r} is not an address: 0x and 40 hex digits")
    digits = text[2:]
    if digits not in (digits.lower(), digits.upper()) and not is_checksum_address(text):
        raise BadInput(f"{text} has a wrong checksum (mixed case): check it for a typo, or write it in lowercase")
    return to_checksum_address(text)


def parse_work_key(text: str) -> str:
    """A work key (a file's sha256 or a bundle key) in lowercase 0x-hex."""
    if not is_work_key(text):
        raise BadInput(f"{text!r} is not a work key: 0x and 64 hex digits")
    return text.lower()


def parse_pool_id(text: str) -> int:
    if not is_pool_id(text):
        raise BadInput(f"{text!r} is not a pool id: a whole number from 0 to {INT64_MAX}")
    return int(text)


def parse_position(text: str) -> tuple[int, int]:
    """A chain position `<block>-<log index>` (the live feed's `after`)."""
    match = _POSITION.fullmatch(text)
    if match is None or max(int(match[1]), int(match[2])) > INT64_MAX:
        raise BadInput(f"{text!r} is not a chain position: <block>-<log index>, e.g. 1200-3")
    return int(match[1]), int(match[2])


def format_position(block: int, log_index: int) -> str:
    return f"{block}-{log_index}"
