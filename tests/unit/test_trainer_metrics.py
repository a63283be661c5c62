"""The trainer's metrics.csv keeps every value under its own column across trainer releases."""

from __future__ import annotations

from pathlib import Path

from proofpool.trainer.metrics import append_csv, read_csv


def test_new_file_gets_header_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "out" / "metrics.csv"
    append_csv(path, {"step": 1, "loss": 0.5})
    append_csv(path, {"step": 2, "loss": 0.25})
    assert read_csv(path) == [{"step": "1", "loss": "0.5"}, {"step": "2", "loss": "0.25"}]


def test_a_new_column_rewrites_the_header_once(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    append_csv(path, {"step": 1, "loss": 0.5, "wait_seconds": 3.0})
    append_csv(path, {"step": 2, "loss": 0.25, "skipped_nonfinite": True, "wait_seconds": 1.0})
    append_csv(path, {"step": 3, "loss": 0.125, "skipped_nonfinite": False, "wait_seconds": 2.0})
    rows = read_csv(path)
    assert path.read_text().splitlines()[0] == "step,loss,wait_seconds,skipped_nonfinite"
    assert rows[0] == {"step": "1", "loss": "0.5", "wait_seconds": "3.0", "skipped_nonfinite": ""}
    assert rows[1]["skipped_nonfinite"] == "True" and rows[1]["wait_seconds"] == "1.0"
    assert rows[2] == {"step": "3", "loss": "0.125", "wait_seconds": "2.0", "skipped_nonfinite": "False"}


def test_a_missing_column_is_left_blank(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    append_csv(path, {"step": 1, "loss": 0.5})
    append_csv(path, {"step": 2})
    assert read_csv(path)[1] == {"step": "2", "loss": ""}
