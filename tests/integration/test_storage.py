"""The object store against a real SeaweedFS: object operations, error mapping, and the
presigned upload contract (the store itself refuses any PUT that is not the signed one)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.storage import (
    ROLLOUT_CONTENT_TYPE,
    ChecksumMismatch,
    ObjectNotFound,
    ObjectStore,
    ObjectTooLarge,
    PresignedUpload,
    StorageError,
    parse_rollout_key,
    put_presigned,
    rollout_key,
)
from proofpool.infra.storage.s3 import build_client
from proofpool.infra.storage.seaweed import SeaweedPorts, SeaweedProcess, start_seaweed

NODE = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
BODY = b"PAR1" + bytes(range(256)) * 40 + b"PAR1"
BODY_SHA = hashlib.sha256(BODY).hexdigest()


# --- key layout -------------------------------------------------------------------------


def test_rollout_key_layout_checksums_node_and_lowercases_sha() -> None:
    key = rollout_key(7, NODE.lower(), BODY_SHA.upper())
    assert key == f"pools/7/rollouts/{NODE}/{BODY_SHA}.parquet"
    parsed = parse_rollout_key(key)
    assert (parsed.pool_id, parsed.node, parsed.sha256_hex) == (7, NODE, BODY_SHA)


@pytest.mark.parametrize(
    "pool_id, node, sha",
    [
        (-1, NODE, BODY_SHA),
        (1, "0x1234", BODY_SHA),
        (1, NODE, "ab" * 31),
        (1, NODE, "zz" * 32),
        (1, NODE, BODY_SHA + "\n"),
        (1, NODE + "/..", BODY_SHA),
    ],
)
def test_rollout_key_refuses_malformed_parts(pool_id: int, node: str, sha: str) -> None:
    with pytest.raises(ValueError):
        rollout_key(pool_id, node, sha)


@pytest.mark.parametrize(
    "key",
    [
        f"pools/1/rollouts/{NODE.lower()}/{BODY_SHA}.parquet",  # not checksummed
        f"pools/1/rollouts/{NODE}/{BODY_SHA}.bin",
        f"pools/x/rollouts/{NODE}/{BODY_SHA}.parquet",
        f"pools/1/checkpoints/{NODE}/{BODY_SHA}.parquet",
        f"pools/1/rollouts/{NODE}/{BODY_SHA}.parquet\n",
        f"pools/\u0661/rollouts/{NODE}/{BODY_SHA}.parquet",
    ],
)
def test_parse_rollout_key_refuses_foreign_keys(key: str) -> None:
    with pytest.raises(ValueError):
        parse_rollout_key(key)


# --- object operations ------------------------------------------------------------------


def test_put_get_head_delete_round_trip(object_store: ObjectStore, unique_prefix: str) -> None:
    key = unique_prefix + "file.bin"
    info = object_store.put_object(key, BODY, content_type=ROLLOUT_CONTENT_TYPE)
    assert info.sha256_hex == BODY_SHA and info.size == len(BODY)

    head = object_store.head_object(key)
    assert head is not None
    assert (head.size, head.sha256_hex, head.content_type) == (len(BODY), BODY_SHA, ROLLOUT_CONTENT_TYPE)
    assert object_store.get_object(key) == BODY
    assert [o.key for o in object_store.list_objects(unique_prefix)] == [key]

    object_store.delete(key)
    assert object_store.head_object(key) is None
    object_store.delete(key)  # deleting a missing key is not an error


def test_missing_object_is_none_on_head_and_not_found_on_get(object_store: ObjectStore, unique_prefix: str) -> None:
    assert object_store.head_object(unique_prefix + "absent") is None
    with pytest.raises(ObjectNotFound, match="absent"):
        object_store.get_object(unique_prefix + "absent")


def test_put_with_a_wrong_sha256_is_refused_and_not_stored(object_store: ObjectStore, unique_prefix: str) -> None:
    key = unique_prefix + "bad"
    with pytest.raises(ChecksumMismatch):
        object_store.put_object(key, BODY, sha256_hex="00" * 32)
    assert object_store.head_object(key) is None


def test_get_refuses_objects_over_max_bytes(object_store: ObjectStore, unique_prefix: str) -> None:
    object_store.put_object(unique_prefix + "big", BODY)
    with pytest.raises(ObjectTooLarge, match=str(len(BODY))):
        object_store.get_object(unique_prefix + "big", max_bytes=len(BODY) - 1)
    assert object_store.get_object(unique_prefix + "big", max_bytes=len(BODY)) == BODY


def test_list_objects_pages_in_key_order_up_to_limit(object_store: ObjectStore, unique_prefix: str) -> None:
    keys = [f"{unique_prefix}{i:03d}" for i in range(5)]
    for key in reversed(keys):
        object_store.put_object(key, key.encode())
    assert [o.key for o in object_store.list_objects(unique_prefix)] == keys
    assert [o.key for o in object_store.list_objects(unique_prefix, limit=2)] == keys[:2]


def test_ensure_bucket_creates_once(object_store: ObjectStore) -> None:
    fresh = ObjectStore(object_store.client, f"created-{time.time_ns()}", object_store.endpoint_url)
    assert fresh.ensure_bucket() is True
    assert fresh.ensure_bucket() is False
    fresh.put_object("k", b"v")
    assert fresh.get_object("k") == b"v"


def test_missing_bucket_says_how_to_create_it(object_store: ObjectStore) -> None:
    missing = ObjectStore(object_store.client, "no-such-bucket-here", object_store.endpoint_url)
    with pytest.raises(StorageError, match=r"does not exist.*proofpool storage up") as err:
        missing.put_object("k", b"v")
    assert not isinstance(err.value, ObjectNotFound)
    with pytest.raises(StorageError, match="does not exist"):
        missing.check()


def test_wrong_credentials_are_named(s3_settings) -> None:
    bad = ObjectStore.from_settings(s3_settings.model_copy(update={"s3_secret_key": "not-the-secret"}))
    with pytest.raises(StorageError, match=r"refused the credentials.*AWS_SECRET_ACCESS_KEY"):
        bad.get_object("anything")


def test_store_down_is_service_unavailable_with_a_hint(tmp_path: Path, s3_settings) -> None:
    own = start_seaweed(
        tmp_path / "data",
        access_key="k-down",
        secret_key="s-down-secret",
        bucket="down-test",
        log_path=tmp_path / "log",
    )
    store = ObjectStore.from_settings(own.settings(s3_settings), connect_timeout=0.5, max_attempts=1)
    store.put_object("k", b"v")
    own.stop()

    for operation in (lambda: store.get_object("k"), lambda: store.head_object("k"), store.check):
        with pytest.raises(ServiceUnavailable, match=r"unreachable.*proofpool storage up.*S3_ENDPOINT_URL"):
            operation()
    with pytest.raises(ServiceUnavailable):
        store.put_object("k2", b"v")
    upload = store.presign_put("k3", 1, hashlib.sha256(b"v").hexdigest(), ttl=60)
    with pytest.raises(ServiceUnavailable, match="unreachable"):
        put_presigned(upload.url, upload.headers, b"v", timeout=2)


def test_start_fails_clearly_when_the_s3_port_is_taken(tmp_path: Path, seaweed: SeaweedProcess) -> None:
    with pytest.raises(ServiceUnavailable, match="weed mini exited"):
        start_seaweed(
            tmp_path / "data",
            access_key="k",
            secret_key="s-secret",
            bucket="taken-port",
            ports=SeaweedPorts.free(s3=seaweed.ports.s3),
            log_path=tmp_path / "log",
            startup_timeout=20,
        )


# --- presigned uploads: the store enforces what was signed -----------------------------


def _put(upload: PresignedUpload, body: bytes, headers: dict[str, str] | None = None, url: str | None = None):
    return httpx.put(url or upload.url, content=body, headers=headers if headers is not None else upload.headers)


def _key(prefix: str) -> str:
    return prefix + rollout_key(1, NODE, BODY_SHA)


def test_presigned_put_binds_key_length_checksum_and_expiry(object_store: ObjectStore, unique_prefix: str) -> None:
    key = _key(unique_prefix)
    upload = object_store.presign_put(key, len(BODY), BODY_SHA, ttl=900, content_type=ROLLOUT_CONTENT_TYPE)
    assert upload.method == "PUT" and upload.key == key
    assert upload.headers["Content-Length"] == str(len(BODY))
    assert set(upload.headers) == {"Content-Length", "x-amz-checksum-sha256", "Content-Type"}
    signed = httpx.URL(upload.url).params["X-Amz-SignedHeaders"].split(";")
    assert {"content-length", "x-amz-checksum-sha256", "content-type", "host"} <= set(signed)
    assert httpx.URL(upload.url).params["X-Amz-Expires"] == "900"
    assert 899 <= (upload.expires_at - datetime.now(UTC)).total_seconds() <= 900


def _other_body(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    return BODY[:-1] + b"X", u.headers, u.url  # same length, other bytes


def _longer_body(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    return BODY + b"X", {**u.headers, "Content-Length": str(len(BODY) + 1)}, u.url


def _shorter_body(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    return BODY[:-1], {**u.headers, "Content-Length": str(len(BODY) - 1)}, u.url


def _other_key(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    return BODY, u.headers, u.url.replace(BODY_SHA, "0" * 64)


def _other_node_key(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    return BODY, u.headers, u.url.replace(NODE, "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC")


def _other_bucket(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    return BODY, u.headers, u.url.replace("/proofpool-test/", "/proofpool-other/")


def _no_checksum_header(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    return BODY, {k: v for k, v in u.headers.items() if k != "x-amz-checksum-sha256"}, u.url


def _other_checksum_header(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    other = BODY[:-1] + b"X"
    return (
        other,
        {**u.headers, "x-amz-checksum-sha256": base64.b64encode(hashlib.sha256(other).digest()).decode()},
        u.url,
    )


def _other_content_type(u: PresignedUpload) -> tuple[bytes, dict[str, str], str]:
    return BODY, {**u.headers, "Content-Type": "text/html"}, u.url


@pytest.mark.parametrize(
    "tamper",
    [
        _other_body,
        _longer_body,
        _shorter_body,
        _other_key,
        _other_node_key,
        _other_bucket,
        _no_checksum_header,
        _other_checksum_header,
        _other_content_type,
    ],
)
def test_store_refuses_a_put_other_than_the_signed_one(
    object_store: ObjectStore, unique_prefix: str, tamper: Callable[[PresignedUpload], tuple]
) -> None:
    key = _key(unique_prefix)
    upload = object_store.presign_put(key, len(BODY), BODY_SHA, ttl=900, content_type=ROLLOUT_CONTENT_TYPE)
    body, headers, url = tamper(upload)
    reply = _put(upload, body, headers, url)
    assert reply.status_code in (400, 403), reply.text
    assert object_store.head_object(key) is None
    assert list(object_store.list_objects(unique_prefix)) == []

    exact = _put(upload, BODY)  # the refusal did not burn the URL: the signed PUT still works
    assert exact.status_code == 200, exact.text
    head = object_store.head_object(key)
    assert head is not None and head.sha256_hex == BODY_SHA and head.size == len(BODY)
    assert hashlib.sha256(object_store.get_object(key)).hexdigest() == BODY_SHA


def test_exact_presigned_put_is_stored_with_its_sha256(object_store: ObjectStore, unique_prefix: str) -> None:
    key = _key(unique_prefix)
    upload = object_store.presign_put(key, len(BODY), BODY_SHA, ttl=60, content_type=ROLLOUT_CONTENT_TYPE)
    assert _put(upload, BODY).status_code == 200
    head = object_store.head_object(key)
    assert head is not None
    assert (head.sha256_hex, head.size, head.content_type) == (BODY_SHA, len(BODY), ROLLOUT_CONTENT_TYPE)
    assert hashlib.sha256(object_store.get_object(key)).hexdigest() == BODY_SHA


def test_expired_presigned_put_is_refused(object_store: ObjectStore, unique_prefix: str) -> None:
    key = _key(unique_prefix)
    upload = object_store.presign_put(key, len(BODY), BODY_SHA, ttl=1)
    time.sleep(2.1)  # past X-Amz-Date + 1 s on the store's own clock (same machine)
    reply = _put(upload, BODY)
    assert reply.status_code == 403 and "expired" in reply.text.lower()
    with pytest.raises(StorageError, match=r"AccessDenied.*expired"):
        put_presigned(upload.url, upload.headers, BODY)
    assert object_store.head_object(key) is None


def test_put_presigned_maps_refusals(object_store: ObjectStore, unique_prefix: str) -> None:
    key = _key(unique_prefix)
    upload = object_store.presign_put(key, len(BODY), BODY_SHA, ttl=60, content_type=ROLLOUT_CONTENT_TYPE)
    with pytest.raises(ChecksumMismatch, match="signed sha256"):
        put_presigned(upload.url, upload.headers, BODY[:-1] + b"X")
    with pytest.raises(StorageError, match="signed for"):
        put_presigned(upload.url, upload.headers, BODY + b"X")
    with pytest.raises(StorageError, match=r"SignatureDoesNotMatch.*new upload URL"):
        put_presigned(upload.url.replace(BODY_SHA, "0" * 64), upload.headers, BODY)
    put_presigned(upload.url, upload.headers, BODY)
    head = object_store.head_object(key)
    assert head is not None and head.sha256_hex == BODY_SHA


@pytest.mark.parametrize("ttl", [0, 7 * 24 * 3600 + 1])
def test_presign_refuses_ttl_outside_sigv4_limits(object_store: ObjectStore, ttl: int) -> None:
    with pytest.raises(ValueError, match="ttl"):
        object_store.presign_put("k", 1, BODY_SHA, ttl=ttl)


# --- the CLI --------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_up_ls_down_round_trip(tmp_path: Path) -> None:
    """`storage up --detach`, `ls`, `down` as an operator runs them (three CLI processes), `up` and
    `down` on one --state-dir."""
    port = SeaweedPorts.free().s3
    state = ("--state-dir", str(tmp_path / "state"))
    env = {
        **os.environ,
        "S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "cli-key",
        "AWS_SECRET_ACCESS_KEY": "cli-secret-key",
        "PROOFPOOL_S3_BUCKET": "cli-bucket",
        "COLUMNS": "200",
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "proofpool.cli.main", "storage", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=90)

    up = cli("up", "--detach", *state)
    assert up.returncode == 0, up.stderr
    pid_file = tmp_path / "state" / "seaweed.pid"
    try:
        assert f"127.0.0.1:{port}" in up.stdout and pid_file.exists()

        store = ObjectStore(
            build_client(
                endpoint_url=f"http://127.0.0.1:{port}",
                region="us-east-1",
                access_key="cli-key",
                secret_key="cli-secret-key",
            ),
            "cli-bucket",
            f"http://127.0.0.1:{port}",
        )
        store.put_object("pools/1/rollouts/a.parquet", b"abc")
        listed = cli("ls", "pools/", "--json")
        assert listed.returncode == 0, listed.stderr
        assert [(o["key"], o["size"]) for o in json.loads(listed.stdout)] == [("pools/1/rollouts/a.parquet", 3)]
    finally:
        down = cli("down", *state)
    assert down.returncode == 0 and "stopped" in down.stdout, down.stderr
    assert not pid_file.exists()
