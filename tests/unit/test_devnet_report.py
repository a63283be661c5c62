"""The devnet report (`proofpool.devnet.report`) shows held-out accuracy by checkpoint version from
the trainer's metrics rows, beside the training reward, in its text and in report.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from proofpool.devnet.progress import Snapshot
from proofpool.devnet.report import Outcome, heldout_curve, reward_curve, write_json
from proofpool.devnet.run import DevnetConfig
from proofpool.trainer.heldout import HeldOutScore


def _snapshot(rows: list[dict[str, str]]) -> Snapshot:
    return Snapshot(version=len(rows), trainer_steps=rows, nodes=[], validators=[], pending=0, accepted_keys=[])


def _row(step: int, reward: float, *scores: tuple[str, HeldOutScore]) -> dict[str, str]:
    row = {"step": str(step), "version": str(step), "mean_reward": str(reward), "loss": "0.1"}
    for prefix, score in scores:
        row.update({k: str(v) for k, v in score.columns(prefix).items()})
    return row


def _score(version: int, accuracy: float) -> HeldOutScore:
    return HeldOutScore(version, 64, accuracy, accuracy, 0.2)


def test_held_out_accuracy_by_version_in_text_and_json(tmp_path: Path) -> None:
    rows = [
        _row(1, 0.164, ("heldout", _score(1, 0.3125)), ("base_heldout", _score(0, 0.265625))),
        _row(2, 0.188, ("heldout", _score(2, 0.40625))),
    ]
    snapshot = _snapshot(rows)
    assert snapshot.step == 2  # one metrics row per step: the base model's figures ride on step 1's
    assert reward_curve(snapshot) == "0.164 → 0.188"
    assert heldout_curve(snapshot) == "0.266 → 0.312 → 0.406 (greedy, 64 problems)"
    write_json(tmp_path / "report.json", snapshot, Outcome([], True), {})
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["heldout_by_version"] == [
        {"version": 0, "accuracy": 0.265625, "reward": 0.265625, "problems": 64},
        {"version": 1, "accuracy": 0.3125, "reward": 0.3125, "problems": 64},
        {"version": 2, "accuracy": 0.40625, "reward": 0.40625, "problems": 64},
    ]


def test_a_gap_in_the_versions_names_each_one() -> None:
    """A restarted trainer evaluates no base model: versions 3 and 4 only."""
    rows = [_row(3, 0.2, ("heldout", _score(3, 0.5))), _row(4, 0.2, ("heldout", _score(4, 0.5625)))]
    assert heldout_curve(_snapshot(rows)) == "v3 0.500 → v4 0.562 (greedy, 64 problems)"


def test_without_an_evaluation_the_report_has_no_held_out_line(tmp_path: Path) -> None:
    snapshot = _snapshot([_row(1, 0.2)])
    assert heldout_curve(snapshot) == ""
    write_json(tmp_path / "report.json", snapshot, Outcome([], True), {})
    assert json.loads((tmp_path / "report.json").read_text())["heldout_by_version"] == []


def test_devnet_config_bounds_its_workers_and_validators(tmp_path: Path) -> None:
    assert DevnetConfig(tmp_path, workers=2, validators=1).workers == 2
    assert DevnetConfig(tmp_path, cheat=None, workers=1).workers == 1
    for kwargs in ({"workers": 1}, {"workers": 5}, {"validators": 0}, {"validators": 3}):
        with pytest.raises(ValueError, match=r"workers|validators|cheater"):
            DevnetConfig(tmp_path, **kwargs)
