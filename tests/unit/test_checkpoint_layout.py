"""Where checkpoints live in the store: key prefixes and the URIs published on-chain."""

from __future__ import annotations

import pytest

from proofpool.infra.checkpoint import CheckpointError, Reason, checkpoint_prefix, parse_checkpoint_uri
from proofpool.infra.checkpoint.store import CheckpointLocation


def test_prefix_and_uri_follow_the_layout():
    prefix = checkpoint_prefix(3, 12)
    assert prefix == "pools/3/checkpoints/12/"
    assert checkpoint_prefix(3, 12, "test/abc/") == "test/abc/pools/3/checkpoints/12/"
    location = CheckpointLocation("proofpool", prefix)
    assert location.uri == "s3://proofpool/pools/3/checkpoints/12/"
    assert location.manifest_key == "pools/3/checkpoints/12/proofpool-checkpoint.json"
    assert location.file_key("config.json") == "pools/3/checkpoints/12/config.json"
    assert parse_checkpoint_uri(location.uri) == location


@pytest.mark.parametrize("prefix", ["no-slash", "/absolute/"])
def test_a_malformed_test_prefix_is_a_programming_error(prefix):
    with pytest.raises(ValueError, match="prefix"):
        checkpoint_prefix(1, 1, prefix)


@pytest.mark.parametrize(
    "uri",
    [
        "https://proofpool/pools/1/checkpoints/1/",
        "s3://proofpool/pools/1/checkpoints/1",  # a prefix ends in '/'
        "s3://proofpool/",
        "s3://Upper/pools/1/",
        "s3://proofpool//pools/1/",
        "s3://proofpool/pools//1/",
        "",
        None,
    ],
)
def test_a_uri_outside_the_layout_is_refused(uri):
    with pytest.raises(CheckpointError) as refused:
        parse_checkpoint_uri(uri)
    assert refused.value.reason is Reason.URI_INVALID
