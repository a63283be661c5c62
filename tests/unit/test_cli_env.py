"""`proofpool env`: list, show, score and describe run the plugins' own code and fail clearly."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "env", *args], capture_output=True, text=True, input=stdin
    )


def test_list_names_every_installed_task_environment_with_its_size() -> None:
    done = _cli("list")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert {"code", "math", "reasoning-gym"} <= set(rows)
    assert "devnet" not in rows  # the model-URI environment is not a task environment
    assert rows["math"][2].isdigit() and int(rows["math"][2]) > 1000
    assert rows["reasoning-gym"][2] == "config"  # no default: it needs a seed


def test_show_prints_the_source_id_and_the_prompt_turns() -> None:
    done = _cli("show", "code", "--index", "0", "--config", '{"sources": ["humaneval"]}')
    assert done.returncode == 0, done.stderr
    problem = json.loads(done.stdout)
    assert problem["source_id"] == "HumanEval/0" and problem["index"] == 0
    assert [m["role"] for m in problem["messages"]] == ["system", "user"]


def test_score_gives_the_reference_answer_full_reward_and_a_wrong_one_none(tmp_path: Path) -> None:
    config = json.dumps({"tasks": "gcd", "seed": 7, "size": 20})
    answer = json.loads(_cli("show", "reasoning-gym", "-i", "3", "-c", config).stdout)["answer"]
    right, wrong = tmp_path / "right.txt", tmp_path / "wrong.txt"
    right.write_text(f"thinking...\n<answer>{answer}</answer>")
    wrong.write_text(f"<answer>{int(answer) + 1}</answer>")
    scored = [
        json.loads(_cli("score", "reasoning-gym", "-i", "3", "-c", config, "-f", str(f)).stdout) for f in (right, wrong)
    ]
    assert scored[0] == {"reward": 1.0, "status": "correct", "detail": scored[0]["detail"]}
    assert scored[1]["reward"] == 0.0 and scored[1]["status"] == "incorrect"
    from_stdin = json.loads(_cli("score", "reasoning-gym", "-i", "3", "-c", config, "-f", "-", stdin="no tags").stdout)
    assert from_stdin["status"] == "unparsed"


def test_describe_pins_config_packages_and_data(tmp_path: Path) -> None:
    config = tmp_path / "math.json"
    config.write_text(json.dumps({"families": ["linear"], "limit": 5}))
    described = json.loads(_cli("describe", "math", "--config", f"@{config}").stdout)
    assert described["id"] == "math" and described["size"] == 5
    assert len(described["data_sha256"]) == 64 and "math-verify" in described["packages"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "nope", "-i", "0"), "no task environment 'nope' is installed"),
        (("show", "math", "-i", "999999"), "999999"),
        (("show", "reasoning-gym", "-i", "0"), "'tasks' is required"),
        (("show", "reasoning-gym", "-i", "0", "-c", '{"tasks": "gcd"}'), "seed"),
        (("show", "math", "-i", "0", "-c", "{not json"), "config is not JSON"),
        (("show", "math", "-i", "0", "-c", "[1]"), "config must be a JSON object"),
    ],
)
def test_bad_input_is_one_clear_line_not_a_traceback(args: tuple[str, ...], message: str) -> None:
    done = _cli(*args)
    assert done.returncode == 1
    assert message in " ".join(done.stderr.split()) and "Traceback" not in done.stderr


def test_spec_writes_a_pool_spec_that_check_spec_accepts_and_a_tampered_one_it_refuses(tmp_path: Path) -> None:
    from proofpool.devnet.tiny_model import build_tiny_qwen3

    model = build_tiny_qwen3(tmp_path / "model")
    spec = tmp_path / "spec.json"
    made = _cli("spec", "math", "--model", str(model), "--out", str(spec), "-c", '{"families": ["percent"]}')
    assert made.returncode == 0, made.stderr
    digest = made.stdout.strip()
    assert hashlib.sha256(spec.read_bytes()).hexdigest() == digest
    checked = _cli("check-spec", str(spec), "--model", str(model))
    assert checked.returncode == 0 and checked.stdout.startswith(digest) and "golden vectors agree" in checked.stdout
    raw = json.loads(spec.read_text())
    raw["golden"][0]["reward"] = 0.0
    spec.write_text(json.dumps(raw))
    refused = _cli("check-spec", str(spec), "--model", str(model))
    assert refused.returncode == 1 and "golden vectors disagree" in " ".join(refused.stderr.split())
