"""The DiLoCo aggregator's pure parts: the round-closing rule, one file per node from the ledger's
rows, and the rounds.jsonl lines the devnet's live view and the bench read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import typer
from eth_utils import to_checksum_address
from proofpool.cli import trainer as trainer_cli
from proofpool.trainer.aggregate import ROUNDS_FILE, RoundResult, _OpenRound, append_round, read_rounds
from proofpool.trainer.rounds_view import Candidate, Decision, first_per_node, round_decision

from proofpool.core.diloco.spec import RoundSpec
from proofpool.core.errors import ProofpoolError
from proofpool.training.verify_round import tensor_diffs

RULES = RoundSpec(deadline_seconds=60, min_contributors=2)
OPENED = 1_000.0
DILOCO_URI = "diloco://" + "ab" * 32
A, B, C = "0x" + "aa" * 20, "0x" + "bb" * 20, "0x" + "cc" * 20


@pytest.mark.parametrize(
    ("members", "contributors", "now", "expected"),
    [
        # every active member has a file: close at once, before the deadline, whatever the minimum
        ({A, B, C}, {A, B, C}, OPENED + 1, Decision(True, "all_members")),
        ({A}, {A}, OPENED, Decision(True, "all_members")),
        # addresses compare case-insensitively (the ledger checksums, a file may not)
        ({A.upper().replace("0X", "0x")}, {A}, OPENED, Decision(True, "all_members")),
        # a file of a node that left meanwhile does not stop the others from closing it
        ({A, B}, {A, B, C}, OPENED, Decision(True, "all_members")),
        # some members still training: wait for the deadline ...
        ({A, B, C}, {A, B}, OPENED + 59.9, Decision(False, "waiting")),
        # ... which closes it with at least min_contributors files (the deadline itself included)
        ({A, B, C}, {A, B}, OPENED + 60, Decision(True, "deadline")),
        ({A, B, C}, {A, B}, OPENED + 3_600, Decision(True, "deadline")),
        # past the deadline with too few files: keep waiting
        ({A, B, C}, {A}, OPENED + 3_600, Decision(False, "too_few")),
        # no file at all never closes a round, even one whose members all left
        ({A, B}, set(), OPENED + 3_600, Decision(False, "no_files")),
        (set(), set(), OPENED + 3_600, Decision(False, "no_files")),
        # no active member: "everyone contributed" is not taken as true, the deadline rules
        (set(), {A, B}, OPENED + 1, Decision(False, "waiting")),
        (set(), {A, B}, OPENED + 60, Decision(True, "deadline")),
    ],
)
def test_round_decision(members: set[str], contributors: set[str], now: float, expected: Decision) -> None:
    assert round_decision(members, contributors, OPENED, now, RULES) == expected


def test_min_contributors_of_one_closes_at_the_deadline_with_one_file() -> None:
    rules = RoundSpec(deadline_seconds=1, min_contributors=1)
    assert round_decision({A, B}, {B}, OPENED, OPENED + 0.5, rules) == Decision(False, "waiting")
    assert round_decision({A, B}, {B}, OPENED, OPENED + 1, rules) == Decision(True, "deadline")


def _row(key: int, node: str, block: int, log_index: int = 0) -> dict:
    return {"work_key": "0x" + f"{key:02x}" * 32, "node": node, "block_number": block, "log_index": log_index}


def test_first_per_node_keeps_each_nodes_first_file_sorted_by_work_key() -> None:
    rows = [
        _row(0x30, A, block=9),
        _row(0x10, A, block=7, log_index=3),  # A's first: an earlier block
        _row(0x20, B, block=8, log_index=2),
        _row(0x05, B, block=8, log_index=1),  # B's first: same block, earlier log
        _row(0x40, C.upper().replace("0X", "0x"), block=1),
    ]
    picked = first_per_node(rows)
    assert [c.work_key for c in picked] == ["05" * 32, "10" * 32, "40" * 32]  # sorted, no 0x
    assert {c.node for c in picked} == {to_checksum_address(n) for n in (A, B, C)}  # checksummed, one each
    assert picked[0] == Candidate("05" * 32, to_checksum_address(B), (8, 1))
    assert first_per_node([]) == ()


def test_an_open_round_averages_one_file_per_node_its_first_submitted() -> None:
    """Files fetched over several looks: a node's earlier file listed late still wins."""
    current = _OpenRound(round=0, opened_at=0, previous_dir=Path("."), previous_manifest="00" * 32, shapes={})
    later, earlier, other = (
        Candidate("01" * 32, A, (9, 0)),
        Candidate("02" * 32, A, (5, 3)),
        Candidate("03" * 32, B, (9, 1)),
    )
    for candidate in (later, other, earlier):
        current.usable[candidate.work_key] = (candidate, candidate.work_key)  # type: ignore[assignment]
    assert {node: c for node, (c, _) in current.chosen().items()} == {A: earlier, B: other}


def _result(**changes: object) -> RoundResult:
    fields = {
        "round": 2,
        "version": 3,
        "closed": "deadline",
        "included": ("ab" * 32, "cd" * 32),
        "contributors": (A, B),
        "delta_norm": 0.25,
        "eval_loss": 3.5,
        "inner_loss": 4.0,
        "inner_loss_last": 3.75,
        "manifest_sha256": "ef" * 32,
        "tx_hash": "0x" + "12" * 32,
        "seconds": {"wait": 61.04, "fetch": 0.2, "aggregate": 0.1, "publish": 0.5, "eval": 0.05},
    }
    return RoundResult(**{**fields, **changes})  # type: ignore[arg-type]


def test_round_result_line_and_json() -> None:
    result = _result()
    line = result.line()
    assert line.startswith("round 2: 2 contributors (deadline), delta norm 0.25")
    assert "eval loss 3.5000 -> checkpoint 3" in line and "wait 61.0" in line
    row = result.to_json()
    assert row["round"] == 2 and row["version"] == 3 and row["included"] == ["ab" * 32, "cd" * 32]
    assert row["seconds"]["wait"] == 61.04 and row["inner_loss"] == 4.0
    json.dumps(row)  # a JSON line as it is
    assert "eval loss n/a" in _result(eval_loss=None).line()


def test_rounds_file_appends_lines_and_skips_a_torn_last_one(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert read_rounds(state) == []
    append_round(state, {"round": None, "version": 0, "eval_loss": 5.0})
    append_round(state, _result().to_json())
    with (state / ROUNDS_FILE).open("a") as handle:
        handle.write('{"round": 3, "vers')  # killed mid-write
    rows = read_rounds(state)
    assert [row["version"] for row in rows] == [0, 3]


@pytest.mark.parametrize(
    ("args", "model_uri", "refused"),
    [
        (["--rounds", "2"], DILOCO_URI, None),
        (["--shard-mb", "1", "--state-dir", "x"], DILOCO_URI, None),
        (["--steps", "3", "--lr", "0.1"], DILOCO_URI, "--steps, --lr: not an option for pool 1, a training pool"),
        (["--steps", "3"], "devnet://arithmetic", None),
        (["--rounds", "2"], "devnet://arithmetic", "--rounds: not an option for pool 1, an RL pool"),
        (["--poll-interval", "0.5"], "devnet://arithmetic", "--poll-interval: not an option for pool 1, an RL pool"),
    ],
)
def test_trainer_run_refuses_options_of_the_other_kind_of_pool(
    args: list[str], model_uri: str, refused: str | None
) -> None:
    command = typer.main.get_command(trainer_cli.app)
    ctx = command.make_context("run", ["--pool", "1", *args])
    if refused is None:
        assert trainer_cli._check_options(ctx, 1, model_uri) is (model_uri == DILOCO_URI)
    else:
        with pytest.raises(ProofpoolError, match=refused):
            trainer_cli._check_options(ctx, 1, model_uri)


def test_tensor_diffs_names_every_tensor_not_bitwise_equal() -> None:
    base = {"a": torch.zeros(3), "b": torch.ones(2, 2), "c": torch.ones(2)}
    assert tensor_diffs("weights", base, {k: v.clone() for k, v in base.items()}) == []
    other = {"a": torch.tensor([0.0, 1e-7, -0.5]), "b": torch.ones(4), "d": torch.ones(1)}
    diffs = {d.name: d.max_abs_diff for d in tensor_diffs("momentum", base, other)}
    assert diffs == {"a": 0.5, "b": float("inf"), "c": float("inf"), "d": float("inf")}
