"""`proofpool env filter` end to end: a tiny Qwen3 sampled by the worker's real vLLM engine on math
problems, every completion scored by the math scorer, the band applied, the files written.

The random model never boxes the right answer, so every conclusive problem has rate 0: band
[0, 1] keeps all of them, band [0.5, 1] keeps none (a warning, not an error). The kept list goes
into a pool spec unchanged. The command is run through a one-command typer app wrapping
`filter_command`, in process, as it is not mounted under `proofpool env` yet.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from proofpool.cli.env import app
from proofpool.cli.env_filter import indices_path
from proofpool.devnet.tiny_model import build_tiny_qwen3
from typer.testing import CliRunner

from proofpool.core.spec import ids_sha256
from proofpool.envs.spec import build_spec
from proofpool.envs.tasks import load_task_environment

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(600)]

CONFIG = {"families": ["percent"], "limit": 6}
SAMPLES, MAX_TOKENS = 2, 16


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tasks = load_task_environment("math", CONFIG)
    try:
        corpus = [m.content for i in range(len(tasks)) for m in tasks.problem(i).messages]
    finally:
        tasks.close()
    return build_tiny_qwen3(tmp_path_factory.mktemp("qwen3"), corpus)


def _run(model_dir: Path, out: Path, low: float, high: float) -> tuple[str, str]:
    args = ["math", "--model", str(model_dir), "--out", str(out), "--config", json.dumps(CONFIG)]
    args += ["--samples", str(SAMPLES), "--max-tokens", str(MAX_TOKENS), "--low", str(low), "--high", str(high)]
    args += ["--batch", "4", "--seed", "3"]  # 6 problems in two engine calls
    result = CliRunner().invoke(app, ["filter", *args])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout, result.stderr


def test_band_0_to_1_keeps_every_measured_problem_and_feeds_a_spec(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "filter.json"
    stdout, stderr = _run(model_dir, out, 0.0, 1.0)

    report = json.loads(out.read_text())
    summary = report["summary"]
    assert summary["problems"] == 6 and summary["samples"] == 6 * SAMPLES
    measured = summary["measured"]
    assert measured >= 1, "every sample was inconclusive: the scorer could not judge the random model"
    assert report["indices"] == sorted(report["indices"]) and len(report["indices"]) == measured
    assert set(report["indices"]) <= set(range(6))
    assert report["band"] == [0.0, 1.0] and report["env"] == "math" and report["samples"] == SAMPLES
    assert report["model"] == str(model_dir) and report["too_long"] == []
    assert report["config"]["families"] == ["percent"] and report["config"]["limit"] == 6
    assert report["config"]["levels"] == [1, 2, 3]  # normalized: the defaults spelled out
    assert sum(b["count"] for b in summary["histogram"]) == measured and summary["kept"] == measured
    assert summary["mean_rate"] == 0.0  # a random model boxes no right answer

    plain = indices_path(out)
    assert plain == tmp_path / "filter.indices.json"
    assert json.loads(plain.read_text()) == report["indices"]
    assert f"kept {measured} of 6 problems" in stdout
    assert ids_sha256(report["indices"]) in stdout and str(plain) in stdout
    assert "6/6 problems" in stderr and "warning" not in stderr

    spec = build_spec(
        "math",
        CONFIG,
        model_dir,
        batch_size=2,
        group_size=SAMPLES,
        max_prompt_tokens=2048,
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        indices=json.loads(plain.read_text()),  # as `env spec --indices` reads it
        band=tuple(report["band"]),
    )
    assert spec.indices.count == measured
    assert spec.indices.sha256 == ids_sha256(report["indices"])
    assert spec.environment.config == report["config"]


def test_a_band_nothing_reaches_keeps_nothing_and_warns(model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "hard.json"
    stdout, stderr = _run(model_dir, out, 0.5, 1.0)

    report = json.loads(out.read_text())
    assert report["indices"] == [] and report["band"] == [0.5, 1.0]
    assert report["summary"]["kept"] == 0 and report["summary"]["problems"] == 6
    assert json.loads(indices_path(out).read_text()) == []
    assert "warning: no problem's pass rate lies in [0.5, 1.0]" in stderr
    assert "kept 0 of 6 problems" in stdout and ids_sha256([]) in stdout
