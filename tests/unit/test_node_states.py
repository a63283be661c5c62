"""The node state table: banned > ejected > dead > unhealthy > healthy; discovered outside pools."""

from __future__ import annotations

import pytest
from proofpool.backend.orchestrator.states import Liveness, NodeState, latest, node_state

LIVENESS = Liveness(unhealthy_after=30, dead_after=120)
NOW = 1_000_000.0


@pytest.mark.parametrize(
    "membership, blacklisted, last_seen, expected",
    [
        (None, False, None, NodeState.DISCOVERED),
        (None, False, NOW, NodeState.DISCOVERED),
        (None, True, NOW, NodeState.BANNED),
        ("active", True, NOW, NodeState.BANNED),
        ("ejected", True, NOW, NodeState.BANNED),
        ("ejected", False, NOW, NodeState.EJECTED),
        ("slashed", False, NOW, NodeState.EJECTED),
        ("left", False, NOW, NodeState.EJECTED),
        ("active", False, NOW, NodeState.HEALTHY),
        ("active", False, NOW - 30, NodeState.HEALTHY),
        ("active", False, NOW - 30.5, NodeState.UNHEALTHY),
        ("active", False, NOW - 120, NodeState.UNHEALTHY),
        ("active", False, NOW - 121, NodeState.DEAD),
        ("active", False, None, NodeState.UNHEALTHY),
        ("active", False, NOW + 5, NodeState.HEALTHY),
        ("ejected", False, NOW - 10_000, NodeState.EJECTED),
    ],
)
def test_state_table(membership, blacklisted, last_seen, expected) -> None:
    state = node_state(membership=membership, blacklisted=blacklisted, last_seen=last_seen, now=NOW, liveness=LIVENESS)
    assert state is expected


def test_no_evidence_is_never_dead() -> None:
    """A member with no heartbeat, join time or tracking epoch is not ejected on a guess."""
    far_future = node_state(membership="active", blacklisted=False, last_seen=None, now=1e12, liveness=LIVENESS)
    assert far_future is NodeState.UNHEALTHY


def test_latest_ignores_unknowns() -> None:
    assert latest(None, 5.0, 3.0) == 5.0
    assert latest(None, None) is None


@pytest.mark.parametrize("unhealthy, dead", [(0, 10), (20, 10), (-1, 5)])
def test_liveness_thresholds_must_be_ordered(unhealthy: float, dead: float) -> None:
    with pytest.raises(ValueError):
        Liveness(unhealthy, dead)
