"""The pool creator's guide's worked example (docs/pool-creator.md) is a working task environment:
its code, run as written, keeps the protocol, and its reference completions earn the full reward."""

from __future__ import annotations

import re
import types
from pathlib import Path

from proofpool.core.environment import TaskEnvironment

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "pool-creator.md"


def test_the_guides_plugin_is_a_deterministic_task_environment() -> None:
    text = GUIDE.read_text()
    [code] = re.findall(r"```python\n# proofpool_countdown/__init__.py\n(.*?)```", text, re.S)
    assert 'countdown = "proofpool_countdown:make"' in text  # the entry point it documents
    module = types.ModuleType("proofpool_countdown")
    exec(compile(code, str(GUIDE), "exec"), module.__dict__)  # the guide's own text, nothing untrusted
    env = module.make({"seed": 5, "size": 40})
    assert isinstance(env, TaskEnvironment) and len(env) == 40
    assert env.problem(7) == module.make({"seed": 5, "size": 40}).problem(7)
    assert env.problem(7) != module.make({"seed": 6, "size": 40}).problem(7)
    for index in (0, 7, 39):
        assert env.score(index, "thinking " + env.reference_completion(index)).status == "correct"
    assert env.score(0, "<answer>nope</answer>").status == "unparsed"
    assert env.score(0, "<answer>1</answer>").reward == 0.0
    assert len(env.describe()["data_sha256"]) == 64
