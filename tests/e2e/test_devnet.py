"""The whole market, end to end, as `make demo` runs it, small: 5 trainer steps of two files each.

One run carries the fault drills: once verdicts flow, a validator, then the indexer,
then the backend are SIGKILLed (no cleanup runs) and started again while workers keep submitting.
Five steps, so that the three drills, each waiting for verdicts to flow again after the last, fit
in before the trainer is done (with three, the trainer sometimes finished first).
The run must still complete, and its own closing checks must pass: every submission has exactly
one verdict, every rollout file is in the store, the ledger rebuilt from chain events alone
matches PostgreSQL, the cheater is slashed and ejected and no honest node is touched.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from proofpool.devnet.progress import Snapshot
from proofpool.devnet.run import DevnetConfig, DevnetRun, run_devnet, verify_ledger_of
from proofpool.devnet.services import http_ok, wait_until
from proofpool.devnet.stack import DevnetStack
from rich.console import Console

pytestmark = pytest.mark.slow


@dataclass
class FaultDrills:
    """SIGKILL and restart one service at a time (with every process it started), the first once
    verdicts flow, each next one once the market made progress since the previous drill."""

    order: tuple[str, ...] = ("validator", "indexer", "backend")
    done: list[str] = field(default_factory=list)
    judged_at_last_drill: int = -1
    log: list[str] = field(default_factory=list)

    def __call__(self, run: DevnetRun, snapshot: Snapshot) -> None:
        if len(self.done) == len(self.order):
            return
        judged = len(snapshot.submissions)
        if judged == 0 or judged <= self.judged_at_last_drill:
            return  # wait until verdicts flowed again after the last drill
        name = self.order[len(self.done)]
        run.service(name).kill()
        time.sleep(2)
        again = run.restart(name)
        if name == "backend":
            wait_until(lambda: http_ok(run.stack.backend_url + "/healthz"), timeout=60, what="backend", service=again)
        self.done.append(name)
        self.judged_at_last_drill = judged
        self.log.append(f"killed and restarted {name} at checkpoint {snapshot.version}, {judged} judged")


@dataclass
class TrainingFigures:
    """After the run, with the stack still up: the trainer's figures of each checkpoint as the ledger
    API lists them once the indexer has read and verified them (`checkpoint_metrics`), and the
    charts the explorer's pool page draws from them. Then the usual ledger verification."""

    rows: list[dict] = field(default_factory=list)
    chart_points: dict[str, int] = field(default_factory=dict)

    def __call__(self, stack: DevnetStack) -> list[str]:
        listing = f"{stack.backend_url}/v1/ledger/checkpoint_metrics"

        def verified() -> bool:
            self.rows = httpx.get(listing, params={"limit": 100}, timeout=10).json()["items"]
            return len(self.rows) >= 5 and all(row["status"] == "verified" for row in self.rows)

        wait_until(verified, timeout=120, what="the five checkpoints' figures verified", poll=1.0)
        page = httpx.get(f"{stack.backend_url}/explorer/pools/{self.rows[0]['pool_id']}", timeout=30).text
        for chart in re.findall(r'data-chart="([a-z_]+)"', page):
            section = page.split(f'data-chart="{chart}"', 1)[1].split("</figure>", 1)[0]
            self.chart_points[chart] = len(re.findall(r"<circle [^>]*data-version=", section))
        return verify_ledger_of(stack)


@pytest.mark.timeout(1800)
def test_devnet_completes_through_fault_drills(tmp_path: Path) -> None:
    drills = FaultDrills()
    figures = TrainingFigures()
    config = DevnetConfig(
        out_dir=tmp_path / "devnet",
        steps=5,
        samples_per_step=128,
        database="proofpool_test_e2e",
        redis_db=13,
        step_timeout=600,
        verdict_timeout=400,
    )
    outcome = run_devnet(config, Console(width=140), verify=figures, during=drills)

    assert drills.done == ["validator", "indexer", "backend"], drills.log
    assert outcome.ok, outcome.problems
    assert outcome.ledger_matches is True
    report = json.loads((config.out_dir / "report.json").read_text())
    assert report["steps"] == 5 and report["checkpoint_version"] == 5
    by_role = {p["role"]: p for p in report["providers"] if p["role"] != "honest"}
    cheater = by_role["other-model"]
    assert cheater["member_state"] == "slashed" and int(cheater["slashed"]) > 0 and cheater["invalid"] >= 1
    honest = [p for p in report["providers"] if p["role"] == "honest"]
    assert len(honest) == 3
    assert all(p["invalid"] == 0 and p["accepted"] >= 1 and int(p["rewards"]) > 0 for p in honest), honest
    assert sum(sum(v["verdicts"].values()) for v in report["validators"]) == sum(
        p["submitted"] for p in report["providers"]
    )
    assert (config.out_dir / "reward.png").read_bytes()[:4] == b"\x89PNG"
    # The trainer's figures travelled with each checkpoint, were verified against the manifest hash
    # the chain holds (pruned versions too), and the pool page charts one point per version.
    assert [row["version"] for row in figures.rows] == [1, 2, 3, 4, 5]
    assert all(row["mean_reward"] is not None and row["loss"] is not None for row in figures.rows)
    assert figures.chart_points.get("mean_reward") == 5 and figures.chart_points.get("loss") == 5, figures.chart_points
