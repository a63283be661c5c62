"""The `math` task environment: shipped problems with exact answers, scored by math-verify.

A pool's spec pins the config and `describe()`; the same config selects the same problems in
the same order on every machine (the data file filtered in file order), and a score depends only
on (index, completion) and the limits the config sets.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, Final

from proofpool.core.environment import InvalidProblemId, Message, Problem, Score
from proofpool.core.errors import ConfigError
from proofpool_math.data import FAMILIES, LEVELS, Record, data_sha256, records
from proofpool_math.scoring import Limits, Scorer

VERSION: Final = "0.1.0"
"""Bump with any change that can alter a problem, a prompt or a score."""
SYSTEM_PROMPT: Final = (
    "Solve the math problem. Reason step by step, then give only the final answer, in simplest "
    "exact form, inside \\boxed{...} at the end of your response."
)
CONFIG_KEYS: Final = ("families", "levels", "limit", "cpu_seconds")
MAX_CPU_SECONDS: Final = 60


class MathConfigError(ConfigError, ValueError):
    """A bad `math` environment config; a ValueError too, for callers that validate generically."""


def _int(key: str, value: object, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MathConfigError(f"math config {key!r}: expected an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"between {low} and {high}"
        raise MathConfigError(f"math config {key!r}: {value} is not {bounds}")
    return value


def _list(key: str, value: object) -> Sequence[object]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise MathConfigError(f"math config {key!r}: expected a list, got {value!r}")
    if not value:
        raise MathConfigError(f"math config {key!r}: the list is empty")
    return value


def normalize_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The config with every key explicit and lists in canonical order (what `describe` pins).

    Keys: `families` (subset of the data's families, default all), `levels` (subset of 1, 2, 3,
    default all), `limit` (keep the first N selected problems, default none), `cpu_seconds` (the
    CPU limit of one score, 1..60, default 5).
    """
    if not isinstance(config, Mapping):
        raise MathConfigError(f"math config: expected a mapping, got {type(config).__name__}")
    unknown = sorted(str(key) for key in config if key not in CONFIG_KEYS)
    if unknown:
        raise MathConfigError(f"math config: unknown key {unknown[0]!r} (known: {', '.join(CONFIG_KEYS)})")
    families = list(FAMILIES)
    if config.get("families") is not None:
        wanted = _list("families", config["families"])
        for family in wanted:
            if family not in FAMILIES:
                known = ", ".join(FAMILIES)
                raise MathConfigError(f"math config 'families': unknown family {family!r} (known: {known})")
        families = [family for family in FAMILIES if family in wanted]
    levels = list(LEVELS)
    if config.get("levels") is not None:
        wanted_levels = {_int("levels", level, LEVELS[0], LEVELS[-1]) for level in _list("levels", config["levels"])}
        levels = sorted(wanted_levels)
    limit = None if config.get("limit") is None else _int("limit", config["limit"], 1)
    cpu_seconds = Limits().cpu_seconds
    if config.get("cpu_seconds") is not None:
        cpu_seconds = _int("cpu_seconds", config["cpu_seconds"], 1, MAX_CPU_SECONDS)
    return {"families": families, "levels": levels, "limit": limit, "cpu_seconds": cpu_seconds}


def _version(distribution: str, fallback: str = "unknown") -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return fallback


class MathEnvironment:
    """`proofpool.core.environment.TaskEnvironment` over the shipped math problems."""

    id: Final = "math"
    version: Final = VERSION

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = normalize_config(config)
        selected = [
            record
            for record in records()
            if record.family in self.config["families"] and record.level in self.config["levels"]
        ]
        if self.config["limit"] is not None:
            selected = selected[: self.config["limit"]]
        if not selected:
            raise MathConfigError(
                f"math config selects no problems (families {self.config['families']}, levels {self.config['levels']})"
            )
        self._records: tuple[Record, ...] = tuple(selected)
        self.limits = Limits(cpu_seconds=self.config["cpu_seconds"])
        self._scorer = Scorer(self.limits)

    def __len__(self) -> int:
        return len(self._records)

    def _record(self, index: int) -> Record:
        try:
            if isinstance(index, bool):
                raise TypeError
            position = operator.index(index)
        except TypeError:
            raise InvalidProblemId(f"math problem index {index!r} is not an integer") from None
        if not 0 <= position < len(self._records):
            raise InvalidProblemId(f"math problem index {position} is outside 0..{len(self._records) - 1}")
        return self._records[position]

    def problem(self, index: int) -> Problem:
        record = self._record(index)
        return Problem(
            index=operator.index(index),
            source_id=record.id,
            messages=(Message("system", SYSTEM_PROMPT), Message("user", record.question)),
            answer=record.answer,
            metadata={"family": record.family, "level": record.level},
        )

    def reference_completion(self, index: int) -> str | None:
        """The reference answer, boxed as the scorer expects."""
        return f"The answer is \\boxed{{{self._record(index).answer}}}."

    def score(self, index: int, completion: str) -> Score:
        record = self._record(index)
        if not isinstance(completion, str):
            raise TypeError(f"a completion is text, got {type(completion).__name__}")
        return self._scorer.score(record.answer, completion)

    def describe(self) -> Mapping[str, Any]:
        return {
            "id": self.id,
            "version": self.version,
            "config": dict(self.config),
            "packages": {
                "proofpool-math": _version("proofpool-math", VERSION),
                "math-verify": _version("math-verify"),
                "latex2sympy2_extended": _version("latex2sympy2_extended"),
                "sympy": _version("sympy"),
            },
            "data_sha256": data_sha256(),
            "count": len(self._records),
            "limits": {
                "cpu_seconds": self.limits.cpu_seconds,
                "memory_mib": self.limits.memory_mib,
                "wall_seconds": self.limits.wall_seconds,
            },
        }

    def close(self) -> None:
        """Stop the scoring worker now rather than at garbage collection or exit."""
        self._scorer.close()

    def __enter__(self) -> MathEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make(config: Mapping[str, Any]) -> MathEnvironment:
    """The entry point `math` of `proofpool.environments`: config -> environment."""
    return MathEnvironment(config)
