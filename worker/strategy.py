"""How a worker makes and sends its rollout files: the one hook a devnet adversary replaces.

`proofpool.worker.node.WorkerNode` asks its `RolloutStrategy` at the three points where a file is made and
sent: which model directory generates an assignment's batch, the file from a generation, and the
journaled batch as `submitWork` sends it; and whether to refuse sending a batch whose version fell
out of the pool's window. `Honest`, the default, changes nothing. The devnet's dishonest workers
(`proofpool worker run --cheat`, `proofpool.devnet.adversary`) plug in here; the worker has no
other branch for them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from proofpool.worker.journal import JournalEntry
    from proofpool.worker.rollout import RolloutFile

    from proofpool.core.rollout import RolloutFileMeta
    from proofpool.infra.http.node_api import Assignment


class RolloutStrategy(Protocol):
    """What a worker does differently from an honest one (see the module docstring)."""

    checks_staleness: bool
    """Whether a batch whose version left the pool's window is abandoned instead of sent."""

    def model_path(self, a: Assignment, resolve: Callable[[Assignment], Path]) -> Path:
        """The model directory that generates the batch of `a` (`resolve` is the honest resolver)."""
        ...

    def make_file(self, a: Assignment, meta: RolloutFileMeta, generate: Callable[[], RolloutFile]) -> RolloutFile:
        """The rollout file submitted for `a`; `generate` makes the honest one."""
        ...

    def on_chain(self, entry: JournalEntry) -> JournalEntry:
        """The journaled batch as `submitWork` sends it."""
        ...


class Honest:
    """The honest worker: the assigned model, the generated file, the journaled batch."""

    checks_staleness = True

    def model_path(self, a: Assignment, resolve: Callable[[Assignment], Path]) -> Path:
        return resolve(a)

    def make_file(self, a: Assignment, meta: RolloutFileMeta, generate: Callable[[], RolloutFile]) -> RolloutFile:
        return generate()

    def on_chain(self, entry: JournalEntry) -> JournalEntry:
        return entry
