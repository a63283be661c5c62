"""The environment's config: checked once, normalized, and refused early when it cannot be trusted.

A pool spec pins the config and every worker and validator rebuilds the environment from it, so
this module refuses anything that would let two machines disagree or a completion attack its scorer
(no seed, a task that reads the clock or Python's hash order, a scorer that runs the completion as
code or can be made to spin for minutes) with a `ValueError` that
names the bad key, before any problem is drawn. The normalized form (`EnvConfig.as_json`) is what
`describe()` publishes: two configs that build the same problems normalize to the same mapping.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from reasoning_gym.factory import DATASETS

from proofpool.core.errors import ConfigError


class InvalidConfig(ConfigError, ValueError):
    """A config this environment refuses: a `ValueError` as the factory contract asks, and a
    `ConfigError` so the CLI reports it like proofpool's other settings mistakes."""


CONFIG_KEYS: Final = ("tasks", "seed", "size", "task_config")
DEFAULT_SIZE: Final = 10_000
MAX_SIZE: Final = 1_000_000
"""Bounded so that seed + index stays a valid numpy seed (below 2**32, see `MAX_SEED`) and so a
typo cannot ask for a billion problems: sub-datasets of a mix and a few tasks (`acre`) build
`size` items up front."""
MAX_SEED: Final = 2**31 - 1
"""reasoning-gym seeds each item with `seed + index` (sub-datasets of a mix with `seed + i + 1`),
and `pool_matrix` hands that to `numpy.random.seed`, which takes only 0..2**32 - 1."""

NONDETERMINISTIC_TASKS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Found by reading reasoning-gym 0.1.25's sources: `grep -rnE "datetime\.now|date\.today|
        # time\.time|random\.[a-z_]+\(|Random\(\)"` over site-packages/reasoning_gym, then reading
        # each hit (most were `__main__` demos or seeded `Random(seed + idx)`).
        "time_intervals": "reads the clock: date.today() in TimeIntervalsDataset._generate_times",
        "list_functions": "draws from the unseeded global `random` (create_random_odd_numbers)",
        # Found by generating the first 10-25 items of every task at seed 7/42 in processes with
        # different PYTHONHASHSEED values and comparing sha256 digests (and, for codeio, two
        # instances in one process): their items depend on set iteration order, i.e. on Python's
        # per-process string hashing, so two machines draw different problems from one seed.
        "codeio": "runs bundled code samples whose output differs between processes and instances",
        "isomorphic_strings": "rng.choice over a list made from a set of letters (hash order)",
        "ransom_note": "rng.choice over a list made from a set of letters (hash order)",
        "word_ladder": "walks sets of words (hash order)",
        "knight_swap": "searches over sets of board positions (hash order)",
        "polynomial_multiplication": "sympy term order follows the process's hash seed",
    }
)
"""Tasks whose items are not a pure function of (seed, index) in reasoning-gym 0.1.25. Re-check
this list when the pin moves (the README says how)."""

UNSAFE_SCORER_TASKS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Found by listing every dataset's `score_answer` (inspect.getsource) and grepping it for
        # eval / exec / sympy parse_expr: each one below evaluates the completion's answer text as
        # Python, so a completion can run code on every worker and validator that scores it (checked:
        # `print(...)` inside <answer> tags runs under n_queens; `__import__('os')` under countdown),
        # and can hang the scorer (`9**9**9**9`).
        "binary_matrix": "its scorer eval()s the answer",
        "n_queens": "its scorer eval()s the answer",
        "spiral_matrix": "its scorer eval()s the answer",
        "string_insertion": "its scorer eval()s the answer",
        "countdown": "its scorer runs sympy parse_expr (eval) on the answer",
        "puzzle24": "its scorer runs sympy parse_expr (eval) on the answer",
        "simple_integration": "its scorer runs sympy parse_expr (eval) on the answer",
        "intermediate_integration": "its scorer runs sympy parse_expr (eval) on the answer",
        # Found by scoring ~35 hostile answers (huge numbers, deep nesting, long formulas) against
        # every other task in a child process with a 5 s CPU limit: these ran into the limit on an
        # answer a few characters or kilobytes long, and scores run in-process with no time limit.
        "coin_flip": "its scorer computes Fraction('1e999999999') exactly (minutes of CPU for 11 characters)",
        "propositional_logic": "its scorer parses formulas in superlinear time (seconds for 4 KB, then worse)",
    }
)
"""Tasks refused because their scorer is unsafe on untrusted text: it would run the completion as
code, or let a short completion hold a validator's CPU for minutes."""

_NOT_TASKS: Final = frozenset({"composite"})  # reasoning-gym's mixer: use the `tasks` mapping instead


def available_tasks() -> list[str]:
    """Every reasoning-gym task this environment accepts, sorted (the README's way to list them)."""
    refused = NONDETERMINISTIC_TASKS.keys() | UNSAFE_SCORER_TASKS.keys() | _NOT_TASKS
    return sorted(name for name in DATASETS if name not in refused)


@dataclass(frozen=True)
class EnvConfig:
    """A checked config: tasks sorted by name with float weights, overrides sorted and JSON-clean."""

    tasks: Mapping[str, float]
    seed: int
    size: int
    task_config: Mapping[str, Mapping[str, Any]]

    def as_json(self) -> dict[str, Any]:
        """The normalized config, as `describe()` publishes it (fresh containers, safe to mutate)."""
        task_config = {name: dict(kwargs) for name, kwargs in self.task_config.items()}
        return json.loads(
            json.dumps({"tasks": dict(self.tasks), "seed": self.seed, "size": self.size, "task_config": task_config})
        )

    def dataset_kwargs(self, name: str) -> dict[str, Any]:
        """The overrides for one task, as keyword arguments of its reasoning-gym config class."""
        return json.loads(json.dumps(dict(self.task_config.get(name, {}))))


def parse_config(config: Mapping[str, Any]) -> EnvConfig:
    """Check and normalize a raw config; raises `InvalidConfig` (a `ValueError`) naming the first bad key."""
    if not isinstance(config, Mapping):
        raise InvalidConfig(f"config must be a mapping, got {type(config).__name__}")
    unknown = sorted(str(key) for key in config if key not in CONFIG_KEYS)
    if unknown:
        raise InvalidConfig(f"unknown config key(s) {unknown}; expected some of {list(CONFIG_KEYS)}")
    tasks = _parse_tasks(config.get("tasks"))
    seed = _parse_seed(config.get("seed"))
    size = _parse_size(config.get("size", DEFAULT_SIZE))
    task_config = _parse_task_config(config.get("task_config", {}), tasks)
    for name in tasks:
        _check_dataset_config(name, seed, size, task_config.get(name, {}))
    return EnvConfig(
        tasks=MappingProxyType(tasks),
        seed=seed,
        size=size,
        task_config=MappingProxyType({name: MappingProxyType(kwargs) for name, kwargs in task_config.items()}),
    )


def _parse_tasks(raw: Any) -> dict[str, float]:
    """One task name, or a mapping name -> positive weight; sorted so key order never matters.

    A single task's weight is normalized to 1.0: it draws every problem whatever its weight, so
    `"gcd"` and `{"gcd": 3}` build the same environment and must describe themselves the same.
    """
    if raw is None:
        raise InvalidConfig("config key 'tasks' is required: a reasoning-gym task name or a mapping name -> weight")
    if isinstance(raw, str):
        raw = {raw: 1.0}
    if not isinstance(raw, Mapping) or not raw:
        raise InvalidConfig(
            f"config key 'tasks' must be a task name or a non-empty mapping name -> weight, got {raw!r}"
        )
    tasks: dict[str, float] = {}
    for name, weight in raw.items():
        if not isinstance(name, str):
            raise InvalidConfig(f"config key 'tasks': task names must be strings, got {name!r}")
        _check_task_name(name)
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise InvalidConfig(f"config key 'tasks': weight of {name!r} must be a number, got {weight!r}")
        if not math.isfinite(weight) or weight <= 0:
            raise InvalidConfig(f"config key 'tasks': weight of {name!r} must be positive and finite, got {weight!r}")
        tasks[name] = float(weight)
    if len(tasks) == 1:
        return dict.fromkeys(tasks, 1.0)
    return dict(sorted(tasks.items()))


def _check_task_name(name: str) -> None:
    """Refuse unknown, nondeterministic and unsafe tasks, each with its own reason."""
    if name in NONDETERMINISTIC_TASKS:
        raise InvalidConfig(
            f"config key 'tasks': task {name!r} is refused because it is not deterministic for a fixed seed "
            f"({NONDETERMINISTIC_TASKS[name]})"
        )
    if name in UNSAFE_SCORER_TASKS:
        raise InvalidConfig(
            f"config key 'tasks': task {name!r} is refused because its scorer is unsafe on untrusted completions "
            f"({UNSAFE_SCORER_TASKS[name]})"
        )
    if name in _NOT_TASKS:
        raise InvalidConfig(f"config key 'tasks': {name!r} is not a task; give 'tasks' as a mapping name -> weight")
    if name not in DATASETS:
        known = available_tasks()
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"did you mean {close}? " if close else ""
        raise InvalidConfig(
            f"config key 'tasks': unknown reasoning-gym task {name!r}; {hint}known tasks include {known[:8]} "
            f"({len(known)} in all, see proofpool_reasoning_gym.available_tasks())"
        )


def _parse_seed(raw: Any) -> int:
    """Required: reasoning-gym draws a fresh random seed when given None, which no two machines share."""
    if raw is None:
        raise InvalidConfig(
            "config key 'seed' is required (an int): without it every machine would draw other problems"
        )
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidConfig(f"config key 'seed' must be an int, got {raw!r}")
    if not 0 <= raw <= MAX_SEED:
        raise InvalidConfig(f"config key 'seed' must be in 0..{MAX_SEED}, got {raw}")
    return raw


def _parse_size(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidConfig(f"config key 'size' must be an int, got {raw!r}")
    if not 1 <= raw <= MAX_SIZE:
        raise InvalidConfig(f"config key 'size' must be in 1..{MAX_SIZE}, got {raw}")
    return raw


def _parse_task_config(raw: Any, tasks: Mapping[str, float]) -> dict[str, dict[str, Any]]:
    """Per-task keyword overrides, JSON-clean and sorted; empty ones are dropped (they change nothing)."""
    if not isinstance(raw, Mapping):
        raise InvalidConfig(f"config key 'task_config' must be a mapping task name -> keyword arguments, got {raw!r}")
    parsed: dict[str, dict[str, Any]] = {}
    for name, kwargs in raw.items():
        if name not in tasks:
            raise InvalidConfig(
                f"config key 'task_config': {name!r} is not one of the configured tasks {sorted(tasks)}"
            )
        if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
            raise InvalidConfig(
                f"config key 'task_config.{name}' must be a mapping of keyword arguments, got {kwargs!r}"
            )
        for key in ("seed", "size"):
            if key in kwargs:
                raise InvalidConfig(
                    f"config key 'task_config.{name}.{key}' is not allowed: set the top-level '{key}' instead"
                )
        try:
            clean = json.loads(json.dumps(kwargs, sort_keys=True, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidConfig(f"config key 'task_config.{name}' must be JSON-safe: {exc}") from exc
        if clean:
            parsed[name] = clean
    return dict(sorted(parsed.items()))


def _check_dataset_config(name: str, seed: int, size: int, kwargs: Mapping[str, Any]) -> None:
    """Build (cheaply) the task's own config dataclass and run its checks, as `create_dataset` will.

    Done here so a bad override fails when the pool is configured, not on the first problem drawn
    (the datasets themselves are built lazily). reasoning-gym checks with `assert`, hence the
    `AssertionError`.
    """
    _, config_cls = DATASETS[name]
    field_names = {field.name for field in dataclasses.fields(config_cls)}
    unknown = sorted(set(kwargs) - field_names)
    if unknown:
        raise InvalidConfig(
            f"config key 'task_config.{name}': unknown option(s) {unknown}; "
            f"{name} takes {sorted(field_names - {'seed', 'size'})}"
        )
    try:
        dataset_config = config_cls(seed=seed, size=size, **kwargs)
        validate = getattr(dataset_config, "validate", None)
        if callable(validate):
            validate()
    except (AssertionError, TypeError, ValueError, KeyError) as exc:
        raise InvalidConfig(f"config key 'task_config.{name}' is invalid: {str(exc) or type(exc).__name__}") from exc
