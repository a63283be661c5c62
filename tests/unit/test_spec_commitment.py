"""A pool commits to its spec twice on-chain, in its model URI and its `specSha256`: every role
refuses a pool whose two disagree, through `proofpool.envs.check_spec_commitment`, and the spec
hash the validator holds files to is the one the pool's environment was built from."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest
from proofpool_arithmetic import ENVIRONMENT

from proofpool.core.spec import NO_SPEC, SpecError
from proofpool.envs import (
    check_spec_commitment,
    environment_spec_sha256,
    pool_environment,
    resolve_base_model,
    spec_commitment,
)
from proofpool.envs.published import SpecPoolEnvironment
from proofpool.envs.spec import SpecMismatch

DEVNET_URI = "devnet://tiny-llama/arithmetic-add-100"
SPEC = hashlib.sha256(b"a pool spec").digest()
OTHER = hashlib.sha256(b"another pool spec").digest()
SPEC_URI = f"spec://{SPEC.hex()}"

CONSISTENT = [
    ("a devnet pool without spec", DEVNET_URI, NO_SPEC),
    ("any other scheme without spec", "hf://Qwen/Qwen3-0.6B", NO_SPEC),
    ("a spec pool committed to its spec", SPEC_URI, SPEC),
    ("a spec URI in upper case", f"SPEC://{SPEC.hex().upper()}", SPEC),
]

# (name, model URI, on-chain specSha256, what the refusal must say)
INCONSISTENT = [
    ("spec URI, no spec on-chain", SPEC_URI, NO_SPEC, rf"names spec {SPEC.hex()} .*no spec \(specSha256 is zero\)"),
    ("spec URI, another spec on-chain", SPEC_URI, OTHER, rf"names spec {SPEC.hex()} .*specSha256 0x{OTHER.hex()}"),
    ("devnet URI, a spec on-chain", DEVNET_URI, SPEC, rf"names no spec .*specSha256 0x{SPEC.hex()}"),
    ("a spec hash of 31 bytes", DEVNET_URI, SPEC[:31], r"names no spec .*specSha256 0x"),
]


@pytest.mark.parametrize(("uri", "spec"), [c[1:] for c in CONSISTENT], ids=[c[0] for c in CONSISTENT])
def test_a_pool_whose_uri_names_its_on_chain_spec_hash_is_accepted(uri: str, spec: bytes) -> None:
    check_spec_commitment(uri, spec)
    assert spec_commitment(uri) == spec


@pytest.mark.parametrize(("uri", "spec", "message"), [c[1:] for c in INCONSISTENT], ids=[c[0] for c in INCONSISTENT])
def test_a_pool_whose_commitments_disagree_is_refused(uri: str, spec: bytes, message: str) -> None:
    with pytest.raises(SpecMismatch, match=message) as refused:
        check_spec_commitment(uri, spec)
    assert "refused, nobody works for or judges this pool" in str(refused.value)


def test_a_malformed_spec_uri_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="not a spec URI"):
        check_spec_commitment("spec://abc", NO_SPEC)


def test_the_roles_entry_point_refuses_before_looking_for_the_environment() -> None:
    """`pool_environment` would fetch a spec pool's spec from the object store; a pool whose two
    commitments disagree is refused first, so the refusal is the mismatch and not a missing spec."""
    assert pool_environment(DEVNET_URI, NO_SPEC) is ENVIRONMENT
    with pytest.raises(SpecMismatch):
        pool_environment(SPEC_URI, OTHER)
    with pytest.raises(SpecMismatch):
        pool_environment(DEVNET_URI, SPEC)


def test_a_base_model_is_not_resolved_for_a_refused_pool(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert resolve_base_model(DEVNET_URI, override=tmp_path, spec_sha256=NO_SPEC) == tmp_path
    with pytest.raises(SpecMismatch):
        resolve_base_model(DEVNET_URI, override=tmp_path, spec_sha256=SPEC)


def _spec_environment(spec: bytes) -> SpecPoolEnvironment:
    """A spec pool's environment over the arithmetic task set (only its spec hash is asked for)."""
    return SpecPoolEnvironment(
        name="spec-test", taskset=ENVIRONMENT.taskset, tokens=ENVIRONMENT.tokens, model_dir=Path("."), spec_sha256=spec
    )  # type: ignore[arg-type]


def test_an_environment_knows_the_spec_hash_its_files_carry() -> None:
    assert environment_spec_sha256(ENVIRONMENT) == NO_SPEC
    assert environment_spec_sha256(_spec_environment(SPEC)) == SPEC


def test_the_validators_rules_hold_files_to_the_pools_spec_hash() -> None:
    from proofpool.validator.checks import PoolRules

    assert PoolRules.of(ENVIRONMENT, latest_version=0).spec_sha256 == NO_SPEC
    assert PoolRules.of(_spec_environment(SPEC), latest_version=0).spec_sha256 == SPEC
    with pytest.raises(ValueError, match="32 bytes"):
        PoolRules.of(ENVIRONMENT, latest_version=0, spec_sha256=SPEC[:16])


def test_a_validator_judges_nothing_of_a_pool_whose_commitments_disagree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import proofpool.validator.models as models
    from proofpool.validator.models import ModelCache, ModelUnavailable

    monkeypatch.setattr(models, "onchain_manifest_sha256", lambda _client, _pool, _version: None)  # no checkpoint

    pools = {1: (DEVNET_URI, NO_SPEC), 2: (DEVNET_URI, SPEC)}
    chain = SimpleNamespace(
        pool=SimpleNamespace(
            get_pool=lambda pool_id: SimpleNamespace(model_uri=pools[pool_id][0], spec_sha256=pools[pool_id][1])
        )
    )
    cache = ModelCache(chain, store=None, cache_dir=tmp_path, relays=())  # type: ignore[arg-type]
    assert cache.environment(1) is ENVIRONMENT
    with pytest.raises(ModelUnavailable, match=rf"pool 2: .*specSha256 0x{SPEC.hex()}"):
        cache.environment(2)
    with pytest.raises(ModelUnavailable, match="model of pool 2 version 0"):
        cache.model_dir(2, 0)


def test_a_node_does_not_work_for_a_pool_whose_commitments_disagree() -> None:
    from proofpool.worker.node import NodeNotReady, _environment_of

    pool = SimpleNamespace(pool_id=5, model_uri=SPEC_URI, spec_sha256=NO_SPEC)
    with pytest.raises(NodeNotReady, match=rf"pool 5: .*names spec {SPEC.hex()}"):
        _environment_of(pool)  # type: ignore[arg-type]


@pytest.mark.parametrize(("spec", "consistent"), [(NO_SPEC, True), (SPEC, False)], ids=["no spec", "a spec"])
def test_the_spec_hash_a_nodes_files_carry_is_its_pools_on_chain_one(
    spec: bytes, consistent: bool, tmp_path: Path
) -> None:
    """`WorkerNode.spec_sha256` (what `_generate` writes into every file) comes from the pool's
    on-chain record, and only once the record is consistent."""
    from eth_account import Account
    from proofpool.worker.console import WorkerConsole
    from proofpool.worker.node import NodeNotReady, WorkerConfig, WorkerNode
    from rich.console import Console

    from proofpool.infra.chain.anvil import ANVIL_KEYS

    account = Account.from_key(ANVIL_KEYS[6])
    record = SimpleNamespace(pool_id=1, model_uri=DEVNET_URI, spec_sha256=spec)
    client = SimpleNamespace(pool=SimpleNamespace(get_pool=lambda _pool_id: record), address=account.address)
    config = WorkerConfig(pool_id=1, state_dir=tmp_path / "state", checkpoint_cache_dir=tmp_path / "cache")
    console = WorkerConsole(account.address, "http://127.0.0.1:9", Console(file=open("/dev/null", "w")))  # noqa: SIM115
    node = WorkerNode(config, account, client, None, lambda: None, console)  # type: ignore[arg-type]
    try:
        if consistent:
            assert (node.spec_sha256, node.environment) == (NO_SPEC, ENVIRONMENT)
        else:
            with pytest.raises(NodeNotReady, match=rf"pool 1: .*specSha256 0x{SPEC.hex()}"):
                node.spec_sha256  # noqa: B018 - the lookup is the test
    finally:
        node.journal.close()


@pytest.mark.parametrize(
    ("args", "uri", "spec"),
    [
        ([], DEVNET_URI, NO_SPEC),
        (["--model-uri", SPEC_URI], SPEC_URI, SPEC),  # a spec published before
        (["--spec", "spec.json", "--model", "model"], SPEC_URI, SPEC),
    ],
    ids=["devnet", "spec uri", "--spec"],
)
def test_pool_create_commits_the_spec_hash_its_model_uri_names(
    args: list[str], uri: str, spec: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parameters `proofpool pool create` sends (the chain and the object store stood in for:
    tests/integration/test_spec_pools.py runs `--spec` against real ones)."""
    import proofpool.cli.pool as pool_cli
    from proofpool.cli.main import app
    from typer.testing import CliRunner

    sent: list = []
    client = SimpleNamespace(
        address="0x" + "11" * 20, pool=SimpleNamespace(create_pool=lambda params: sent.append(params) or (9, {}))
    )
    monkeypatch.setattr(pool_cli, "signer_client", lambda _key, _rpc: client)
    monkeypatch.setattr(pool_cli, "report_tx", lambda *_args: None)
    monkeypatch.setattr(pool_cli, "_publish_spec", lambda _spec, _model, _indices: SPEC_URI)

    result = CliRunner().invoke(app, ["pool", "create", *args])

    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    [params] = sent
    assert (params.model_uri, params.spec_sha256) == (uri, spec)
    check_spec_commitment(params.model_uri, params.spec_sha256)


def test_concurrent_first_loads_of_one_pool_build_its_environment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend loads environments in worker threads: two heartbeats of a new pool at once must
    not build (download, import) it twice at the same time."""
    import threading
    import time

    import proofpool.envs as envs

    builds: list[str] = []
    inside = threading.Event()

    def slow_spec_pool(model_uri: str) -> object:
        assert not inside.is_set(), "two loads ran at once"
        inside.set()
        time.sleep(0.2)
        builds.append(model_uri)
        inside.clear()
        return ENVIRONMENT

    monkeypatch.setattr(envs, "_spec_pool", slow_spec_pool)
    envs.forget_environments()
    uri = "spec://" + "ab" * 32
    try:
        results: list[object] = []
        threads = [threading.Thread(target=lambda: results.append(envs.environment_for(uri))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert results == [ENVIRONMENT] * 4
        assert builds == [uri]
    finally:
        envs.forget_environments()
