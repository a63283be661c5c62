"""proofpool's `math` task environment: a shipped set of exact-answer problems, scored by math-verify.

The entry point `math` of the group `proofpool.environments` names `make`, which turns a pool's
config into a `proofpool.core.environment.TaskEnvironment`. Problems come from a committed data
file generated deterministically (`proofpool_math.generate`); completions are judged by
math-verify in a forked child under kernel CPU and memory limits (`proofpool_math.worker`).
"""

from __future__ import annotations

from proofpool_math.env import VERSION, MathConfigError, MathEnvironment, make

__all__ = ["VERSION", "MathConfigError", "MathEnvironment", "make"]
