"""Signed HTTP requests: EIP-191 `personal_sign` over a canonical string of method, path,
body hash, timestamp and nonce.

Nodes and CLIs sign with their key; the backend recovers the address, so no password or
token ever crosses the wire and a captured request cannot be replayed (nonce) or kept for
later (timestamp skew).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from eth_account import Account
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from eth_utils import is_address, to_checksum_address

from proofpool.errors import ProofpoolError

HEADER_ADDRESS = "X-Address"
HEADER_TIMESTAMP = "X-Timestamp"
HEADER_NONCE = "X-Nonce"
HEADER_SIGNATURE = "X-Signature"
NONCE_MAX_LEN = 64


class AuthError(ProofpoolError):
    """A signed request was refused; `reason` is a stable code for the JSON error body."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(detail)


@dataclass(frozen=True)
class SignedHeaders:
    """The four headers of a signed request, parsed."""

    address: str
    timestamp: int
    nonce: str
    signature: bytes


def canonical_message(method: str, path: str, body: bytes, timestamp: int, nonce: str) -> str:
    """The exact text that is signed; `path` includes the query string if there is one."""
    body_hash = hashlib.sha256(body).hexdigest()
    return f"proofpool-request-v1\n{method.upper()}\n{path}\n{body_hash}\n{timestamp}\n{nonce}"


def sign_request(
    account: LocalAccount, method: str, path: str, body: bytes = b"", now: float | None = None
) -> dict[str, str]:
    """Headers that authenticate one request as `account`."""
    timestamp = int(now if now is not None else time.time())
    nonce = secrets.token_hex(16)
    message = encode_defunct(text=canonical_message(method, path, body, timestamp, nonce))
    signature = account.sign_message(message).signature
    return {
        HEADER_ADDRESS: account.address,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: "0x" + bytes(signature).hex(),
    }


def parse_headers(headers: Mapping[str, str]) -> SignedHeaders:
    """The signed-request headers, or `AuthError` naming what is missing or malformed."""
    lowered = {k.lower(): v for k, v in headers.items()}
    values = {}
    for name in (HEADER_ADDRESS, HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE):
        value = lowered.get(name.lower())
        if not value:
            raise AuthError("missing_header", f"header {name} is required")
        values[name] = value.strip()
    if not is_address(values[HEADER_ADDRESS]):
        raise AuthError("bad_address", f"{HEADER_ADDRESS} is not an address")
    try:
        timestamp = int(values[HEADER_TIMESTAMP])
    except ValueError:
        raise AuthError("bad_timestamp", f"{HEADER_TIMESTAMP} must be unix seconds") from None
    nonce = values[HEADER_NONCE]
    if len(nonce) > NONCE_MAX_LEN or not nonce.isascii() or not nonce.isprintable():
        raise AuthError("bad_nonce", f"{HEADER_NONCE} must be printable ASCII of at most {NONCE_MAX_LEN} chars")
    try:
        signature = bytes.fromhex(values[HEADER_SIGNATURE].removeprefix("0x"))
    except ValueError:
        raise AuthError("bad_signature", f"{HEADER_SIGNATURE} is not hex") from None
    if len(signature) != 65:
        raise AuthError("bad_signature", f"{HEADER_SIGNATURE} must be 65 bytes")
    return SignedHeaders(to_checksum_address(values[HEADER_ADDRESS]), timestamp, nonce, signature)


def verify_request(
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    max_skew: int = 300,
    now: float | None = None,
) -> SignedHeaders:
    """Check the signature and timestamp of a request; returns the verified headers.

    Nonce uniqueness is the caller's job (it needs shared state: Redis in the backend).
    """
    signed = parse_headers(headers)
    current = now if now is not None else time.time()
    if abs(current - signed.timestamp) > max_skew:
        raise AuthError("stale_timestamp", f"timestamp is more than {max_skew} s away from the server clock")
    message = encode_defunct(text=canonical_message(method, path, body, signed.timestamp, signed.nonce))
    try:
        recovered = Account.recover_message(message, signature=signed.signature)
    except Exception as exc:  # eth-keys raises several types for junk signatures
        raise AuthError("bad_signature", "signature does not recover to an address") from exc
    if recovered != signed.address:
        raise AuthError("address_mismatch", f"signature is not from {signed.address}")
    return signed
