"""The object store through boto3: one S3 client built from settings, presigned uploads,
and the few object operations proofpool needs.

Every store is spoken to the same way (SeaweedFS on the devnet; S3, R2 or MinIO in
production): path-style addressing, signature v4, short timeouts, and errors mapped to
`StorageError` / `ServiceUnavailable` with a message that says what to try next. Callers
never see a botocore exception.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import httpx
from botocore.client import BaseClient
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.infra.config import Settings, get_settings

log = logging.getLogger(__name__)

SHA256_HEX = re.compile(r"[0-9a-f]{64}")
MAX_PRESIGN_TTL = 7 * 24 * 3600
"""Signature v4 refuses presigned URLs valid for more than seven days."""

_UNREACHABLE = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError)
_CREDENTIAL_CODES = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidClientTokenId"}
_MISSING_KEY_CODES = {"404", "NoSuchKey", "NotFound"}


class StorageError(ProofpoolError):
    """The object store refused an operation (missing bucket or key, bad credentials, bad digest)."""


class ObjectNotFound(StorageError):
    """No object under this key."""

    def __init__(self, bucket: str, key: str) -> None:
        self.bucket, self.key = bucket, key
        super().__init__(f"no object s3://{bucket}/{key}")


class ChecksumMismatch(StorageError):
    """The store computed another sha256 for the body than the one sent with it."""


class ObjectTooLarge(StorageError):
    """An object is larger than the caller is willing to read."""


class RangeNotSatisfiable(StorageError):
    """A ranged read that starts past the object's end."""


@dataclass
class ObjectStream:
    """An object's bytes from some offset on, read from the store as the chunks are consumed
    (`ObjectStore.open_range`); close it, or use it in a `with` block."""

    length: int
    """Bytes the reply carries (the object's size minus the offset)."""
    _body: Any
    _mapped: Any

    def chunks(self, size: int) -> Iterator[bytes]:
        try:
            yield from self._body.iter_chunks(size)
        except (BotoCoreError, OSError) as exc:
            raise self._mapped(exc) from exc

    def close(self) -> None:
        self._body.close()

    def __enter__(self) -> ObjectStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class StorageUnavailable(StorageError, ServiceUnavailable):
    """The object store cannot be reached or answered with a server error."""


@dataclass(frozen=True)
class PresignedUpload:
    """A presigned PUT: send exactly `headers` with a body of exactly the signed length and sha256.

    The signature binds the bucket and key (URL path), the Content-Length and the
    `x-amz-checksum-sha256` header (and Content-Type if set): the store refuses a PUT that
    changes any of them, and refuses a body whose sha256 differs from the signed checksum.
    """

    url: str
    key: str
    expires_at: datetime
    headers: dict[str, str]
    method: str = "PUT"


@dataclass(frozen=True)
class ObjectInfo:
    """What the store says about one object; `sha256_hex` only when it was uploaded with one."""

    key: str
    size: int
    etag: str
    last_modified: datetime | None = None
    sha256_hex: str | None = None
    content_type: str | None = None


def sha256_b64(sha256_hex: str) -> str:
    """The base64 form of a hex sha256, as S3's `x-amz-checksum-sha256` header wants it."""
    return base64.b64encode(bytes.fromhex(normalize_sha256(sha256_hex))).decode()


def normalize_sha256(sha256_hex: str) -> str:
    """Lower-case 64-hex digest without `0x`; `ValueError` for anything else."""
    value = sha256_hex.lower().removeprefix("0x")
    if not SHA256_HEX.fullmatch(value):
        raise ValueError(f"not a sha256 hex digest: {sha256_hex!r}")
    return value


@dataclass
class ObjectStore:
    """One bucket on one S3 endpoint. Thread-safe (boto3 clients are); build once per process."""

    client: BaseClient
    bucket: str
    endpoint_url: str

    @classmethod
    def from_settings(
        cls,
        settings: Settings | None = None,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_attempts: int = 3,
    ) -> ObjectStore:
        """A store for `settings.s3_bucket` at `settings.s3_endpoint_url` with its credentials."""
        settings = settings or get_settings()
        return cls(
            client=build_client(
                endpoint_url=settings.s3_endpoint_url,
                region=settings.s3_region,
                access_key=settings.s3_access_key,
                secret_key=settings.s3_secret_key,
                connect_timeout=connect_timeout,
                read_timeout=read_timeout,
                max_attempts=max_attempts,
            ),
            bucket=settings.s3_bucket,
            endpoint_url=settings.s3_endpoint_url,
        )

    # --- presigned uploads ---

    def presign_put(
        self,
        key: str,
        size: int,
        sha256_hex: str,
        ttl: int,
        *,
        content_type: str | None = None,
    ) -> PresignedUpload:
        """A PUT URL for exactly this key, this many bytes and this sha256, valid `ttl` seconds.

        Signing happens locally (no request to the store). `expires_at` is computed from a
        clock read before signing, so it is never later than the store's own expiry.
        """
        if size < 0:
            raise ValueError(f"size must be >= 0, not {size}")
        if not 1 <= ttl <= MAX_PRESIGN_TTL:
            raise ValueError(f"ttl must be 1..{MAX_PRESIGN_TTL} s, not {ttl}")
        checksum = sha256_b64(sha256_hex)
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": key,
            "ContentLength": size,
            "ChecksumSHA256": checksum,
        }
        headers = {"Content-Length": str(size), "x-amz-checksum-sha256": checksum}
        if content_type:
            params["ContentType"] = content_type
            headers["Content-Type"] = content_type
        signed_at = datetime.now(UTC)
        url = self.client.generate_presigned_url("put_object", Params=params, ExpiresIn=ttl, HttpMethod="PUT")
        return PresignedUpload(url=url, key=key, expires_at=signed_at + timedelta(seconds=ttl), headers=headers)

    # --- object operations ---

    def ensure_bucket(self) -> bool:
        """Create the bucket if it does not exist; True when it was created now."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return False
        except ClientError as exc:
            if _code(exc) not in {"404", "NoSuchBucket", "NotFound"}:
                raise self._mapped(exc, "check bucket") from exc
        except (BotoCoreError, OSError) as exc:
            raise self._mapped(exc, "check bucket") from exc
        region = self.client.meta.region_name
        location: dict[str, Any] = {}
        if region not in (None, "us-east-1"):  # AWS wants the region named for any other one
            location["CreateBucketConfiguration"] = {"LocationConstraint": region}
        try:
            self.client.create_bucket(Bucket=self.bucket, **location)
        except ClientError as exc:
            if _code(exc) in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                return False
            raise self._mapped(exc, "create bucket") from exc
        except (BotoCoreError, OSError) as exc:
            raise self._mapped(exc, "create bucket") from exc
        log.info("bucket created", extra={"bucket": self.bucket, "endpoint": self.endpoint_url})
        return True

    def check(self) -> None:
        """Raise unless the bucket answers (for health checks and start-up)."""
        self._call("check bucket", None, self.client.head_bucket, Bucket=self.bucket)

    def put_object(
        self, key: str, body: bytes, *, sha256_hex: str | None = None, content_type: str = "application/octet-stream"
    ) -> ObjectInfo:
        """Store `body` under `key`; the store verifies its sha256 (computed here if not given)."""
        digest = normalize_sha256(sha256_hex) if sha256_hex else hashlib.sha256(body).hexdigest()
        extra = {"ContentType": content_type} if content_type else {}
        reply = self._call(
            "put",
            key,
            self.client.put_object,
            Bucket=self.bucket,
            Key=key,
            Body=body,
            ContentLength=len(body),
            ChecksumSHA256=sha256_b64(digest),
            **extra,
        )
        return ObjectInfo(
            key=key, size=len(body), etag=reply.get("ETag", "").strip('"'), sha256_hex=digest, content_type=content_type
        )

    def get_object(self, key: str, *, max_bytes: int | None = None) -> bytes:
        """The object's bytes; `ObjectTooLarge` before reading when it exceeds `max_bytes`."""
        reply = self._call("get", key, self.client.get_object, Bucket=self.bucket, Key=key)
        size = int(reply.get("ContentLength", 0))
        if max_bytes is not None and size > max_bytes:
            reply["Body"].close()
            raise ObjectTooLarge(f"s3://{self.bucket}/{key} is {size} bytes, over the {max_bytes}-byte limit")
        try:
            return reply["Body"].read()
        except (BotoCoreError, OSError) as exc:
            raise self._mapped(exc, "get", key) from exc

    def open_range(self, key: str, start: int = 0) -> ObjectStream:
        """The object from byte `start` on, streamed (a ranged GET resumes a download; `get_object`
        reads whole objects into memory). `RangeNotSatisfiable` when the object is shorter."""
        extra = {"Range": f"bytes={start}-"} if start else {}
        try:
            reply = self.client.get_object(Bucket=self.bucket, Key=key, **extra)
        except ClientError as exc:
            if _code(exc) == "InvalidRange":
                raise RangeNotSatisfiable(f"s3://{self.bucket}/{key} is shorter than {start + 1} bytes") from exc
            raise self._mapped(exc, "get", key) from exc
        except (BotoCoreError, OSError) as exc:
            raise self._mapped(exc, "get", key) from exc
        return ObjectStream(
            int(reply.get("ContentLength", 0)), reply["Body"], lambda exc: self._mapped(exc, "get", key)
        )

    def head_object(self, key: str) -> ObjectInfo | None:
        """Size, etag and stored sha256 of an object, or None when there is no such key."""
        try:
            reply = self._call(
                "head", key, self.client.head_object, Bucket=self.bucket, Key=key, ChecksumMode="ENABLED"
            )
        except ObjectNotFound:
            return None
        return ObjectInfo(
            key=key,
            size=int(reply.get("ContentLength", 0)),
            etag=reply.get("ETag", "").strip('"'),
            last_modified=reply.get("LastModified"),
            sha256_hex=_b64_to_hex(reply.get("ChecksumSHA256")),
            content_type=reply.get("ContentType"),
        )

    def delete(self, key: str) -> None:
        """Remove an object; deleting a missing key is not an error (S3 semantics)."""
        self._call("delete", key, self.client.delete_object, Bucket=self.bucket, Key=key)

    def list_objects(self, prefix: str = "", limit: int | None = None) -> Iterator[ObjectInfo]:
        """Objects under `prefix` in key order, page by page."""
        paginator = self.client.get_paginator("list_objects_v2")
        seen = 0
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Contents", []):
                    yield ObjectInfo(
                        key=item["Key"],
                        size=int(item["Size"]),
                        etag=item.get("ETag", "").strip('"'),
                        last_modified=item.get("LastModified"),
                    )
                    seen += 1
                    if limit is not None and seen >= limit:
                        return
        except (ClientError, BotoCoreError, OSError) as exc:
            raise self._mapped(exc, "list", prefix) from exc

    # --- error mapping ---

    def _call(self, op: str, key: str | None, fn: Any, **kwargs: Any) -> Any:
        try:
            return fn(**kwargs)
        except (ClientError, BotoCoreError, OSError) as exc:
            raise self._mapped(exc, op, key) from exc

    def _mapped(self, exc: Exception, op: str, key: str | None = None) -> StorageError:
        """One of our errors, with a message naming the endpoint and what to try."""
        where = f"s3://{self.bucket}/{key}" if key else f"bucket {self.bucket!r}"
        if isinstance(exc, _UNREACHABLE) or (isinstance(exc, OSError) and not isinstance(exc, ClientError)):
            return StorageUnavailable(
                f"object store at {self.endpoint_url} unreachable ({op} {where}: {exc.__class__.__name__}). "
                "Start the devnet store with `proofpool storage up`, or set S3_ENDPOINT_URL to a running S3 endpoint"
            )
        if not isinstance(exc, ClientError):
            return StorageError(f"{op} {where} failed: {exc}")
        code, status = _code(exc), _status(exc)
        if code in _MISSING_KEY_CODES and key is not None:
            return ObjectNotFound(self.bucket, key)
        if code == "NoSuchBucket" or (code in _MISSING_KEY_CODES and key is None):
            return StorageError(
                f"bucket {self.bucket!r} does not exist at {self.endpoint_url}: create it with "
                "`proofpool storage up` (devnet) or in your provider's console, or set PROOFPOOL_S3_BUCKET"
            )
        if code in _CREDENTIAL_CODES or status == 403:
            return StorageError(
                f"object store at {self.endpoint_url} refused the credentials ({code} on {op} {where}): "
                "check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket policy"
            )
        if code in {"BadDigest", "XAmzContentSHA256Mismatch", "InvalidDigest"}:
            return ChecksumMismatch(f"{op} {where}: the store computed another checksum than the one sent ({code})")
        if (status is not None and status >= 500) or code in {"SlowDown", "ServiceUnavailable", "InternalError"}:
            return StorageUnavailable(
                f"object store at {self.endpoint_url} failed ({status} {code} on {op} {where}); retry later"
            )
        return StorageError(f"{op} {where} refused by the object store: {code} {_message(exc)}")


def put_presigned(
    url: str, headers: Mapping[str, str], body: bytes, *, timeout: float = 120.0, client: httpx.Client | None = None
) -> None:
    """PUT `body` to a presigned URL with exactly the signed `headers` (what a node does).

    `ChecksumMismatch` when the store hashed another body than the signed checksum,
    `StorageError` for any other refusal (expired URL, changed length or key), and
    `StorageUnavailable` when the store cannot be reached or fails. Pass a long-lived `client`
    when uploading repeatedly: building one per call (TLS context, pool) costs tens of ms of CPU.
    """
    declared = {k.lower(): v for k, v in headers.items()}.get("content-length")
    if declared is not None and declared != str(len(body)):
        raise StorageError(f"body is {len(body)} bytes but the URL was signed for {declared}")
    host = httpx.URL(url).host
    try:
        if client is None:
            reply = httpx.put(url, content=body, headers=dict(headers), timeout=timeout)
        else:
            reply = client.put(url, content=body, headers=dict(headers), timeout=timeout)
    except httpx.HTTPError as exc:
        raise StorageUnavailable(f"object store at {host} unreachable for the upload: {exc!r}") from exc
    if reply.status_code < 300:
        return
    code = _xml_code(reply.text)
    if reply.status_code >= 500:
        raise StorageUnavailable(f"object store at {host} failed the upload ({reply.status_code} {code}); retry later")
    if code in {"BadDigest", "XAmzContentSHA256Mismatch", "InvalidDigest"}:
        raise ChecksumMismatch(f"the store refused the upload: body does not match the signed sha256 ({code})")
    raise StorageError(
        f"the store refused the upload ({reply.status_code} {code}): the URL may have expired, or the key, "
        "length or headers differ from what was signed; ask for a new upload URL"
    )


def _xml_code(text: str) -> str:
    match = re.search(r"<Code>([^<]{1,64})</Code>", text)
    return match.group(1) if match else "no error code"


def build_client(
    *,
    endpoint_url: str,
    region: str,
    access_key: str,
    secret_key: str,
    connect_timeout: float = 5.0,
    read_timeout: float = 30.0,
    max_attempts: int = 3,
) -> BaseClient:
    """An S3 client: path-style, signature v4, bounded timeouts and retries.

    Checksums are sent only when we give one (`when_required`): the default CRC32 trailers
    of recent botocore are not understood by every S3-compatible store.
    """
    config = Config(
        signature_version="s3v4",
        s3={"addressing_style": "path"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        retries={"max_attempts": max_attempts, "mode": "standard"},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=endpoint_url,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=config,
    )


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _status(exc: ClientError) -> int | None:
    return exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")


def _message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message", ""))


def _b64_to_hex(value: str | None) -> str | None:
    if not value:
        return None
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw.hex() if len(raw) == 32 else None
