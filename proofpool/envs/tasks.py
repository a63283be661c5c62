"""Task environments by id: the text-level plugins (`proofpool.core.environment.TaskEnvironment`).

A plugin names a factory `make(config) -> TaskEnvironment` in the entry point group
`proofpool.environments` under its environment id (`reasoning-gym`, `math`, `code`). The same
group still holds the devnet's model-URI environment (`devnet`, an `Environment` object); this
module tells the two apart by what the entry point loads, so listing and loading only ever hand
out task environments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from proofpool.core.environment import Environment, TaskEnvironment
from proofpool.core.errors import ProofpoolError
from proofpool.envs import ENTRY_POINT_GROUP


class TaskEnvironmentError(ProofpoolError):
    """An environment id names no installed task environment, or its config was refused."""


@dataclass(frozen=True)
class InstalledTaskEnvironment:
    """One installed plugin: its id, where its factory lives and the distribution that ships it."""

    id: str
    target: str
    distribution: str | None
    version: str | None


def _factories() -> dict[str, tuple[EntryPoint, Any]]:
    """id -> (entry point, loaded factory) for every entry that is a task-environment factory."""
    found: dict[str, tuple[EntryPoint, Any]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        loaded = ep.load()
        if callable(loaded) and not isinstance(loaded, Environment):
            found[ep.name] = (ep, loaded)
    return found


def installed_task_environments() -> list[InstalledTaskEnvironment]:
    """The installed task environments, by id."""
    return [
        InstalledTaskEnvironment(
            name, ep.value, ep.dist.name if ep.dist else None, ep.dist.version if ep.dist else None
        )
        for name, (ep, _) in sorted(_factories().items())
    ]


def load_task_environment(env_id: str, config: Mapping[str, Any]) -> TaskEnvironment:
    """The task environment `env_id` built from `config`; `TaskEnvironmentError` with the reason
    when no plugin has that id or the plugin refuses the config."""
    factories = _factories()
    if env_id not in factories:
        have = ", ".join(sorted(factories)) or "none"
        raise TaskEnvironmentError(f"no task environment {env_id!r} is installed (installed: {have})")
    try:
        environment = factories[env_id][1](config)
    except (ValueError, TypeError, ProofpoolError) as exc:
        raise TaskEnvironmentError(f"{env_id}: config refused: {exc}") from exc
    if not isinstance(environment, TaskEnvironment):
        raise TaskEnvironmentError(f"{factories[env_id][0].value} did not build a task environment")
    return environment


def read_config(text: str | None) -> dict[str, Any]:
    """A config given on a command line: inline JSON, `@path` to a JSON file, or nothing (`{}`)."""
    if not text:
        return {}
    source = Path(text[1:]).read_text() if text.startswith("@") else text
    try:
        config = json.loads(source)
    except json.JSONDecodeError as exc:
        raise TaskEnvironmentError(f"config is not JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise TaskEnvironmentError("config must be a JSON object")
    return config
