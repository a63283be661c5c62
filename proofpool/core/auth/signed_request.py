"""Signed HTTP requests: EIP-191 `personal_sign` over a canonical text that names the
deployment (chain id and ComputePool contract), the host the client sends to, the method,
path, body hash, timestamp and nonce.

The signer (`sign_request`, used by `proofpool.infra.http.signed_client`) and the verifier
(`verify_request`, used by `proofpool.backend.api.deps`) both live here and share `canonical_message`,
so what is signed and what is checked cannot drift apart. Nodes and CLIs sign with their key;
the backend recovers the address, so no password or token ever crosses the wire. Each part of
the message closes one way to reuse a captured request:

- chain id + ComputePool address: a request made for one deployment (the devnet, a testnet,
  another pool contract on the same chain) recovers to a different address anywhere else;
- host: a request sent to one backend host is refused by another host of the same deployment,
  which may keep its own nonce store;
- timestamp: the request is good from `max_ahead` s before to `max_age` s after its timestamp
  on the server clock (`TimeWindow`);
- nonce: used once; the backend remembers it for as long as the timestamp window lets the
  request pass, and refuses what its store can no longer vouch for (`proofpool.infra.nonce_store`).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from coincurve import PublicKey
from eth_account.messages import encode_defunct
from eth_account.signers.local import LocalAccount
from eth_hash.auto import keccak
from eth_utils import is_address, to_checksum_address

from proofpool.core.errors import ProofpoolError

HEADER_ADDRESS = "X-Address"
HEADER_TIMESTAMP = "X-Timestamp"
HEADER_NONCE = "X-Nonce"
HEADER_SIGNATURE = "X-Signature"
NONCE_MAX_LEN = 64
MESSAGE_VERSION = "proofpool-request-v2"
"""First line of the signed text; v2 added chain id, ComputePool address and host (v1 had none,
so a v1 signature recovers to another address and is refused as `address_mismatch`)."""
DEFAULT_PORTS = (":80", ":443")
EIP191_PREFIX = b"\x19Ethereum Signed Message:\n"
"""`personal_sign`'s prefix (EIP-191 version 0x45), followed by the message length in decimal."""
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
CHECKSUM_CACHE_SIZE = 16_384
"""Header addresses whose checksummed form is remembered (a fleet sends the same few thousand)."""


class AuthError(ProofpoolError):
    """A signed request was refused; `reason` is a stable code for the JSON error body, and
    `retry_after` the seconds after which the same request signed again would pass (the
    Retry-After header), when waiting helps."""

    def __init__(self, reason: str, detail: str, *, retry_after: int | None = None) -> None:
        self.reason, self.retry_after = reason, retry_after
        super().__init__(detail)


def normalize_host(authority: str) -> str:
    """`host[:port]` as signed and compared: lower case, without a default port (80 or 443),
    which is how HTTP clients write the Host header. `ValueError` for anything that is not an
    authority (empty, whitespace, a path, user info)."""
    host = authority.strip().lower()
    if not host or any(c.isspace() or c in "/@?#\\" for c in host) or not host.isascii():
        raise ValueError(f"not a host[:port]: {authority!r}")
    for port in DEFAULT_PORTS:
        if host.endswith(port):
            return host[: -len(port)]
    return host


def host_of_url(base_url: str) -> str:
    """The normalized authority of a base URL (`http://127.0.0.1:8000/` -> `127.0.0.1:8000`)."""
    netloc = urlsplit(base_url).netloc.rpartition("@")[2]
    return normalize_host(netloc)


@dataclass(frozen=True)
class Deployment:
    """The deployment a backend serves: the chain and its ComputePool contract (checksummed)."""

    chain_id: int
    pool_contract: str

    def __post_init__(self) -> None:
        if isinstance(self.chain_id, bool) or not isinstance(self.chain_id, int) or self.chain_id < 1:
            raise ValueError(f"chain id must be a positive integer, not {self.chain_id!r}")
        if not isinstance(self.pool_contract, str) or not is_address(self.pool_contract):
            raise ValueError(f"ComputePool address must be a 0x address, not {self.pool_contract!r}")
        object.__setattr__(self, "pool_contract", to_checksum_address(self.pool_contract))

    def describe(self) -> str:
        return f"chain {self.chain_id}, ComputePool {self.pool_contract}"


@dataclass(frozen=True)
class Audience:
    """Whom one signed request is for: a deployment, reached at one host (normalized)."""

    deployment: Deployment
    host: str

    @classmethod
    def for_base_url(cls, base_url: str, *, chain_id: int, pool_contract: str) -> Audience:
        """What a client talking to `base_url` signs for (the Host header its HTTP client sends)."""
        return cls(Deployment(chain_id, pool_contract), host_of_url(base_url))


@dataclass(frozen=True)
class TimeWindow:
    """Which timestamps the server accepts: from `max_age` s in the past (how long a signed
    request stays usable) to `max_ahead` s in the future (client clocks running fast)."""

    max_age: int
    max_ahead: int

    @property
    def nonce_ttl(self) -> int:
        """Seconds a used nonce must be remembered: a request accepted at server time s has a
        timestamp t >= s - max_ahead and passes until t + max_age, so until s + max_age +
        max_ahead at most (plus one for timestamps being whole seconds)."""
        return self.max_age + self.max_ahead + 1

    def check(self, timestamp: int, now: float) -> None:
        """`AuthError` unless `timestamp` lies in the window around `now`."""
        if timestamp < now - self.max_age:
            raise AuthError(
                "stale_timestamp", f"timestamp is more than {self.max_age} s behind the server clock ({int(now)})"
            )
        if timestamp > now + self.max_ahead:
            raise AuthError(
                "future_timestamp",
                f"timestamp is more than {self.max_ahead} s ahead of the server clock ({int(now)}): "
                "the client's clock runs fast; run NTP",
            )


@dataclass(frozen=True)
class SignedHeaders:
    """The four headers of a signed request, parsed."""

    address: str
    timestamp: int
    nonce: str
    signature: bytes


def request_target(raw_path: bytes, query: bytes = b"") -> str:
    """The request target as it goes over the wire (percent-encoded path, then `?query` if any):
    what both sides put in the signed text. The bytes on the wire, not a decoded path, so the
    client signs exactly what the server receives whatever characters the path holds."""
    target = raw_path + (b"?" + query if query else b"")
    return target.decode("latin-1")


def canonical_message(audience: Audience, method: str, path: str, body: bytes, timestamp: int, nonce: str) -> str:
    """The exact text that is signed; `path` is the `request_target` (with the query string if
    there is one).

    One field per line; only `path` is free text, and the lines after it have fixed forms,
    so no two requests share a text."""
    body_hash = hashlib.sha256(body).hexdigest()
    deployment = audience.deployment
    return "\n".join(
        (
            MESSAGE_VERSION,
            f"chain:{deployment.chain_id}",
            f"pool:{deployment.pool_contract.lower()}",
            f"host:{audience.host}",
            method.upper(),
            path,
            body_hash,
            str(timestamp),
            nonce,
        )
    )


def sign_request(
    account: LocalAccount,
    audience: Audience,
    method: str,
    path: str,
    body: bytes = b"",
    now: float | None = None,
) -> dict[str, str]:
    """Headers that authenticate one request as `account`, for `audience` only."""
    timestamp = int(now if now is not None else time.time())
    nonce = secrets.token_hex(16)
    message = encode_defunct(text=canonical_message(audience, method, path, body, timestamp, nonce))
    signature = account.sign_message(message).signature
    return {
        HEADER_ADDRESS: account.address,
        HEADER_TIMESTAMP: str(timestamp),
        HEADER_NONCE: nonce,
        HEADER_SIGNATURE: "0x" + bytes(signature).hex(),
    }


@functools.lru_cache(maxsize=CHECKSUM_CACHE_SIZE)
def _checksummed(address: str) -> str | None:
    """The EIP-55 form of a header address, None if it is not an address (a wrong mixed-case
    checksum included). Pure, so caching it changes no answer: a node's every request carries the
    same address, and the check costs two keccaks."""
    return to_checksum_address(address) if is_address(address) else None


def personal_sign_digest(text: str) -> bytes:
    """keccak256 of the EIP-191 `personal_sign` message of `text`: what `encode_defunct(text=...)`
    signs, computed in one step."""
    data = text.encode()
    return keccak(EIP191_PREFIX + str(len(data)).encode() + data)


def _standard_v(v: int) -> int:
    """The recovery id (0 or 1) of a signature's last byte, as `eth_account` reads it: 0/1 as they
    are, 27/28 (`personal_sign`), 35 and up as EIP-155 (`(v - 35) % 2`); `ValueError` otherwise."""
    if v in (0, 1):
        return v
    if v in (27, 28):
        return v - 27
    if v >= 35:
        return (v - 35) % 2
    raise ValueError(f"v {v} is invalid, must be one of: 0, 1, 27, 28, 35+")


def recover_address(digest: bytes, signature: bytes) -> bytes:
    """The 20-byte address whose key made the 65-byte `signature` (r, s, v) of the 32-byte `digest`.

    The same checks and the same answer as `Account.recover_message` (r and s below the curve
    order, v as `_standard_v` reads it, libsecp256k1's recovery), without eth-account's and
    eth-keys' layers of conversion around it, which cost twice the recovery itself on the
    heartbeat path. `ValueError` (or coincurve's own error) for a signature that recovers nothing.
    """
    if len(signature) != 65 or len(digest) != 32:
        raise ValueError("need a 65-byte signature of a 32-byte digest")
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:64], "big")
    if not (r < SECP256K1_N and s < SECP256K1_N):
        raise ValueError("r or s is not below the secp256k1 order")
    compact = signature[:64] + bytes((_standard_v(signature[64]),))
    public = PublicKey.from_signature_and_message(compact, digest, hasher=None).format(compressed=False)
    return keccak(public[1:])[-20:]


def parse_headers(headers: Mapping[str, str]) -> SignedHeaders:
    """The signed-request headers, or `AuthError` naming what is missing or malformed."""
    lowered = {k.lower(): v for k, v in headers.items()}
    values = {}
    for name in (HEADER_ADDRESS, HEADER_TIMESTAMP, HEADER_NONCE, HEADER_SIGNATURE):
        value = lowered.get(name.lower())
        if not value:
            raise AuthError("missing_header", f"header {name} is required")
        values[name] = value.strip()
    address = _checksummed(values[HEADER_ADDRESS])
    if address is None:
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
    return SignedHeaders(address, timestamp, nonce, signature)


def audience_of(headers: Mapping[str, str], deployment: Deployment, hosts: Collection[str]) -> Audience:
    """The audience a request reaching this server must have been signed for: our deployment
    and the Host it was sent to, which must be one of ours (`hosts`, normalized)."""
    raw = next((v for k, v in headers.items() if k.lower() == "host"), "")
    try:
        host = normalize_host(raw)
    except ValueError:
        host = None
    if host not in hosts:
        raise AuthError(
            "wrong_host",
            f"this backend takes signed requests sent to {', '.join(sorted(hosts))}, not to {raw!r}; "
            "sign for (and send to) its URL",
        )
    return Audience(deployment, host)


def verify_request(
    method: str,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    deployment: Deployment,
    hosts: Collection[str],
    window: TimeWindow,
    now: float | None = None,
) -> SignedHeaders:
    """Check host, timestamp and signature of a request; returns the verified headers.

    Nonce uniqueness is the caller's job: it needs shared state (`proofpool.infra.nonce_store`).
    """
    signed = parse_headers(headers)
    audience = audience_of(headers, deployment, hosts)
    window.check(signed.timestamp, time.time() if now is None else now)
    text = canonical_message(audience, method, path, body, signed.timestamp, signed.nonce)
    try:
        recovered = recover_address(personal_sign_digest(text), signed.signature)
    except Exception as exc:  # coincurve raises its own types for junk signatures
        raise AuthError("bad_signature", "signature does not recover to an address") from exc
    if recovered != bytes.fromhex(signed.address[2:]):
        raise AuthError(
            "address_mismatch",
            f"signature is not from {signed.address} for this request to {audience.host} on "
            f"{deployment.describe()}: the body, path or method changed after signing, or the client "
            "signed for another deployment or host",
        )
    return signed
