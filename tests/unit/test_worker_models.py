"""Which assignments a node refuses to serve, and why (the reason codes it reports)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import proofpool.worker.models as models
import pytest
from proofpool.worker.models import ModelResolver, Unservable

from proofpool.infra.checkpoint import CheckpointError, Reason
from proofpool.infra.http.node_api import Assignment

GOOD = bytes.fromhex("aa" * 32)
OTHER = bytes.fromhex("bb" * 32)


def assignment(version: int, manifest: bytes | None, uri: str | None = "s3://b/pools/1/checkpoints/1/") -> Assignment:
    return Assignment(1, version, manifest, uri, 0, ("add-1-2",), 7, 8, 8, 1.0)


def resolver(
    model_uri: str = "https://example.org/some-model",
    base_model: Path | None = None,
    relays: tuple[str, ...] = (),
    spec_sha256: bytes = bytes(32),
) -> ModelResolver:
    """A resolver over a stand-in chain client that only answers `get_pool`."""
    pool = SimpleNamespace(model_uri=model_uri, spec_sha256=spec_sha256)
    client = SimpleNamespace(pool=SimpleNamespace(get_pool=lambda _pool_id: pool))
    return ModelResolver(
        client,  # type: ignore[arg-type]
        store=lambda: None,  # type: ignore[arg-type,return-value]
        cache_dir=Path("/nonexistent"),
        base_model=base_model,
        relays=relays,
    )


@pytest.fixture
def chain_has(monkeypatch: pytest.MonkeyPatch):
    """Set what the chain recorded for (pool 1, version): a manifest hash or None."""

    def set_(recorded: dict[int, bytes]) -> None:
        monkeypatch.setattr(models, "onchain_manifest_sha256", lambda _c, _p, version: recorded.get(version))

    return set_


def reason(r: ModelResolver, a: Assignment) -> str:
    with pytest.raises(Unservable) as refused:
        r.resolve(a)
    return refused.value.reason


def test_a_manifest_the_chain_does_not_know_is_refused(chain_has) -> None:
    chain_has({})
    assert reason(resolver(), assignment(1, GOOD)) == "unknown_model_version"


def test_a_manifest_other_than_the_chains_is_refused(chain_has) -> None:
    chain_has({1: OTHER})
    assert reason(resolver(), assignment(1, GOOD)) == "manifest_hash_mismatch"


def test_a_later_version_without_manifest_is_refused() -> None:
    assert reason(resolver(), assignment(3, None)) == "unknown_model_version"


def test_a_non_devnet_base_model_needs_a_local_directory(tmp_path: Path) -> None:
    assert reason(resolver(), assignment(0, None)) == "unknown_base_model"
    assert reason(resolver(base_model=tmp_path), assignment(0, None)) == "unknown_base_model"  # no config.json
    (tmp_path / "config.json").write_text("{}")
    assert resolver(base_model=tmp_path).resolve(assignment(0, None)) == tmp_path


def test_a_pool_whose_spec_hash_and_model_uri_disagree_is_refused_before_its_base_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")  # a base model the node could use: never looked at
    spec = "ab" * 32
    assert reason(resolver(base_model=tmp_path, spec_sha256=bytes.fromhex(spec)), assignment(0, None)) == "spec_refused"
    refused = resolver(f"spec://{spec}", base_model=tmp_path)  # the pool committed to no spec on-chain
    assert reason(refused, assignment(0, None)) == "spec_refused"


def test_fetch_failures_keep_their_checkpoint_reason(chain_has, monkeypatch: pytest.MonkeyPatch) -> None:
    chain_has({1: GOOD})

    def tampered(*_args: object, **_kwargs: object) -> Path:
        raise CheckpointError(Reason.SHARD_HASH_MISMATCH, "model-00001-of-00002.safetensors differs")

    monkeypatch.setattr(models, "ensure_checkpoint", tampered)
    assert reason(resolver(), assignment(1, GOOD)) == "shard_hash_mismatch"
    assert reason(resolver(), assignment(1, GOOD, uri=None)) == "checkpoint_uri_missing"


def test_a_verified_checkpoint_is_resolved_once(chain_has, monkeypatch: pytest.MonkeyPatch) -> None:
    chain_has({1: GOOD})
    calls = []

    def fetch(
        _store: object, uri: str, expected: bytes, cache_dir: Path, *, relays: tuple[str, ...], max_bytes: int
    ) -> Path:
        calls.append((uri, expected, relays, max_bytes))
        return Path("/cache/checkpoints") / expected.hex()

    monkeypatch.setattr(models, "ensure_checkpoint", fetch)
    r = resolver(relays=("http://10.0.0.5:8790",))
    assert r.resolve(assignment(1, GOOD)) == r.resolve(assignment(1, GOOD)) == Path("/cache/checkpoints") / GOOD.hex()
    # through the relays, and capped at the configured checkpoint size
    assert calls == [("s3://b/pools/1/checkpoints/1/", GOOD, ("http://10.0.0.5:8790",), 64 * 1024**3)]
