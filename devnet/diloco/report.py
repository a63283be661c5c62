"""The training pool devnet's closing report: every checkpoint audited from the chain and the store
alone (its held-out loss, its contributors, `verify-round` recomputing it bit for bit), the loss
curve against the single-node and data-parallel baselines the simulation computed on the same data
and compute, the elasticity drills, and the verdict on the market (`judge_training`: the RL
devnet's checks on slashes, payments and the ledger, plus the training pool's own).

The loss plot is a PNG when matplotlib is installed, else an SVG written here."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from proofpool.devnet.progress import Snapshot
from proofpool.devnet.report import Outcome, provider_table, validator_table
from rich.console import Console
from rich.table import Table

from proofpool.infra.http.ledger_client import LedgerClient
from proofpool.training.inner import MODEL_LOCK as INNER_MODEL_LOCK

if TYPE_CHECKING:
    import torch
    from proofpool.devnet.diloco.run import DilocoConfig
    from proofpool.devnet.stack import DevnetStack

    from proofpool.core.diloco.spec import DilocoSpec
    from proofpool.infra.storage.s3 import ObjectStore

DP_MARGIN: Final = 0.05
"""The market's final held-out loss may exceed data parallel's by this share at most (issue 22)."""
CODEC_MARGIN: Final = 0.01
"""int8 pseudo-gradients may end this share away from fp32 ones at most (the simulation)."""
MISMATCH: Final = "pseudo_gradient_mismatch"
MODEL_LOCK: Final = INNER_MODEL_LOCK
"""Held by the auditor (the main thread) and the baselines' thread around a whole audit or run, so
they take turns between runs (`proofpool.training.inner.MODEL_LOCK`, reentrant)."""


@dataclass(frozen=True)
class Baselines:
    """Held-out loss by round (index 0: the base model) of runs without the market on the shards of
    the market's `workers` honest nodes (`proofpool.devnet.diloco.simulate`): DiLoCo with int8 and
    with fp32 pseudo-gradients, one node training alone H steps a round (the DiLoCo paper's baseline:
    DiLoCo's wall-clock time), and data parallel with DiLoCo's compute (H steps a round, each
    averaging every node's batch)."""

    workers: int
    rounds: int
    diloco_int8: list[float]
    diloco_fp32: list[float]
    single_node: list[float]
    data_parallel: list[float]
    seconds: float


@dataclass(frozen=True)
class VersionAudit:
    """Checkpoint `version` as an auditor finds it: fetched through the chain's manifest hash."""

    version: int
    eval_loss: float
    """Mean token loss on the dataset's held-out rows."""
    contributors: tuple[str, ...]
    """Nodes whose files its round record lists (none for version 0)."""
    published_at: int | None
    """Block time of its CheckpointPublished (None for version 0)."""
    verified: bool | None
    """`verify-round` recomputed it bit for bit (None for version 0)."""
    verify_line: str = ""


@dataclass(frozen=True)
class DrillResult:
    """An elasticity drill and whether the market came through it."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class CheaterRecord:
    """The cheater's node in the ledger: its submissions' blocks and its verdicts in chain order."""

    submitted_blocks: list[int]
    verdicts: list[tuple[str, str | None, int]]
    """(verdict, reason code or None, block) of each verdict on its submissions."""

    def problems(self) -> list[str]:
        """Slashed at its first verdict: that verdict is `invalid` for a pseudo-gradient mismatch,
        and nothing it submitted came after it (it was ejected then)."""
        if not self.verdicts:
            return ["the cheater's work got no verdict"]
        verdict, reason, block = self.verdicts[0]
        if (verdict, reason) != ("invalid", MISMATCH):
            return [f"the cheater's first verdict was {verdict} ({reason}), not invalid ({MISMATCH})"]
        later = [b for b in self.submitted_blocks if b > block]
        if later:
            return [f"the cheater submitted {len(later)} file(s) after its first verdict: it was not ejected"]
        return []


class Auditor:
    """Checkpoints of the devnet pool as an auditor finds them: each fetched through the manifest
    hash the chain recorded, scored on the held-out rows and (from version 1) recomputed with
    `verify_round`. The run audits each version as soon as it is published (`step`, between two
    looks at the market), so the closing report only waits for the last ones (`upto`)."""

    def __init__(
        self, stack: DevnetStack, store: ObjectStore, spec: DilocoSpec, tokens: torch.Tensor, cache_dir: Path
    ) -> None:
        self.stack, self.store, self.spec, self.tokens, self.cache_dir = stack, store, spec, tokens, cache_dir
        self.done: dict[int, VersionAudit] = {}

    def step(self, latest: int) -> None:
        """Audit the oldest published version not audited yet, if any and if the baselines' thread
        is between two runs (one version: the caller's loop goes on)."""
        missing = next((v for v in range(latest + 1) if v not in self.done), None)
        if missing is None or not MODEL_LOCK.acquire(blocking=False):
            return
        try:
            self.done[missing] = self.audit(missing)
        finally:
            MODEL_LOCK.release()

    def upto(self, latest: int) -> list[VersionAudit]:
        """Versions 0..`latest`, audited, with the block time of each publication."""
        for version in range(latest + 1):
            if version not in self.done:
                with MODEL_LOCK:
                    self.done[version] = self.audit(version)
        published = published_times(self.stack)
        return [replace(self.done[v], published_at=published.get(v)) for v in range(latest + 1)]

    def audit(self, version: int) -> VersionAudit:
        from proofpool.training.inner import eval_loss
        from proofpool.training.rounds import read_round_record, round_checkpoint
        from proofpool.training.verify_round import RoundRefuted, verify_round

        client, pool = self.stack.admin, self.stack.pool_id
        model_dir = round_checkpoint(client, self.store, self.spec, pool, version, self.cache_dir)
        record = read_round_record(model_dir) if version else None
        verified, line = None, ""
        if version:
            try:
                check = verify_round(client, self.store, pool, version, self.cache_dir)
                verified, line = check.ok, check.line()
            except RoundRefuted as exc:
                verified, line = False, f"REFUTED: checkpoint {version}: {exc}"
        return VersionAudit(
            version=version,
            eval_loss=eval_loss(model_dir, self.tokens, self.spec.eval_rows),
            contributors=tuple(record.contributors) if record else (),
            published_at=None,
            verified=verified,
            verify_line=line,
        )


def published_times(stack: DevnetStack) -> dict[int, int]:
    """Block time of each checkpoint's publication, by version (the ledger's checkpoints, the chain's clock)."""
    with LedgerClient(stack.backend_url) as ledger:
        rows = ledger.items("checkpoints", {"pool_id": stack.pool_id})
    w3 = stack.admin.w3
    return {int(row["version"]): int(w3.eth.get_block(int(row["block_number"]))["timestamp"]) for row in rows}


def cheater_record(stack: DevnetStack, node: str) -> CheaterRecord:
    """What the ledger holds on the cheater's node."""
    with LedgerClient(stack.backend_url) as ledger:
        submissions = ledger.items("submissions", {"pool_id": stack.pool_id, "node": node})
        verdicts = ledger.items("verdicts", {"pool_id": stack.pool_id})
    keys = {row["work_key"] for row in submissions}
    return CheaterRecord(
        [int(row["block_number"]) for row in submissions],
        [(row["verdict"], row.get("reason"), int(row["block_number"])) for row in verdicts if row["work_key"] in keys],
    )


def judge_training(
    market: Outcome,
    rounds: int,
    audits: Sequence[VersionAudit],
    baselines: Baselines | None,
    cheater: CheaterRecord | None,
    drills: Sequence[DrillResult],
) -> Outcome:
    """The RL devnet's checks (`judge_market`: slashes, payments, the ledger) plus the training
    pool's: N checkpoints, each recomputed bit for bit; the cheater invalidated for a pseudo-gradient
    mismatch at its first verdict; the final held-out loss at or below the single-node baseline and
    within `DP_MARGIN` of data parallel; int8 within `CODEC_MARGIN` of fp32; every drill passed."""
    problems = list(market.problems)
    latest = audits[-1].version if audits else 0
    if latest < rounds:
        problems.append(f"the aggregator published {latest} of {rounds} checkpoints")
    problems += [f"verify-round: {a.verify_line}" for a in audits if a.verified is False]
    if cheater is not None:
        problems += cheater.problems()
    if baselines is not None and audits:
        final = audits[-1].eval_loss
        single, dp = baselines.single_node[-1], baselines.data_parallel[-1]
        if final > single:
            problems.append(f"final eval loss {final:.4f} is above the single-node baseline {single:.4f}")
        if final > dp * (1 + DP_MARGIN):
            problems.append(f"final eval loss {final:.4f} is more than {DP_MARGIN:.0%} above data parallel {dp:.4f}")
        int8, fp32 = baselines.diloco_int8[-1], baselines.diloco_fp32[-1]
        if abs(int8 - fp32) > CODEC_MARGIN * fp32:
            problems.append(f"simulated int8 DiLoCo {int8:.4f} is more than {CODEC_MARGIN:.0%} from fp32 {fp32:.4f}")
    problems += [f"drill {d.name}: {d.detail}" for d in drills if not d.ok]
    return Outcome(problems, market.ledger_matches)


def curves_of(audits: Sequence[VersionAudit], baselines: Baselines | None) -> dict[str, list[float]]:
    """The plotted curves by label: held-out loss by round (index 0: the base model)."""
    curves = {"market (DiLoCo int8, verified)": [a.eval_loss for a in audits]}
    if baselines is not None:
        curves |= {
            f"simulated DiLoCo int8, {baselines.workers} nodes": baselines.diloco_int8,
            f"simulated DiLoCo fp32, {baselines.workers} nodes": baselines.diloco_fp32,
            "single node, H steps a round (same time)": baselines.single_node,
            "data parallel (same compute)": baselines.data_parallel,
        }
    return curves


def plot_losses(out_dir: Path, curves: Mapping[str, Sequence[float]], title: str) -> Path:
    """`loss.png` (matplotlib) or, without matplotlib, `loss.svg`: held-out loss by round."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        path = out_dir / "loss.svg"
        path.write_text(svg_plot(curves, title))
        return path
    fig = Figure(figsize=(7, 4.5))
    axes = fig.subplots()
    for label, values in curves.items():
        axes.plot(range(len(values)), values, marker="o" if label.startswith("market") else None, label=label)
    axes.set_xlabel("round (checkpoint version)")
    axes.set_ylabel("held-out loss (mean token cross-entropy)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    fig.tight_layout()
    path = out_dir / "loss.png"
    fig.savefig(path, dpi=110)
    return path


COLORS: Final = ("#d62728", "#1f77b4", "#17becf", "#7f7f7f", "#2ca02c", "#9467bd")


def svg_plot(curves: Mapping[str, Sequence[float]], title: str, width: int = 720, height: int = 440) -> str:
    """A line plot of `curves` (y by round) as a standalone SVG document."""
    left, right, top, bottom = 70, 20, 40, 120
    values = [v for ys in curves.values() for v in ys]
    longest = max((len(ys) for ys in curves.values()), default=1)
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    span = (high - low) or 1.0
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(i: int) -> float:
        return left + plot_w * i / max(1, longest - 1)

    def y(v: float) -> float:
        return top + plot_h * (high - v) / span

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for k in range(5):
        v = low + span * k / 4
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3f}</text>')
    for i in range(longest):
        parts.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{i}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h + 34}" text-anchor="middle">round</text>')
    for n, (label, ys) in enumerate(curves.items()):
        color = COLORS[n % len(COLORS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(ys))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>')
        ly = top + plot_h + 52 + 14 * n
        parts.append(
            f'<line x1="{left}" y1="{ly - 4}" x2="{left + 20}" y2="{ly - 4}" stroke="{color}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{left + 26}" y="{ly}">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def training_json(
    audits: Sequence[VersionAudit],
    baselines: Baselines | None,
    drills: Sequence[DrillResult],
    cheater: CheaterRecord | None,
    names: Mapping[str, str],
    plot: Path | None,
) -> dict[str, Any]:
    """The training pool's part of report.json (the ledger's part is `proofpool.devnet.report.write_json`)."""
    final = audits[-1].eval_loss if audits else None
    return {
        "kind": "diloco",
        "rounds": audits[-1].version if audits else 0,
        "final_eval_loss": final,
        "versions": [asdict(a) | {"contributors": [names.get(node, node) for node in a.contributors]} for a in audits],
        "baselines": asdict(baselines) if baselines is not None else None,
        "cheater": asdict(cheater) if cheater is not None else None,
        "drills": [asdict(d) for d in drills],
        "plot": str(plot) if plot is not None else None,
    }


def print_report(
    console: Console,
    config: DilocoConfig,
    snapshot: Snapshot,
    outcome: Outcome,
    audits: list[VersionAudit],
    baselines: Baselines | None,
    drills: list[DrillResult],
    plot: Path,
) -> None:
    """The closing report on the console: losses by round, the ledger per provider and validator,
    verify-round, the drills, and the verdict (the problems, if any)."""
    console.print()
    console.print(loss_table(audits, baselines))
    console.print(f"loss plot: {plot}")
    console.print(provider_table(snapshot))
    console.print(validator_table(snapshot))
    verified = sum(1 for a in audits if a.verified)
    console.print(f"verify-round: {verified} of {len(audits) - 1} checkpoints recomputed bit for bit")
    for drill in drills:
        mark = "[green]ok[/green]" if drill.ok else "[red]failed[/red]"
        console.print(f"drill {drill.name}: {mark}: {drill.detail}")
    if outcome.ledger_matches is not None:
        console.print(
            "ledger verify: [green]the database matches the chain[/green]"
            if outcome.ledger_matches
            else "ledger verify: [red]the database differs from the chain[/red]"
        )
    if outcome.ok:
        said = ["the cheater was slashed and ejected at its first verdict"] if config.cheat else []
        said += ["every honest node was paid", "every checkpoint recomputes bit for bit"]
        said += ["the loss is as good as the baselines"] if baselines is not None else []
        said += ["every drill passed"] if drills else []
        console.print(f"[green]devnet ok[/green]: {', '.join(said)}")
    else:
        for problem in outcome.problems:
            console.print(f"[red]problem[/red]: {problem}")
    console.print(f"logs in {config.out_dir / 'stack'}, report in {config.out_dir / 'report.json'}")


def loss_table(audits: list[VersionAudit], baselines: Baselines | None) -> Table:
    """Held-out loss by round: the market's checkpoints beside the simulation's baselines."""
    table = Table(title="held-out loss by round", title_justify="left")
    columns = ["round", "market", "contributors", "verified"]
    if baselines is not None:
        columns += ["sim int8", "sim fp32", "single node", "data parallel"]
    for column in columns:
        table.add_column(column, justify="right")
    for audit in audits:
        v = audit.version
        row = [
            str(v),
            f"{audit.eval_loss:.4f}",
            str(len(audit.contributors)) if v else "-",
            "-" if audit.verified is None else ("yes" if audit.verified else "NO"),
        ]
        if baselines is not None:
            row += [_at(baselines.diloco_int8, v), _at(baselines.diloco_fp32, v)]
            row += [_at(baselines.single_node, v), _at(baselines.data_parallel, v)]
        table.add_row(*row)
    return table


def _at(values: list[float], index: int) -> str:
    return f"{values[index]:.4f}" if index < len(values) else "-"
