"""The devnet's closing report: the ledger per provider and per validator, the reward curve, the
held-out accuracy of each checkpoint version (the trainer's `metrics.csv`), and the verdict on the
market itself (was the cheater slashed and ejected, was every honest node left alone, does the
ledger match the chain). Also written as JSON for tests and benchmarks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proofpool.devnet.progress import Snapshot
from proofpool.trainer.metrics import heldout_by_version
from rich.table import Table

from proofpool.infra.chain.units import format_pool


@dataclass(frozen=True)
class Outcome:
    """What the run proved; `problems` empty means the market did its job."""

    problems: list[str]
    ledger_matches: bool | None
    """None when the ledger was not verified."""

    @property
    def ok(self) -> bool:
        return not self.problems


def judge_market(
    snapshot: Snapshot, steps: int, ledger_problems: list[str] | None, missing_files: list[str] | None = None
) -> Outcome:
    """The checks `proofpool devnet run` exits non-zero on."""
    problems = snapshot.verdict_anomalies()
    problems += [f"rollout file lost: {key}" for key in missing_files or []]
    if snapshot.step < steps:
        problems.append(f"the trainer took {snapshot.step} of {steps} steps")
    for line in snapshot.nodes:
        if line.role == "honest":
            if line.member_state == "slashed" or line.slashed or line.invalid:
                problems.append(
                    f"honest node {line.name} was hit: {line.invalid} rejected, state {line.member_state}, "
                    f"{format_pool(line.slashed)} POOL slashed"
                )
            if line.accepted == 0:
                problems.append(f"honest node {line.name} got no work accepted")
        else:
            if line.member_state != "slashed" or not line.slashed:
                problems.append(
                    f"cheater {line.name} ({line.role}) was not slashed and ejected: state {line.member_state}, "
                    f"{line.invalid} rejected, {format_pool(line.slashed)} POOL slashed"
                )
    if ledger_problems:
        problems += [f"ledger verify: {p}" for p in ledger_problems]
    return Outcome(problems, None if ledger_problems is None else not ledger_problems)


def provider_table(snapshot: Snapshot) -> Table:
    table = Table(title="ledger per provider (pool 1)", title_justify="left")
    for column in ("provider", "node", "role", "submitted", "accepted", "invalid", "slashed stake", "rewards earned"):
        table.add_column(column, justify="left" if column in ("provider", "node", "role") else "right")
    for line in snapshot.nodes:
        table.add_row(
            line.name,
            line.node[:10] + "…",
            line.role,
            str(line.submitted),
            str(line.accepted),
            str(line.invalid),
            format_pool(line.slashed),
            format_pool(line.rewards),
        )
    return table


def validator_table(snapshot: Snapshot) -> Table:
    table = Table(title="ledger per validator", title_justify="left")
    for column in ("validator", "address", "accepted", "invalidated", "fees + slash shares"):
        table.add_column(column, justify="left" if column in ("validator", "address") else "right")
    for line in snapshot.validators:
        table.add_row(
            line.name,
            line.address[:10] + "…",
            str(line.verdicts.get("accepted", 0)),
            str(line.verdicts.get("invalid", 0)),
            format_pool(line.fees),
        )
    return table


def reward_curve(snapshot: Snapshot) -> str:
    """Mean reward per step as text (the PNG holds the plot)."""
    return " → ".join(f"{value:.3f}" for value in snapshot.rewards_by_step) or "(no step taken)"


def heldout_curve(snapshot: Snapshot) -> str:
    """Greedy accuracy on the held-out problems per checkpoint version (version 0 is the base
    model) as text; empty when the trainer recorded none (evaluation off)."""
    scores = heldout_by_version(snapshot.trainer_steps)
    if not scores:
        return ""
    versions = [s.version for s in scores]
    labelled = versions != list(range(len(scores)))  # a gap (a restarted trainer): name each version
    values = " → ".join(f"v{s.version} {s.accuracy:.3f}" if labelled else f"{s.accuracy:.3f}" for s in scores)
    return f"{values} (greedy, {scores[-1].problems} problems)"


def write_json(path: Path, snapshot: Snapshot, outcome: Outcome, extra: dict[str, Any]) -> None:
    """The report as JSON (`report.json` next to the logs)."""
    data = {
        "ok": outcome.ok,
        "problems": outcome.problems,
        "ledger_matches": outcome.ledger_matches,
        "steps": snapshot.step,
        "checkpoint_version": snapshot.version,
        "mean_reward_by_step": snapshot.rewards_by_step,
        "heldout_by_version": [
            {"version": s.version, "accuracy": s.accuracy, "reward": s.reward, "problems": s.problems}
            for s in heldout_by_version(snapshot.trainer_steps)
        ],
        "providers": [
            {
                "name": n.name,
                "node": n.node,
                "provider": n.provider,
                "role": n.role,
                "submitted": n.submitted,
                "accepted": n.accepted,
                "invalid": n.invalid,
                "member_state": n.member_state,
                "slashed": str(n.slashed),
                "rewards": str(n.rewards),
            }
            for n in snapshot.nodes
        ],
        "validators": [
            {"name": v.name, "address": v.address, "verdicts": dict(v.verdicts), "fees": str(v.fees)}
            for v in snapshot.validators
        ],
        **extra,
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
