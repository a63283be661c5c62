"""proofpool's `code` task environment: HumanEval and seeded function tasks, scored by running
the completion's last ```python block against the tests inside a bubblewrap sandbox.

The entry point `code` of the group `proofpool.environments` names `make`. See README.md.
"""

from __future__ import annotations

from proofpool_code.env import CodeEnvironment, make
from proofpool_code.sandbox import SandboxUnavailable, check_sandbox

__all__ = ["CodeEnvironment", "SandboxUnavailable", "check_sandbox", "make"]
