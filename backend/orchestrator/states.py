"""Node states as one pure function of what the backend knows about a node.

The state is never stored: it is derived on read from the chain projections (membership,
blacklist), the node's announcement, and its last sign of life (heartbeat in Redis). Storing
it would mean a second source of truth that drifts from the chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

MembershipState = Literal["active", "left", "ejected", "slashed"]
"""Values of `memberships.state` in the chain projection."""


class NodeState(StrEnum):
    """What the orchestrator thinks of a node, from the most to the least severe."""

    BANNED = "banned"
    """Blacklisted by the pool manager: never invited again."""
    EJECTED = "ejected"
    """Its membership ended (ejected, slashed or left); it may be invited again unless slashed."""
    DEAD = "dead"
    """An active member silent for longer than `dead_after`: the sweeper ejects it."""
    UNHEALTHY = "unhealthy"
    """An active member silent for longer than `unhealthy_after`."""
    HEALTHY = "healthy"
    """An active member with a fresh heartbeat: it gets work."""
    DISCOVERED = "discovered"
    """Announced to the backend and registered on-chain, but not a member of any pool."""


@dataclass(frozen=True)
class Liveness:
    """Thresholds in seconds since the last sign of life (`settings.unhealthy_after`, `dead_after`)."""

    unhealthy_after: float
    dead_after: float

    def __post_init__(self) -> None:
        if not 0 < self.unhealthy_after <= self.dead_after:
            raise ValueError(
                f"need 0 < unhealthy_after <= dead_after, got {self.unhealthy_after} and {self.dead_after}"
            )


def node_state(
    *,
    membership: MembershipState | None,
    blacklisted: bool,
    last_seen: float | None,
    now: float,
    liveness: Liveness,
) -> NodeState:
    """The state of one node in one pool (or of a node in no pool: `membership=None`).

    `last_seen` is the latest unix time the node showed life: its last heartbeat, or, when it
    has none, the time it joined or the time liveness tracking started (whichever is later), so
    a fresh member or a Redis restart does not turn every node Dead at once. `None` means no
    evidence at all: such a member is Unhealthy, never Dead, so nobody is ejected on a guess.
    """
    if blacklisted:
        return NodeState.BANNED
    if membership is None:
        return NodeState.DISCOVERED
    if membership != "active":
        return NodeState.EJECTED
    if last_seen is None:
        return NodeState.UNHEALTHY
    silent = now - last_seen
    if silent > liveness.dead_after:
        return NodeState.DEAD
    if silent > liveness.unhealthy_after:
        return NodeState.UNHEALTHY
    return NodeState.HEALTHY


def latest(*times: float | None) -> float | None:
    """The latest of the given times, ignoring unknowns; None when all are unknown."""
    known = [t for t in times if t is not None]
    return max(known) if known else None
