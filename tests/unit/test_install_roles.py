"""What makes `pip install proofpool` (no role extra) work: role commands that name their extra,
settings split per role with defaults outside the checkout, artifacts from the package."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from proofpool.cli.common import MissingExtra, needs_extra

from proofpool.infra import config
from proofpool.infra.chain import artifacts
from proofpool.infra.config import (
    BackendSettings,
    CommonSettings,
    Settings,
    TrainerSettings,
    ValidatorSettings,
    WorkerSettings,
    user_data_dir,
)


def test_a_missing_role_library_names_the_command_and_its_extra() -> None:
    @needs_extra("validator", "proofpool validator run")
    def run() -> None:
        raise ModuleNotFoundError("No module named 'celery'", name="celery.app")

    with pytest.raises(MissingExtra) as caught:
        run()
    assert str(caught.value) == (
        "proofpool validator run needs the validator extra: pip install 'proofpool[validator]' (missing: celery)"
    )


def test_the_command_name_defaults_to_group_and_function() -> None:
    def publish_checkpoint() -> None:
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    publish_checkpoint.__module__ = "proofpool.cli.pool"
    with pytest.raises(MissingExtra, match=r"^proofpool pool publish-checkpoint needs the trainer extra"):
        needs_extra("trainer")(publish_checkpoint)()


def test_other_import_errors_pass_through() -> None:
    @needs_extra("worker")
    def run() -> None:
        raise ModuleNotFoundError("No module named 'proofpool.nope'", name="proofpool.nope")

    with pytest.raises(ModuleNotFoundError):
        run()
    with pytest.raises(ValueError, match="unknown extra"):
        needs_extra("gpu")


def test_settings_compose_the_roles_over_one_shared_base() -> None:
    roles = (WorkerSettings, ValidatorSettings, TrainerSettings, BackendSettings)
    assert all(issubclass(role, CommonSettings) and issubclass(Settings, role) for role in roles)
    assert set(Settings.model_fields) == set().union(*(role.model_fields for role in roles))
    assert "database_url" not in WorkerSettings.model_fields and "rpc_url" in WorkerSettings.model_fields
    assert "validator_lease" in ValidatorSettings.model_fields and "metrics_address" in BackendSettings.model_fields


def test_role_settings_read_the_same_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://db.example/pp")
    monkeypatch.setenv("PROOFPOOL_SERVED_POOLS", "3,4")
    assert ValidatorSettings().database_url == Settings().database_url == "postgresql://db.example/pp"
    assert BackendSettings().served_pools == (3, 4)


def test_the_data_directory_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert user_data_dir() == tmp_path / "proofpool"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/dir")  # the spec says to ignore a relative one
    assert user_data_dir() == Path.home() / ".local" / "share" / "proofpool"


def test_state_and_address_books_default_to_the_data_directory_from_a_checkout_and_a_wheel(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two stacks from one clone share no state by default: it is the user's, not the checkout's.
    Only the contracts (build output) stay in the checkout."""
    for name in ("PROOFPOOL_STATE_DIR", "PROOFPOOL_DEPLOYMENTS_DIR", "PROOFPOOL_CONTRACTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert config.FROM_CHECKOUT
    for from_checkout in (True, False):
        monkeypatch.setattr(config, "FROM_CHECKOUT", from_checkout)
        settings = Settings()
        assert settings.state_dir == tmp_path / "proofpool" / "state"
        assert settings.deployments_dir == tmp_path / "proofpool" / "deployments"
        contracts = config.REPO_ROOT / "contracts" if from_checkout else tmp_path / "proofpool" / "contracts"
        assert settings.contracts_dir == contracts


def test_the_tests_never_default_into_the_users_data_directory() -> None:
    """tests/conftest.py points the defaults into a folder of the run before any test reads them."""
    settings = Settings()
    real = Path.home() / ".local" / "share" / "proofpool"
    for path in (settings.state_dir, settings.deployments_dir, user_data_dir()):
        assert not path.is_relative_to(real) and not path.is_relative_to(config.REPO_ROOT), path


def test_artifacts_come_from_the_package_when_there_is_no_build_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    build = artifacts.build_dir()
    packaged = tmp_path / "compiled"
    packaged.mkdir()
    for path in build.glob("src_PoolToken_sol_PoolToken.*"):
        shutil.copy(path, packaged / path.name)
    monkeypatch.setattr(artifacts, "PACKAGED_DIR", packaged)
    assert artifacts.artifacts_dir() == build  # a build folder wins
    monkeypatch.setenv("PROOFPOOL_CONTRACTS_DIR", str(tmp_path / "no-contracts"))
    config.get_settings.cache_clear()
    try:
        assert artifacts.artifacts_dir() == packaged
        assert artifacts.load_artifact("PoolToken").bytecode.startswith("0x6")
    finally:
        monkeypatch.undo()
        config.get_settings.cache_clear()


def test_without_the_npm_toolchain_anvil_comes_from_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from proofpool.core.errors import ServiceUnavailable
    from proofpool.infra.chain.anvil import anvil_binary

    assert anvil_binary().parts[-3:] == ("node_modules", ".bin", "anvil")  # the checkout's pinned one
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PROOFPOOL_CONTRACTS_DIR", str(tmp_path / "no-contracts"))
    monkeypatch.setenv("PATH", str(bin_dir))
    config.get_settings.cache_clear()
    try:
        with pytest.raises(ServiceUnavailable, match="nor on PATH"):
            anvil_binary()
        fake = bin_dir / "anvil"
        fake.write_text("#!/bin/sh\n")
        fake.chmod(0o755)
        assert anvil_binary() == fake
    finally:
        monkeypatch.undo()
        config.get_settings.cache_clear()
