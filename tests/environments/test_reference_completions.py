"""Every plugin's reference completion earns the full reward from its own scorer: pool specs
record these as golden vectors, so a scorer that disagrees is found before it judges anyone."""

from __future__ import annotations

from typing import Any

import pytest

from proofpool.core.environment import TaskEnvironment
from proofpool.envs.tasks import installed_task_environments, load_task_environment

pytestmark = pytest.mark.timeout(120)

CONFIGS: dict[str, dict[str, Any]] = {
    "math": {},
    "reasoning-gym": {"tasks": {"gcd": 1, "leg_counting": 1, "basic_arithmetic": 1}, "seed": 3, "size": 60},
    "code": {"seed": 2, "generated_count": 24},
}


def test_every_installed_plugin_is_covered() -> None:
    assert {e.id for e in installed_task_environments()} == set(CONFIGS)


@pytest.mark.parametrize("env_id", sorted(CONFIGS))
def test_reference_completions_score_full_reward(env_id: str) -> None:
    env = load_task_environment(env_id, CONFIGS[env_id])
    assert isinstance(env, TaskEnvironment)
    size = len(env)
    for index in sorted({0, 1, size // 3, size // 2, size - 1}):
        completion = env.reference_completion(index)
        assert completion is not None, index
        score = env.score(index, completion)
        assert (score.reward, score.status) == (1.0, "correct"), (index, completion, score)
        assert env.score(index, "").reward == 0.0
