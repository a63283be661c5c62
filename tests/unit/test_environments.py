"""Environments: found by a pool's model URI through the `proofpool.environments` entry points,
and the devnet's arithmetic environment implementing the protocol every role relies on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from proofpool_arithmetic import ENVIRONMENT

from proofpool.core.environment import Environment, InvalidProblemId, Taskset, TokenLimits
from proofpool.envs import (
    UnknownBaseModel,
    UnknownEnvironment,
    environment_for,
    installed,
    resolve_base_model,
    scheme,
)

DEVNET_URI = "devnet://tiny-llama/arithmetic-add-100"


def test_a_devnet_uri_resolves_to_the_installed_arithmetic_environment() -> None:
    assert installed()["devnet"] == "proofpool_arithmetic:ENVIRONMENT"
    environment = environment_for(DEVNET_URI)
    assert environment is ENVIRONMENT
    assert isinstance(environment, Environment) and isinstance(environment.taskset, Taskset)
    assert environment_for("DEVNET://other/label") is ENVIRONMENT  # schemes are case-insensitive


@pytest.mark.parametrize("uri", ["tiny-llama", "://x", "devnet://", ""])
def test_a_model_uri_without_a_scheme_is_refused(uri: str) -> None:
    with pytest.raises(UnknownEnvironment, match="not a URI"):
        scheme(uri)


def test_an_uninstalled_environment_names_what_is_installed() -> None:
    with pytest.raises(UnknownEnvironment, match=r"'hf'.*installed: .*devnet"):
        environment_for("hf://Qwen/Qwen3-0.6B")


def test_the_base_model_of_an_unknown_environment_points_at_base_model(tmp_path: Path) -> None:
    with pytest.raises(UnknownBaseModel, match="--base-model"):
        resolve_base_model("hf://Qwen/Qwen3-0.6B")
    with pytest.raises(UnknownBaseModel, match=r"config\.json missing"):
        resolve_base_model("hf://Qwen/Qwen3-0.6B", override=tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert resolve_base_model("hf://Qwen/Qwen3-0.6B", override=tmp_path) == tmp_path


def test_the_arithmetic_taskset_is_deterministic_and_scores_its_own_problems() -> None:
    tasks = ENVIRONMENT.taskset
    ids = tasks.draw(seed=5, count=16)
    assert ids == tasks.draw(seed=5, count=16) != tasks.draw(seed=6, count=16)
    problem = ids[0]
    prompt = tasks.prompt_tokens(problem)
    assert prompt[0] == ENVIRONMENT.tokens.bos_id and len(prompt) <= ENVIRONMENT.tokens.max_prompt_tokens
    right = ENVIRONMENT.reference_completion(problem)
    assert right[-1] in ENVIRONMENT.tokens.stop_ids
    assert tasks.score(problem, right) == 1.0
    assert tasks.score(problem, right[-1:]) == 0.0  # no answer at all
    with pytest.raises(InvalidProblemId):
        tasks.prompt_tokens("sub-1-2")
    with pytest.raises(InvalidProblemId):
        tasks.score("add-100-1", right)


def test_token_limits_refuse_ids_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="stop id 16"):
        TokenLimits(vocab_size=16, stop_ids={16}, pad_id=0, bos_id=None, max_prompt_tokens=4, max_completion_tokens=4)
    with pytest.raises(ValueError, match="positive"):
        TokenLimits(vocab_size=16, stop_ids={2}, pad_id=0, bos_id=1, max_prompt_tokens=0, max_completion_tokens=4)


def test_the_model_commands_list_environments_and_refuse_an_unknown_uri() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "model", "environments"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "devnet://\tproofpool_arithmetic:ENVIRONMENT" in listed.stdout
    refused = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "model", "prepare", "hf://Qwen/Qwen3-0.6B"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 1
    assert "no environment is installed for 'hf://Qwen/Qwen3-0.6B'" in refused.stdout + refused.stderr


def test_a_validator_without_the_pools_environment_retries_instead_of_judging(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from proofpool.validator.models import ModelCache, ModelUnavailable

    uris = {1: DEVNET_URI, 2: "hf://Qwen/Qwen3-0.6B"}
    pools = SimpleNamespace(get_pool=lambda pool_id: SimpleNamespace(model_uri=uris[pool_id], spec_sha256=bytes(32)))
    cache = ModelCache(SimpleNamespace(pool=pools), store=None, cache_dir=tmp_path, relays=())  # type: ignore[arg-type]
    assert cache.environment(1) is ENVIRONMENT
    with pytest.raises(ModelUnavailable, match="pool 2: no environment is installed"):
        cache.environment(2)


def test_a_node_without_the_pools_environment_is_not_ready() -> None:
    from types import SimpleNamespace

    from proofpool.worker.node import NodeNotReady, _environment_of

    def pool(uri: str) -> SimpleNamespace:
        return SimpleNamespace(pool_id=3, model_uri=uri, spec_sha256=bytes(32))

    assert _environment_of(pool(DEVNET_URI)) is ENVIRONMENT  # type: ignore[arg-type]
    with pytest.raises(NodeNotReady, match=r"pool 3: no environment is installed for 'hf://Qwen/Qwen3-0\.6B'"):
        _environment_of(pool("hf://Qwen/Qwen3-0.6B"))  # type: ignore[arg-type]
