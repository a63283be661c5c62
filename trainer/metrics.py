"""Per-step metrics of the trainer: a CSV row per step and a reward/loss plot (PNG) redrawn
after every step, so a pool creator sees the curve while training runs."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def append_csv(path: Path, row: Mapping[str, Any]) -> None:
    """Append `row` (writing the header first for a new file)."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(row))
        if new:
            writer.writeheader()
        writer.writerow(row)


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
