"""The training pool market end to end (issue 22), as `proofpool devnet run --kind diloco --drills`
runs it: 12 DiLoCo rounds of three honest workers and a cheater uploading x10 pseudo-gradients,
with the elasticity drills (a worker SIGKILLed and back two rounds later, the aggregator SIGKILLed
and restarted).

The run's own closing checks must pass, and this test reads them back from report.json: the
cheater slashed and ejected at its first verdict (a pseudo-gradient mismatch), the honest nodes
paid and never slashed, the ledger rebuilt from chain events alone matching PostgreSQL, every
checkpoint recomputed bit for bit from the chain and the store (`verify-round`), the final held-out
loss at or below the single-node baseline and within 5% of data parallel, int8 within 1% of fp32
(both simulated in the same run on the same shards), and every drill passed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from proofpool.devnet.diloco.report import CODEC_MARGIN, DP_MARGIN, MISMATCH
from proofpool.devnet.diloco.run import DilocoConfig, run_diloco_devnet
from proofpool.devnet.run import verify_ledger_of
from rich.console import Console

pytestmark = pytest.mark.slow

ROUNDS = 12


@pytest.mark.timeout(900)
def test_training_pool_devnet_with_cheater_and_elasticity_drills(tmp_path: Path) -> None:
    config = DilocoConfig(
        out_dir=tmp_path / "devnet",
        rounds=ROUNDS,
        database="proofpool_test_e2e_diloco",
        redis_db=9,
        deadline_seconds=10,
        drills=True,
        round_timeout=240,
        verdict_timeout=240,
    )
    outcome = run_diloco_devnet(config, Console(width=140), verify=verify_ledger_of)

    assert outcome.ok, outcome.problems
    assert outcome.ledger_matches is True
    report = json.loads((config.out_dir / "report.json").read_text())
    assert report["kind"] == "diloco" and report["rounds"] == ROUNDS and report["checkpoint_version"] == ROUNDS
    versions = report["versions"]
    assert [v["version"] for v in versions] == list(range(ROUNDS + 1))
    assert all(v["verified"] for v in versions[1:]), [v["verify_line"] for v in versions]

    cheater = next(p for p in report["providers"] if p["role"] != "honest")
    assert cheater["role"] == "scaled" and cheater["member_state"] == "slashed"
    assert int(cheater["slashed"]) > 0 and cheater["accepted"] == 0 and int(cheater["rewards"]) == 0
    first_verdict, reason, block = report["cheater"]["verdicts"][0]
    assert (first_verdict, reason) == ("invalid", MISMATCH)
    assert all(b <= block for b in report["cheater"]["submitted_blocks"]), "the cheater submitted after its verdict"
    assert all("dave" not in v["contributors"] for v in versions)

    honest = [p for p in report["providers"] if p["role"] == "honest"]
    assert len(honest) == 3
    assert all(p["invalid"] == 0 and int(p["slashed"]) == 0 and p["member_state"] == "active" for p in honest), honest
    assert all(p["accepted"] >= 1 and int(p["rewards"]) > 0 for p in honest), honest

    final, baselines = report["final_eval_loss"], report["baselines"]
    assert final < versions[0]["eval_loss"]
    assert final <= baselines["single_node"][-1], (final, baselines["single_node"][-1])
    assert final <= baselines["data_parallel"][-1] * (1 + DP_MARGIN), (final, baselines["data_parallel"][-1])
    int8, fp32 = baselines["diloco_int8"][-1], baselines["diloco_fp32"][-1]
    assert abs(int8 - fp32) <= CODEC_MARGIN * fp32, (int8, fp32)

    drills = {d["name"]: d for d in report["drills"]}
    names = {"worker killed mid-round", "worker joins two rounds later", "aggregator killed and restarted"}
    assert set(drills) == names
    assert all(d["ok"] for d in drills.values()), drills
    assert (config.out_dir / "loss.png").read_bytes()[:4] == b"\x89PNG"
