"""Per-step metrics of the trainer: a CSV row per step and a reward/loss plot (PNG) redrawn
after every step, so a pool creator sees the curve while training runs; and the figures each
published checkpoint carries in its `proofpool-metrics.json` (`checkpoint_figures`), which the
ledger serves and the explorer draws.

A step's row holds its training figures and the held-out evaluation of the version it published
(`heldout_accuracy`, `heldout_reward`, `heldout_problems`, `heldout_seconds`); the first row of a
fresh run also holds the base model's (`base_heldout_*`, version 0). So the file keeps exactly one
row per step, and `heldout_by_version` reads the held-out curve back from it.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from proofpool.trainer.heldout import HeldOutScore

from proofpool.infra.checkpoint import publishable_figures

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from proofpool.trainer.step import StepMetrics

    from proofpool.infra.checkpoint.metrics import Figure as MetricsFigure

CHECKPOINT_FIGURES: Final = (
    "mean_reward",
    "loss",
    "samples",
    "tokens",
    "groups_kept",
    "groups_dropped",
    "grad_norm",
    "clip_low_frac",
    "clip_high_frac",
    "delta_frac",
    "ratio_mean",
)
"""The step's figures its checkpoint carries: what the step measured of the rollouts and of the
update. Left out: wall-clock times (of this machine, not of the training) and flags; the held-out
evaluation, which runs after publication so that workers get the checkpoint without waiting."""


def checkpoint_figures(step: StepMetrics) -> dict[str, MetricsFigure]:
    """The figures of `step` for the checkpoint it publishes (a non-finite loss is left out)."""
    values = dataclasses.asdict(step)
    return publishable_figures({name: values[name] for name in CHECKPOINT_FIGURES})


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


def heldout_by_version(rows: Sequence[Mapping[str, Any]]) -> list[HeldOutScore]:
    """The held-out evaluations recorded in metrics rows, by checkpoint version: the base model's
    (version 0) from a fresh run's first row, then each step's published version. Rows without
    them (evaluation off, an older trainer) add nothing; a version recorded twice keeps the last."""
    found: dict[int, HeldOutScore] = {}
    for row in rows:
        base = HeldOutScore.from_columns(row, 0, "base_heldout")
        if base is not None:
            found[0] = base
        score = HeldOutScore.from_columns(row, int(row["version"]))
        if score is not None:
            found[score.version] = score
    return [found[v] for v in sorted(found)]


def figure(rows: Sequence[Mapping[str, Any]], title: str) -> Figure:
    """Two panels over the steps: the training reward (the step's rollouts, sampled) with the
    held-out greedy accuracy of each version beside it (version n is the checkpoint after step n,
    version 0 the base model), and the GRPO loss."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 6))
    top, bottom = fig.subplots(2, 1, sharex=True)
    steps = [int(r["step"]) for r in rows]
    top.plot(steps, [float(r["mean_reward"]) for r in rows], marker="o", label="training reward (rollouts)")
    held = heldout_by_version(rows)
    if held:
        top.plot(
            [s.version for s in held],
            [s.accuracy for s in held],
            marker="s",
            color="tab:green",
            label=f"held-out greedy accuracy ({held[-1].problems} problems)",
        )
        top.legend(loc="best", fontsize="small")
    top.set_ylabel("reward / accuracy")
    top.set_title(title)
    top.grid(alpha=0.3)
    bottom.plot(steps, [float(r["loss"]) for r in rows], marker="o", color="tab:red")
    bottom.set_ylabel("GRPO loss")
    bottom.set_xlabel("step (held-out: the checkpoint published after that many steps)")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> Path:
    """`figure` as a PNG at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure(rows, title).savefig(path, dpi=100)
    return path
