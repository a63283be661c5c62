"""Where a training pool's update file lives (`proofpool.infra.storage.update_key`) and what an upload
request may ask for (`format`); tests/integration/test_api_uploads.py presigns and PUTs them through
the real backend and store."""

from __future__ import annotations

import hashlib

import pytest
from proofpool.backend.api.uploads import UploadRequest
from pydantic import ValidationError

from proofpool.infra.storage import parse_rollout_key, parse_update_key, rollout_key, update_key

NODE = "0x90F79bf6EB2c4f870365E785982E1f101E93b906"
SHA = hashlib.sha256(b"an update file").hexdigest()


def test_update_key_layout_checksums_node_and_lowercases_sha() -> None:
    key = update_key(7, NODE.lower(), "0x" + SHA.upper())
    assert key == f"pools/7/updates/{NODE}/{SHA}.safetensors"
    parsed = parse_update_key(key)
    assert (parsed.pool_id, parsed.node, parsed.sha256_hex) == (7, NODE, SHA)


@pytest.mark.parametrize(
    ("pool_id", "node", "sha"),
    [(-1, NODE, SHA), (1, "0x1234", SHA), (1, NODE, SHA[:-1]), (1, NODE, SHA[:-1] + "g")],
    ids=["negative pool", "short address", "short sha", "non-hex sha"],
)
def test_update_key_refuses_malformed_parts(pool_id: int, node: str, sha: str) -> None:
    with pytest.raises(ValueError):
        update_key(pool_id, node, sha)


@pytest.mark.parametrize(
    "key",
    [
        f"pools/1/updates/{NODE.lower()}/{SHA}.safetensors",  # not checksummed
        f"pools/1/updates/{NODE}/{SHA.upper()}.safetensors",
        f"pools/1/updates/{NODE}/{SHA}.parquet",
        f"pools/1/rollouts/{NODE}/{SHA}.safetensors",
        f"pools/x/updates/{NODE}/{SHA}.safetensors",
        f"prefix/pools/1/updates/{NODE}/{SHA}.safetensors",
    ],
)
def test_parse_update_key_refuses_foreign_keys(key: str) -> None:
    with pytest.raises(ValueError, match="not an update key"):
        parse_update_key(key)


def test_rollout_and_update_keys_never_cross() -> None:
    """A presigned URL for one format can never write (or be read as) a file of the other."""
    rollout, update = rollout_key(1, NODE, SHA), update_key(1, NODE, SHA)
    assert rollout != update
    with pytest.raises(ValueError, match="not a rollout key"):
        parse_rollout_key(update)
    with pytest.raises(ValueError, match="not an update key"):
        parse_update_key(rollout)


def test_an_upload_request_is_for_rollouts_unless_it_says_update() -> None:
    base = {"pool_id": 1, "sha256": SHA, "size": 10}
    assert UploadRequest.model_validate(base).format == "rollouts"
    assert UploadRequest.model_validate({**base, "format": "update"}).format == "update"
    with pytest.raises(ValidationError, match="'rollouts' or 'update'"):
        UploadRequest.model_validate({**base, "format": "updates"})
