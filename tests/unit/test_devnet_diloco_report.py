"""The training pool devnet's closing checks and drill verdicts (`proofpool.devnet.diloco.report`,
`proofpool.devnet.diloco.drills`), its live round line and its loss plot, on made-up audits: what
`proofpool devnet run --kind diloco` exits 1 on."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest
from proofpool.devnet.diloco.drills import ElasticityDrills
from proofpool.devnet.diloco.progress import RoundRow, closed_rounds, round_line
from proofpool.devnet.diloco.report import (
    MISMATCH,
    Baselines,
    CheaterRecord,
    VersionAudit,
    judge_training,
    plot_losses,
    svg_plot,
)
from proofpool.devnet.progress import NodeLine, Snapshot, ValidatorLine
from proofpool.devnet.report import Outcome

ALICE, BOB, CAROL = "0xA11ce", "0xB0b", "0xCa401"
DEADLINE = 10


def _audits(contributors: list[tuple[str, ...]], losses: list[float], published: list[int]) -> list[VersionAudit]:
    """Version 0 plus one audit per round (its contributors, held-out loss, publication time), all verified."""
    audits = [VersionAudit(0, losses[0], (), None, None)]
    for v, (who, loss, at) in enumerate(zip(contributors, losses[1:], published, strict=True), start=1):
        audits.append(VersionAudit(v, loss, who, at, True, f"OK: checkpoint {v} recomputed bitwise"))
    return audits


def _baselines(int8: float = 4.30, fp32: float = 4.31, single: float = 4.90, dp: float = 4.60) -> Baselines:
    return Baselines(3, 2, [6.0, 5.0, int8], [6.0, 5.0, fp32], [6.0, 5.5, single], [6.0, 5.2, dp], 1.0)


HONEST_CHEATER = CheaterRecord([3], [("invalid", MISMATCH, 5)])


def test_a_run_that_did_its_job_has_no_problems() -> None:
    audits = _audits([(ALICE, BOB), (ALICE, BOB)], [6.0, 5.0, 4.5], [100, 110])
    outcome = judge_training(Outcome([], True), 2, audits, _baselines(), HONEST_CHEATER, [])
    assert outcome.ok and outcome.ledger_matches is True, outcome.problems


@pytest.mark.parametrize(
    ("rounds", "audits", "baselines", "cheater", "problem"),
    [
        (3, _audits([(ALICE,), (ALICE,)], [6, 5, 4.5], [1, 2]), _baselines(), HONEST_CHEATER, "published 2 of 3"),
        (2, _audits([(ALICE,), (ALICE,)], [6, 5, 4.95], [1, 2]), _baselines(), HONEST_CHEATER, "single-node"),
        (2, _audits([(ALICE,), (ALICE,)], [6, 5, 4.85], [1, 2]), _baselines(), HONEST_CHEATER, "data parallel"),
        (2, _audits([(ALICE,), (ALICE,)], [6, 5, 4.5], [1, 2]), _baselines(fp32=4.50), HONEST_CHEATER, "fp32"),
        (2, _audits([(ALICE,), (ALICE,)], [6, 5, 4.5], [1, 2]), _baselines(), CheaterRecord([3], []), "no verdict"),
        (
            2,
            _audits([(ALICE,), (ALICE,)], [6, 5, 4.5], [1, 2]),
            _baselines(),
            CheaterRecord([3], [("accepted", None, 5), ("invalid", MISMATCH, 9)]),
            "first verdict was accepted",
        ),
        (
            2,
            _audits([(ALICE,), (ALICE,)], [6, 5, 4.5], [1, 2]),
            _baselines(),
            CheaterRecord([3], [("invalid", "wrong_units", 5)]),
            "first verdict was invalid (wrong_units)",
        ),
        (
            2,
            _audits([(ALICE,), (ALICE,)], [6, 5, 4.5], [1, 2]),
            _baselines(),
            CheaterRecord([3, 7], [("invalid", MISMATCH, 5), ("invalid", MISMATCH, 8)]),
            "after its first verdict",
        ),
    ],
)
def test_each_broken_promise_is_a_problem(
    rounds: int, audits: list[VersionAudit], baselines: Baselines, cheater: CheaterRecord, problem: str
) -> None:
    outcome = judge_training(Outcome([], True), rounds, audits, baselines, cheater, [])
    assert not outcome.ok
    assert any(problem in line for line in outcome.problems), outcome.problems


def test_a_checkpoint_that_does_not_recompute_is_a_problem() -> None:
    audits = _audits([(ALICE,), (ALICE,)], [6, 5, 4.5], [1, 2])
    audits[2] = VersionAudit(
        2, 4.5, (ALICE,), 2, False, "MISMATCH: checkpoint 2 of pool 1 is not what its round recomputes to"
    )
    outcome = judge_training(Outcome(["ledger verify: x"], False), 2, audits, None, None, [])
    assert outcome.problems == ["ledger verify: x", f"verify-round: {audits[2].verify_line}"]
    assert outcome.ledger_matches is False


class _Run:
    """What `ElasticityDrills.results` asks of a run: the victim's node address."""

    def node_of(self, name: str) -> str:
        return {"bob": BOB}[name]


def _drills(**state: int) -> ElasticityDrills:
    return ElasticityDrills(deadline=DEADLINE, min_contributors=2, victim="bob", **state)


def test_drills_pass_on_what_the_checkpoints_record() -> None:
    # Killed in round 2 after its file, missed round 3 (closed at the deadline), the aggregator
    # restarted in round 4, rejoined at 5 and averaged in from round 6.
    audits = _audits(
        [(ALICE, BOB, CAROL)] * 3 + [(ALICE, CAROL)] * 3 + [(ALICE, BOB, CAROL)] * 2,
        [6.0, 5.9, 5.8, 5.7, 5.6, 5.5, 5.4, 5.3, 5.2],
        [100, 105, 110, 121, 140, 151, 158, 163],
    )
    drills = _drills(killed_at=2, missed=3, aggregator_at=4, rejoined_at=5)
    results = {r.name: r for r in drills.results(_Run(), audits)}  # type: ignore[arg-type]
    assert all(r.ok for r in results.values()), results
    assert "after 11 s" in results["worker killed mid-round"].detail
    assert "rounds 6, 7" in results["worker joins two rounds later"].detail


KILLED, JOINS, AGGREGATOR = (
    "worker killed mid-round",
    "worker joins two rounds later",
    "aggregator killed and restarted",
)


@pytest.mark.parametrize(
    ("contributors", "published", "state", "drill", "why"),
    [
        ([(ALICE, BOB)] * 4, [100, 105, 110, 121], {"killed_at": 2, "missed": 3}, KILLED, "among them"),
        ([(ALICE, BOB)] * 3 + [(ALICE,)], [100, 105, 110, 121], {"killed_at": 2, "missed": 3}, KILLED, "minimum"),
        (
            [(ALICE, BOB)] * 3 + [(ALICE, CAROL)],
            [100, 105, 110, 114],
            {"killed_at": 2, "missed": 3},
            KILLED,
            "deadline",
        ),
        ([(ALICE, CAROL)] * 4, [100, 105, 110, 121], {"killed_at": 0, "missed": 1, "rejoined_at": 2}, JOINS, "never"),
        ([(ALICE, CAROL)] * 4, [100, 105, 110, 121], {}, AGGREGATOR, "never ran"),
    ],
)
def test_a_failed_drill_says_why(
    contributors: list[tuple[str, ...]], published: list[int], state: dict[str, int], drill: str, why: str
) -> None:
    audits = _audits(contributors, [6.0, 5.9, 5.8, 5.7, 5.6], published)
    result = {r.name: r for r in _drills(**state).results(_Run(), audits)}[drill]  # type: ignore[arg-type]
    assert not result.ok and why in result.detail, result


def test_an_aggregator_checkpoint_that_does_not_recompute_fails_its_drill() -> None:
    audits = _audits([(ALICE, CAROL)] * 3, [6.0, 5.9, 5.8, 5.7], [100, 105, 110])
    audits[2] = VersionAudit(2, 5.8, (ALICE, CAROL), 105, False, "MISMATCH: checkpoint 2")
    result = _drills(aggregator_at=1).results(_Run(), audits)[2]  # type: ignore[arg-type]
    assert result.name == "aggregator killed and restarted" and not result.ok and "MISMATCH" in result.detail


def test_drills_refuse_a_run_too_short_or_too_small(tmp_path: Path) -> None:
    from proofpool.devnet.diloco.run import DilocoConfig

    with pytest.raises(ValueError, match="9 rounds"):
        DilocoConfig(out_dir=tmp_path, rounds=8, drills=True)
    with pytest.raises(ValueError, match="3 honest workers"):
        DilocoConfig(out_dir=tmp_path, workers=3, drills=True)
    DilocoConfig(out_dir=tmp_path, workers=3, cheat=None, drills=True)


def test_the_live_line_names_the_round_its_contributors_and_the_market() -> None:
    rows = [
        {"round": None, "version": 0, "eval_loss": 6.2594},
        {"round": 0, "version": 1, "closed": "deadline", "contributors": [ALICE, CAROL], "eval_loss": 5.96612,
         "inner_loss": 6.1655, "inner_loss_last": 6.0507, "seconds": {"wait": 10.2}},
    ]  # fmt: skip
    found = closed_rounds(rows)
    assert list(found) == [0] and found[0] == RoundRow(0, 1, "deadline", (ALICE, CAROL), 5.96612, 6.1655, 6.0507, 10.2)
    snapshot = Snapshot(
        version=1,
        trainer_steps=[],
        nodes=[NodeLine("dave", "0xDa7e", "0xD", "scaled", {"invalid": 1}, "slashed", 50, 0)],
        validators=[ValidatorLine("validator", "0xV", Counter({"accepted": 2, "invalid": 1}), 0)],
        pending=0,
        accepted_keys=[],
    )
    line = round_line(found[0], 12, snapshot, {ALICE: "alice", CAROL: "carol"})
    assert line.startswith("round 0 -> checkpoint 1/12: 2 contributors (alice, carol; at the deadline)")
    assert "eval loss 5.9661" in line and "inner loss 6.1655 → 6.0507" in line
    assert "verdicts 2 accepted, 1 invalid" in line and "slashed: dave" in line


def test_loss_plot_png_and_svg(tmp_path: Path) -> None:
    curves = {"market": [6.0, 5.0, 4.5], "single node": [6.0, 5.5, 5.0]}
    assert plot_losses(tmp_path, curves, "t").read_bytes()[:4] == b"\x89PNG"
    svg = ElementTree.fromstring(svg_plot(curves, "a <title> & more"))
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert [len(line.get("points", "").split()) for line in lines] == [3, 3]
