"""proofpool's `reasoning-gym` task environment: reasoning-gym's procedural tasks, seeded and scored.

The entry point `reasoning-gym` of the group `proofpool.environments` names `make`, which checks a
JSON config (`tasks`, `seed`, `size`, `task_config`; see the README) and returns a
`proofpool.core.environment.TaskEnvironment`. `available_tasks()` lists the task names it accepts:
reasoning-gym's datasets minus those that are not deterministic for a fixed seed or whose scorer
runs the completion as code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proofpool.core.environment import TaskEnvironment
from proofpool_reasoning_gym.config import (
    NONDETERMINISTIC_TASKS,
    UNSAFE_SCORER_TASKS,
    EnvConfig,
    InvalidConfig,
    available_tasks,
    parse_config,
)
from proofpool_reasoning_gym.env import SYSTEM_PROMPT, VERSION, ReasoningGymEnvironment

__version__ = VERSION

__all__ = [
    "NONDETERMINISTIC_TASKS",
    "SYSTEM_PROMPT",
    "UNSAFE_SCORER_TASKS",
    "EnvConfig",
    "InvalidConfig",
    "ReasoningGymEnvironment",
    "available_tasks",
    "make",
]


def make(config: Mapping[str, Any]) -> TaskEnvironment:
    """The environment for `config`; raises `InvalidConfig` (a `ValueError`) naming a bad key.

    Fast whatever the size: the config is checked here, reasoning-gym's dataset is built on the
    first problem or score.
    """
    return ReasoningGymEnvironment(parse_config(config))
