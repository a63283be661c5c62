"""The `code` task environment: write a Python function, judged by running tests in the sandbox.

Config keys (all optional but `seed`, which the generated source needs):

- `sources`: a subset of ["humaneval", "generated"] (default both); problems are indexed
  HumanEval first, then the generated ones;
- `generated_count`: how many generated tasks (default 200, 1..10000);
- `seed`: an integer >= 0, required with "generated" (and refused without it);
- `cpu_seconds` (default 5, 1..60), `memory_mb` (default 512, 128..4096), `wall_seconds`
  (default 10, at least `cpu_seconds`, at most 300): the sandbox's limits for one run.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from proofpool.core.environment import InvalidProblemId, Message, Problem, Score
from proofpool_code import generated, humaneval
from proofpool_code.programs import (
    MAX_PROGRAM_CHARS,
    CodeTask,
    Source,
    assemble_program,
    extract_last_block,
    new_marker,
)
from proofpool_code.sandbox import Limits, RunResult, Sandbox, SandboxError, SandboxInfo, check_sandbox

ENV_ID: Final = "code"
VERSION: Final = "0.1.0"
DISTRIBUTION: Final = "proofpool-code"

SOURCES: Final[tuple[Source, ...]] = ("humaneval", "generated")
_KEYS: Final = frozenset({"sources", "generated_count", "seed", "cpu_seconds", "memory_mb", "wall_seconds"})

NEAR_LIMIT: Final = 0.9
"""A run that used this share of its CPU or wall limit could have gone either way on another
machine: it is `inconclusive`."""

SYSTEM_PROMPT: Final = (
    "You are an expert Python programmer. Solve the task: write the complete Python function it "
    "describes, with any imports and helpers it needs. Reply with your solution in one fenced code "
    "block that starts with ```python; only the last such block of your reply is run, against "
    "hidden tests, with the Python standard library only, no network and no files."
)


def _int(config: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"code environment: {key!r} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"code environment: {key!r} must be in {low}..{high}, not {value}")
    return value


def _number(config: Mapping[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"code environment: {key!r} must be a number, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"code environment: {key!r} must be in {low:g}..{high:g}, not {value}")
    return float(value)


@dataclass(frozen=True)
class CodeConfig:
    """A validated config; `normalized()` is what `describe()` pins."""

    sources: tuple[Source, ...]
    generated_count: int | None
    seed: int | None
    limits: Limits

    @classmethod
    def parse(cls, config: Mapping[str, Any]) -> CodeConfig:
        if not isinstance(config, Mapping):
            raise ValueError(f"code environment: the config must be a mapping, not {type(config).__name__}")
        unknown = sorted(str(key) for key in config if key not in _KEYS)
        if unknown:
            raise ValueError(f"code environment: unknown config key {unknown[0]!r} (known: {sorted(_KEYS)})")
        raw_sources = config.get("sources", list(SOURCES))
        if isinstance(raw_sources, str) or not isinstance(raw_sources, list | tuple):
            raise ValueError(f"code environment: 'sources' must be a list of {list(SOURCES)}, not {raw_sources!r}")
        if not raw_sources or any(source not in SOURCES for source in raw_sources):
            raise ValueError(f"code environment: 'sources' must be a non-empty subset of {list(SOURCES)}")
        if len(set(raw_sources)) != len(raw_sources):
            raise ValueError(f"code environment: 'sources' repeats a source: {list(raw_sources)}")
        sources = tuple(source for source in SOURCES if source in raw_sources)
        generated_count = seed = None
        if "generated" in sources:
            if "seed" not in config:
                raise ValueError("code environment: 'seed' is required when 'sources' includes 'generated'")
            seed = _int(config, "seed", 0, 0, 2**63 - 1)
            generated_count = _int(config, "generated_count", 200, 1, 10_000)
        else:
            for key in ("seed", "generated_count"):
                if key in config:
                    raise ValueError(f"code environment: {key!r} is only used with the 'generated' source")
        cpu = _int(config, "cpu_seconds", 5, 1, 60)
        memory = _int(config, "memory_mb", 512, 128, 4096)
        wall = _number(config, "wall_seconds", 10.0, 1.0, 300.0)
        if wall < cpu:
            raise ValueError(f"code environment: 'wall_seconds' ({wall:g}) must be at least 'cpu_seconds' ({cpu})")
        limits = Limits(cpu_seconds=cpu, memory_mb=memory, wall_seconds=wall)
        return cls(sources=sources, generated_count=generated_count, seed=seed, limits=limits)

    def normalized(self) -> dict[str, Any]:
        normalized: dict[str, Any] = {"sources": list(self.sources)}
        if self.seed is not None:
            normalized |= {"generated_count": self.generated_count, "seed": self.seed}
        return normalized | {
            "cpu_seconds": self.limits.cpu_seconds,
            "memory_mb": self.limits.memory_mb,
            "wall_seconds": self.limits.wall_seconds,
        }


def _data_sha256(tasks: tuple[CodeTask, ...]) -> str:
    canonical = json.dumps(
        [task.digest_fields() for task in tasks], sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _one_line(text: str, limit: int = 240) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class CodeEnvironment:
    """HumanEval and generated function tasks; see the module docstring for the config."""

    id: str = ENV_ID
    version: str = VERSION
    reproducible_scores: bool = False
    """A run's CPU and wall time depend on the machine, so a program near a limit can pass on one
    and time out on another: validators judge rewards here, they do not slash over them
    (`proofpool.core.environment.TaskEnvironment`)."""

    def __init__(self, config: CodeConfig, sandbox: Sandbox, sandbox_info: SandboxInfo) -> None:
        self.config = config
        self._sandbox = Sandbox(sandbox.bwrap, sandbox.prlimit, sandbox.python, config.limits)
        self._sandbox_info = sandbox_info
        tasks: list[CodeTask] = []
        if "humaneval" in config.sources:
            tasks += humaneval.load_tasks()
        if config.seed is not None and config.generated_count is not None:
            tasks += generated.make_tasks(config.seed, config.generated_count)
        self._tasks = tuple(tasks)
        self._digest = _data_sha256(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def _task(self, index: int) -> CodeTask:
        try:
            position = operator.index(index)
        except TypeError:
            raise InvalidProblemId(f"code problem index must be an integer, not {index!r}") from None
        if isinstance(index, bool) or not 0 <= position < len(self._tasks):
            raise InvalidProblemId(f"code problem index {index!r} is outside 0..{len(self._tasks) - 1}")
        return self._tasks[position]

    def problem(self, index: int) -> Problem:
        task = self._task(index)
        metadata: dict[str, Any] = {"source": task.source, "entry_point": task.entry_point}
        if task.family is not None:
            metadata["family"] = task.family
        return Problem(
            index=operator.index(index),
            source_id=task.source_id,
            messages=(Message("system", SYSTEM_PROMPT), Message("user", task.prompt)),
            answer=task.prompt + task.canonical_solution,
            metadata=metadata,
        )

    def reference_completion(self, index: int) -> str | None:
        """The canonical solution (prompt and body) in the fenced block the scorer runs."""
        task = self._task(index)
        return f"```python\n{task.prompt}{task.canonical_solution}\n```"

    def score(self, index: int, completion: str) -> Score:
        task = self._task(index)
        if not isinstance(completion, str):
            return Score(0.0, "unparsed", f"the completion is a {type(completion).__name__}, not text")
        block = extract_last_block(completion)
        if block is None:
            return Score(0.0, "unparsed", "no fenced ```python code block")
        if len(block) > MAX_PROGRAM_CHARS:
            return Score(0.0, "error", f"the code block has {len(block)} characters (at most {MAX_PROGRAM_CHARS})")
        marker = new_marker()
        try:
            result = self._sandbox.run(assemble_program(task, block, marker), marker)
        except SandboxError as exc:
            # The sandbox failed before the program ran: not the completion's doing.
            return Score(0.0, "inconclusive", _one_line(f"sandbox failure: {exc}"))
        return self._judge(result)

    def _judge(self, result: RunResult) -> Score:
        """Map a run to a score; close calls are `inconclusive` (see `NEAR_LIMIT`)."""
        limits = self.config.limits
        cpu = result.cpu_seconds or 0.0
        used = f"CPU {cpu:.2f}/{limits.cpu_seconds} s, wall {result.wall_seconds:.2f}/{limits.wall_seconds:g} s"
        if result.timed_out and cpu < NEAR_LIMIT * limits.cpu_seconds:
            return Score(0.0, "inconclusive", f"wall-clock limit hit before the CPU limit, overloaded? ({used})")
        if result.outcome == "timeout":
            return Score(0.0, "timeout", _one_line(f"{result.detail} ({used})"))
        near_cpu = cpu >= NEAR_LIMIT * limits.cpu_seconds
        if near_cpu or result.wall_seconds >= NEAR_LIMIT * limits.wall_seconds:
            return Score(0.0, "inconclusive", f"finished within 10% of a limit ({result.outcome}; {used})")
        if result.outcome == "passed":
            return Score(1.0, "correct", f"all tests passed ({used})")
        if result.outcome == "memory":
            return Score(0.0, "error", _one_line(result.detail))
        if result.outcome == "failed" and result.detail.startswith(("SyntaxError", "IndentationError", "TabError")):
            return Score(0.0, "error", _one_line(f"does not compile: {result.detail}"))
        if result.outcome == "failed":
            return Score(0.0, "incorrect", _one_line(result.detail))
        return Score(0.0, "error", _one_line(result.detail))

    def describe(self) -> Mapping[str, Any]:
        return {
            "id": self.id,
            "version": self.version,
            "config": self.config.normalized(),
            "packages": {
                humaneval.PACKAGE: humaneval.package_version(),
                DISTRIBUTION: _own_version(),
            },
            "problems": len(self._tasks),
            "data_sha256": self._digest,
            "sandbox": {
                "bwrap": self._sandbox_info.bwrap_version,
                "python": ".".join(self._sandbox_info.python_version.split(".")[:2]),
            },
        }


def _own_version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return VERSION


def make(config: Mapping[str, Any]) -> CodeEnvironment:
    """The entry point: validate the config, prove the sandbox works, build the problems.

    Raises `ValueError` for a bad config and `SandboxUnavailable` when bubblewrap is missing or
    broken, so a code pool refuses to start instead of scoring without a sandbox."""
    parsed = CodeConfig.parse(config)
    sandbox, info = check_sandbox()
    return CodeEnvironment(parsed, sandbox, info)
