"""What the devnet shows while it runs, read the way an auditor would: the public ledger API for
submissions, verdicts, slashes and rewards, the chain for the checkpoint version, and the
trainer's metrics CSV for the reward curve."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proofpool.trainer.metrics import read_csv
from rich.table import Table

from proofpool.infra.chain.units import format_pool
from proofpool.infra.http.ledger_client import LedgerClient

if TYPE_CHECKING:
    from proofpool.devnet.run import DevnetRun
    from proofpool.devnet.stack import DevnetStack


@dataclass(frozen=True)
class NodeLine:
    """One provider's node as the ledger sees it."""

    name: str
    node: str
    provider: str
    role: str
    """"honest" or the cheat mode."""
    counts: dict[str, int]
    """Submissions (a bundle counts once) by status (pending, accepted, rejected, invalid, finalized,
    forfeited, expired)."""
    member_state: str
    slashed: int
    """Base units of the provider's stake slashed in this pool."""
    rewards: int
    """Base units credited to the provider for its work (finalized)."""

    @property
    def submitted(self) -> int:
        return sum(self.counts.values())

    @property
    def accepted(self) -> int:
        return self.counts.get("accepted", 0) + self.counts.get("finalized", 0)

    @property
    def invalid(self) -> int:
        return self.counts.get("invalid", 0)


@dataclass(frozen=True)
class ValidatorLine:
    name: str
    address: str
    verdicts: Counter[str]
    fees: int
    """Base units: fees for finalized verdicts plus shares of slashes."""


@dataclass(frozen=True)
class Snapshot:
    """The market at one moment."""

    version: int
    """Latest checkpoint on-chain."""
    trainer_steps: list[dict[str, str]]
    nodes: list[NodeLine]
    validators: list[ValidatorLine]
    pending: int
    accepted_keys: list[bytes] = field(repr=False)
    """Accepted (not yet finalized) work keys."""
    submissions: list[tuple[str, str]] = field(default_factory=list, repr=False)
    """(node, work key hex) of every judged submission (a bundle's key for a bundle)."""
    files: list[tuple[str, str]] = field(default_factory=list, repr=False)
    """(node, file key hex) of every file of the judged submissions: a bundle's files one by one,
    a single file's key as itself (the keys its file is stored under)."""
    verdicts_per_key: Counter[str] = field(default_factory=Counter, repr=False)
    """Verdict events per work key (0x hex): exactly one for every judged submission."""

    def verdict_anomalies(self) -> list[str]:
        """Judged submissions without exactly one verdict, and verdicts for unknown keys."""
        keys = {key for _, key in self.submissions}
        problems = [
            f"submission {key} has {self.verdicts_per_key[key]} verdicts"
            for _, key in self.submissions
            if self.verdicts_per_key[key] != 1
        ]
        problems += [f"verdict for unknown submission {key}" for key in self.verdicts_per_key if key not in keys]
        return problems

    @property
    def step(self) -> int:
        return len(self.trainer_steps)

    @property
    def rewards_by_step(self) -> list[float]:
        return [float(row["mean_reward"]) for row in self.trainer_steps if row.get("mean_reward")]


def read_snapshot(stack: DevnetStack, run: DevnetRun) -> Snapshot:
    """Ask the ledger API, the chain and the trainer's CSV."""
    pool = stack.pool_id
    with LedgerClient(stack.backend_url) as ledger:
        submissions = ledger.items("submissions", {"pool_id": pool})
        members = {m["node"]: m for m in ledger.items("memberships", {"pool_id": pool})}
        slashes = ledger.items("slashes", {"pool_id": pool})
        rewards = ledger.items("rewards", {"pool_id": pool})
        verdicts = ledger.items("verdicts", {"pool_id": pool})
    by_node: dict[str, Counter[str]] = {}
    for row in submissions:  # on-chain submissions: a bundle is one, with one verdict
        by_node.setdefault(row["node"], Counter())[row["status"]] += 1
    nodes = []
    for name, provider, node in stack.cast.providers():
        if name not in run.workers:
            continue
        member = members.get(node.address, {})
        nodes.append(
            NodeLine(
                name=name,
                node=node.address,
                provider=provider.address,
                role=run.config.cheat if name == run.cheater and run.config.cheat else "honest",
                counts=dict(by_node.get(node.address, Counter())),
                member_state=member.get("state") or "-",
                slashed=sum(int(s["amount"]) for s in slashes if s["provider"] == provider.address),
                rewards=_credited(rewards, provider.address, "provider_reward"),
            )
        )
    validators = [
        ValidatorLine(
            name=name,
            address=account.address,
            verdicts=Counter(v["verdict"] for v in verdicts if v["validator"] == account.address),
            fees=_credited(rewards, account.address, "validator_fee")
            + _credited(rewards, account.address, "slash_share"),
        )
        for name, account in stack.cast.validators()
        if name in run.validators
    ]
    metrics = run.config.out_dir / "metrics.csv"
    return Snapshot(
        version=stack.admin.pool.latest_checkpoint(pool).version,
        trainer_steps=read_csv(metrics) if metrics.exists() else [],
        nodes=nodes,
        validators=validators,
        pending=sum(1 for row in submissions if row["status"] == "pending"),
        accepted_keys=[bytes.fromhex(row["work_key"][2:]) for row in submissions if row["status"] == "accepted"],
        submissions=[(row["node"], row["work_key"]) for row in submissions if row["status"] != "pending"],
        files=[
            (row["node"], key)
            for row in submissions
            if row["status"] != "pending"
            for key in ([f["work_key"] for f in row["files"]] if row.get("files") else [row["work_key"]])
        ],
        verdicts_per_key=Counter(v["work_key"] for v in verdicts),
    )


def _credited(rewards: list[dict[str, Any]], account: str, kind: str) -> int:
    return sum(int(r["amount"]) for r in rewards if r["account"] == account and r["kind"] == kind)


def live_table(snapshot: Snapshot, steps: int) -> Table:
    """The live view: step, mean reward, checkpoint, and per node submissions and standing."""
    rewards = snapshot.rewards_by_step
    reward = f"{rewards[-1]:.3f}" if rewards else "-"
    title = (
        f"step {snapshot.step}/{steps} · mean reward {reward} · checkpoint v{snapshot.version} · "
        f"{snapshot.pending} awaiting a verdict"
    )
    table = Table(title=title, title_justify="left")
    for column in ("node", "role", "submitted", "accepted", "rejected", "pending", "member", "slashed"):
        table.add_column(column, justify="left" if column in ("node", "role", "member") else "right")
    for line in snapshot.nodes:
        style = "red" if line.member_state == "slashed" else None
        table.add_row(
            line.name,
            line.role,
            str(line.submitted),
            str(line.accepted),
            str(line.invalid),
            str(line.counts.get("pending", 0)),
            line.member_state,
            format_pool(line.slashed) if line.slashed else "-",
            style=style,
        )
    return table


def status_line(snapshot: Snapshot, steps: int) -> str:
    """The live view as one line, for logs and terminals without live redraw."""
    rewards = snapshot.rewards_by_step
    nodes = " ".join(
        f"{n.name}={n.accepted}/{n.submitted}{'(slashed)' if n.member_state == 'slashed' else ''}"
        for n in snapshot.nodes
    )
    reward = f"{rewards[-1]:.3f}" if rewards else "-"
    return (
        f"step {snapshot.step}/{steps} reward {reward} v{snapshot.version} pending {snapshot.pending} | "
        f"accepted/submitted {nodes}"
    )
