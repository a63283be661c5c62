"""Per-step metrics of the trainer: a CSV row per step and a reward/loss plot (PNG) redrawn
after every step, so a pool creator sees the curve while training runs."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def append_csv(path: Path, row: Mapping[str, Any]) -> None:
    """Append `row`, writing the header first for a new file. A file written by a trainer with other
    columns (an older release, or a step that reported a metric the others did not) is rewritten
    once with the union of the columns, old rows left blank in the new ones, so every value stays
    under its own header."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = _header(path)
    if header is not None and set(row) - set(header):
        rows = read_csv(path)
        header = [*header, *(k for k in row if k not in header)]
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=header, restval="")
            writer.writeheader()
            writer.writerows(rows)
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header or list(row), restval="")
        if header is None:
            writer.writeheader()
        writer.writerow(row)


def _header(path: Path) -> list[str] | None:
    """The column names of an existing metrics file (None when there is none or it is empty)."""
    if not path.exists():
        return None
    with path.open(newline="") as handle:
        return next(csv.reader(handle), None)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def plot(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    """Mean reward and loss per step, two panels, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    steps = [int(r["step"]) for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(steps, [float(r["mean_reward"]) for r in rows], marker="o")
    top.set_ylabel("mean task reward")
    top.set_title(title)
    top.grid(alpha=0.3)
    bottom.plot(steps, [float(r["loss"]) for r in rows], marker="o", color="tab:red")
    bottom.set_ylabel("GRPO loss")
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
