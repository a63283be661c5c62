"""The training pool devnet's elasticity drills (issue 22), run from its follow loop:

1. a worker is SIGKILLed (no cleanup) right after its file of round k went in, so round k+1 opens
   without it: it stays an active member on-chain, so that round closes at the spec's deadline
   with the other nodes' files;
2. the aggregator is SIGKILLed in round k+2, once that round has accepted files it may have fetched,
   and started again at once: it keeps no state of its own, so the checkpoint it publishes must be
   exactly what the uninterrupted computation gives, which `verify-round` recomputes bit for bit
   (its restart overlaps the killed worker's absence, so the drills cost one restart, not two);
3. the killed node is started again when round k+3 opens (two rounds after the one it missed): it
   starts from the latest checkpoint, as any late joiner, and its files are averaged in.

`results` reads what happened from the audited checkpoints (round records and publication times
from the chain and the store), not from the drill's own bookkeeping.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proofpool.devnet.diloco.report import DrillResult, VersionAudit
from proofpool.devnet.market import PROVIDER_NAMES

if TYPE_CHECKING:
    from proofpool.devnet.diloco.run import DilocoConfig, TrainingRun, Watch

    from proofpool.core.diloco.spec import DilocoSpec

MIN_ROUNDS = 9
"""Kill after round 2's file, miss round 3, restart the aggregator in round 4, rejoin at 5, and
rounds left for the rejoined node (whose start takes seconds) to be averaged in."""
DEADLINE_SLACK = 1.0
"""Seconds a deadline close may look early by (block times are whole seconds)."""


@dataclass
class ElasticityDrills:
    """The three drills, each started once when the market reaches its round (see the module)."""

    deadline: int
    min_contributors: int
    victim: str = PROVIDER_NAMES[1]
    kill_from: int = 2
    """The victim dies once its file of this round (or a later one) is in (round 0 is the cheater's)."""
    killed_at: int | None = None
    missed: int | None = None
    """The first round that opened without the victim."""
    rejoined_at: int | None = None
    """The round open when the victim was started again."""
    aggregator_at: int | None = None
    """The round open when the aggregator was killed and started again."""
    say: Callable[[str], None] = field(default=lambda _line: None, repr=False)

    @staticmethod
    def check_fits(config: DilocoConfig) -> None:
        """ValueError when the run is too short or too small for the drills: the victim must leave
        enough honest nodes to close rounds without it (the spec's minimum of files, 2)."""
        if config.rounds < MIN_ROUNDS:
            raise ValueError(f"the elasticity drills need {MIN_ROUNDS} rounds or more, not {config.rounds}")
        if config.honest_workers < 3:
            raise ValueError("the elasticity drills need 3 honest workers: one to kill, two to close rounds without it")

    @classmethod
    def for_spec(cls, spec: DilocoSpec, say: Callable[[str], None]) -> ElasticityDrills:
        return cls(deadline=spec.round.deadline_seconds, min_contributors=spec.round.min_contributors, say=say)

    def __call__(self, run: TrainingRun, watch: Watch) -> None:
        version = watch.version
        if self.killed_at is None:
            in_now = bool(watch.of(run.node_of(self.victim), version))
            if version >= self.kill_from and (in_now or version >= self.kill_from + 2):
                service = run.market.workers[self.victim]
                service.kill()
                run.down.append(service)
                self.killed_at, self.missed = version, version + 1 if in_now else version
                self.say(f"drill: SIGKILLed worker-{self.victim} (its file of round {version} is in)")
            return
        assert self.missed is not None
        if self.aggregator_at is None and version >= self.missed + 1 and watch.accepted(version) >= 1:
            aggregator = run.market.trainer
            assert aggregator is not None
            aggregator.kill()
            run.start_aggregator(run.config.rounds - version)
            self.aggregator_at = version
            self.say(f"drill: SIGKILLed the aggregator while round {version} had accepted files; started it again")
        if self.rejoined_at is None and version >= self.missed + 2:
            killed = run.market.workers[self.victim]
            run.market.restart(f"worker-{self.victim}")
            run.down[:] = [s for s in run.down if s is not killed]
            self.rejoined_at = version
            self.say(f"drill: started worker-{self.victim} again as round {version} opened")

    def results(self, run: TrainingRun, audits: Sequence[VersionAudit]) -> list[DrillResult]:
        node = run.node_of(self.victim)
        by_version = {a.version: a for a in audits}
        return [self._killed(node, by_version), self._rejoined(node, by_version), self._aggregator(by_version)]

    def _killed(self, node: str, audits: dict[int, VersionAudit]) -> DrillResult:
        name = "worker killed mid-round"
        if self.missed is None:
            return DrillResult(name, False, "never ran: the market did not reach the round")
        closed = audits.get(self.missed + 1)
        if closed is None:
            return DrillResult(name, False, f"round {self.missed} never closed")
        others = len(closed.contributors)
        opened = audits.get(self.missed)
        waited = (
            closed.published_at - opened.published_at
            if opened is not None and opened.published_at is not None and closed.published_at is not None
            else None
        )
        said = f"{self.victim} killed in round {self.killed_at}; round {self.missed} closed with {others} files"
        said += f" after {waited} s (deadline {self.deadline} s)" if waited is not None else ""
        if node in closed.contributors:
            return DrillResult(name, False, f"{said}, but the killed node's file is among them")
        if others < self.min_contributors:
            return DrillResult(name, False, f"{said}: fewer than the minimum {self.min_contributors}")
        if waited is not None and waited < self.deadline - DEADLINE_SLACK:
            return DrillResult(name, False, f"{said}: before the deadline, without an active member's file")
        return DrillResult(name, True, said)

    def _rejoined(self, node: str, audits: dict[int, VersionAudit]) -> DrillResult:
        name = "worker joins two rounds later"
        if self.rejoined_at is None:
            return DrillResult(name, False, "never ran: the market did not reach the round")
        joined = [v - 1 for v, a in sorted(audits.items()) if v - 1 >= self.rejoined_at and node in a.contributors]
        if not joined:
            return DrillResult(
                name, False, f"{self.victim} started again at round {self.rejoined_at}, never averaged in"
            )
        return DrillResult(
            name,
            True,
            f"{self.victim} started again when round {self.rejoined_at} opened; its files were averaged into "
            f"round{'s' if len(joined) > 1 else ''} {', '.join(map(str, joined))}",
        )

    def _aggregator(self, audits: dict[int, VersionAudit]) -> DrillResult:
        name = "aggregator killed and restarted"
        if self.aggregator_at is None:
            return DrillResult(name, False, "never ran: the market did not reach the round")
        published = audits.get(self.aggregator_at + 1)
        if published is None:
            return DrillResult(name, False, f"the restarted aggregator never closed round {self.aggregator_at}")
        if not published.verified:
            return DrillResult(name, False, f"checkpoint {published.version}: {published.verify_line}")
        return DrillResult(
            name,
            True,
            f"killed in round {self.aggregator_at}; the restarted aggregator's checkpoint {published.version} "
            f"is what its round recomputes to, bit for bit (verify-round)",
        )
