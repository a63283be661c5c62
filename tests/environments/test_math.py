"""The `math` task environment: shipped data that regenerates byte for byte, configs that select
problems deterministically, and math-verify scores computed in a limited child process that
survive hostile completions."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
from proofpool_math import MathEnvironment, make
from proofpool_math.data import FAMILIES, data_sha256, raw_data, records
from proofpool_math.generate import DATA_PATH, render
from proofpool_math.worker import classify

from proofpool.core.environment import SCORE_STATUSES, InvalidProblemId, Score, TaskEnvironment

FAST = {"cpu_seconds": 1}
"""Scoring tests use a 1 s CPU limit, so a hostile completion costs a second, not five."""


@pytest.fixture(scope="module")
def env() -> Iterator[MathEnvironment]:
    environment = make(FAST)
    yield environment
    environment.close()


def first_index(env: MathEnvironment, predicate: Any) -> int:
    """The index of the first problem whose (family, level, answer) satisfies the predicate."""
    for index in range(len(env)):
        problem = env.problem(index)
        if predicate(problem.metadata["family"], problem.metadata["level"], problem.answer):
            return index
    raise AssertionError("no such problem")


def boxed(answer: str) -> str:
    return f"Step by step... so the final answer is $\\boxed{{{answer}}}$."


# --- Plugin, data and config (no worker process) -----------------------------------------------


def test_the_entry_point_makes_a_task_environment() -> None:
    (entry,) = [ep for ep in entry_points(group="proofpool.environments") if ep.name == "math"]
    assert entry.value == "proofpool_math:make" and entry.load() is make
    environment = entry.load()({})
    assert isinstance(environment, TaskEnvironment)
    assert (environment.id, environment.version) == ("math", "0.1.0")
    assert len(environment) == len(records()) == 2430


def test_the_committed_data_is_what_the_generator_writes() -> None:
    assert render() == raw_data() == DATA_PATH.read_bytes()
    assert data_sha256() == hashlib.sha256(DATA_PATH.read_bytes()).hexdigest()


def test_the_data_has_every_family_and_level_with_unique_ids() -> None:
    rows = records()
    assert len({row.id for row in rows}) == len(rows)
    assert len({(row.family, row.question) for row in rows}) == len(rows)
    assert Counter(row.family for row in rows) == dict.fromkeys(FAMILIES, 270)
    assert Counter(row.level for row in rows) == {1: 810, 2: 810, 3: 810}
    assert all(re.fullmatch(rf"{row.family}/\d{{4}}", row.id) and row.answer.strip() for row in rows)
    assert [row.family for row in rows[: len(FAMILIES)]] == list(FAMILIES)  # families interleaved


def test_a_problem_is_a_system_turn_asking_for_boxed_then_the_question() -> None:
    environment = make({})
    problem = environment.problem(0)
    system, user = problem.messages
    assert system.role == "system" and "\\boxed{" in system.content and "step by step" in system.content
    assert user.role == "user" and user.content == records()[0].question
    assert (problem.index, problem.source_id, problem.answer) == (0, "linear/0000", records()[0].answer)
    assert problem.metadata == {"family": "linear", "level": 1}
    json.dumps(problem.metadata)


def test_a_config_selects_the_data_filtered_in_file_order() -> None:
    environment = make({"families": ["percent", "counting"], "levels": [3, 2], "limit": 50})
    expected = [r for r in records() if r.family in ("counting", "percent") and r.level in (2, 3)][:50]
    assert [environment.problem(i).source_id for i in range(len(environment))] == [r.id for r in expected]
    assert environment.describe()["config"] == {
        "families": ["counting", "percent"],
        "levels": [2, 3],
        "limit": 50,
        "cpu_seconds": 5,
    }
    assert len(make({"limit": 10**9})) == len(records())


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"familes": ["linear"]}, "familes"),
        ({"families": "linear"}, "families"),
        ({"families": []}, "families"),
        ({"families": ["geometry"]}, "families"),
        ({"levels": [4]}, "levels"),
        ({"levels": ["1"]}, "levels"),
        ({"levels": []}, "levels"),
        ({"limit": 0}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": 2.5}, "limit"),
        ({"cpu_seconds": 0}, "cpu_seconds"),
        ({"cpu_seconds": 61}, "cpu_seconds"),
    ],
)
def test_a_bad_config_is_a_value_error_naming_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(key))):
        make(config)


def test_a_config_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(ValueError, match="mapping"):
        make(["linear"])  # type: ignore[arg-type]


@pytest.mark.parametrize("index", [-1, 2430, 10**12, "0", 1.0, True, None])
def test_an_index_outside_the_problems_is_invalid(index: Any) -> None:
    environment = make({})
    with pytest.raises(InvalidProblemId):
        environment.problem(index)
    with pytest.raises(InvalidProblemId):
        environment.score(index, "\\boxed{1}")
    with pytest.raises(InvalidProblemId):
        make({"limit": 3}).problem(3)


def test_describe_is_json_and_the_same_for_equivalent_configs() -> None:
    implicit = make({}).describe()
    explicit = make({"families": list(reversed(FAMILIES)), "levels": [1, 2, 3, 3], "limit": None}).describe()
    assert json.dumps(implicit, sort_keys=True) == json.dumps(explicit, sort_keys=True)
    assert json.loads(json.dumps(implicit)) == implicit
    assert implicit["data_sha256"] == hashlib.sha256(DATA_PATH.read_bytes()).hexdigest()
    assert implicit["count"] == 2430 and implicit["id"] == "math" and implicit["version"] == "0.1.0"
    assert set(implicit["packages"]) >= {"math-verify", "sympy", "proofpool-math"}
    assert implicit["packages"]["math-verify"] == "0.9.0"
    assert implicit["limits"]["cpu_seconds"] == 5
    assert make(FAST).describe()["limits"]["cpu_seconds"] == 1


# --- Verdicts from how the child ended (no process) ---------------------------------------------

VERDICT = json.dumps({"status": "correct", "detail": "ok"}).encode()


@pytest.mark.parametrize(
    ("wait_status", "cpu", "output", "killed", "status"),
    [
        (0, 0.01, VERDICT, False, "correct"),
        (0, 0.9, VERDICT, False, "inconclusive"),  # over half the CPU limit: another machine may time out
        (signal.SIGXCPU, 0.97, b"", False, "timeout"),
        (signal.SIGKILL, 1.0, b"", False, "timeout"),
        (signal.SIGKILL, 0.2, b"", False, "error"),  # killed without reaching its CPU limit: memory
        (signal.SIGSEGV, 0.1, b"", False, "error"),
        (0, 0.1, b"", False, "error"),
        (signal.SIGKILL, 0.1, b"", True, "inconclusive"),  # the wall-clock backstop: an overloaded machine
    ],
)
def test_the_verdict_follows_how_the_child_ended(
    wait_status: int, cpu: float, output: bytes, killed: bool, status: str
) -> None:
    verdict = classify(wait_status, cpu, output, killed, cpu_seconds=1, wall_seconds=14.0)
    assert verdict["status"] == status
    assert not re.search(r"\d\.\d", verdict["detail"])  # no measured times: details must be reproducible


# --- Scoring in the worker ----------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_reference_answer_in_a_box_is_correct(env: MathEnvironment, family: str) -> None:
    for level in (1, 2, 3):
        index = first_index(env, lambda f, lv, _, family=family, level=level: (f, lv) == (family, level))
        score = env.score(index, boxed(env.problem(index).answer or ""))
        assert score == Score(1.0, "correct", score.detail), (env.problem(index), score)


def terminating(answer: str) -> Fraction | None:
    """The value of a `\\frac{p}{q}` answer whose decimal terminates."""
    match = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", answer)
    if not match:
        return None
    value = Fraction(int(match[2]), int(match[3])) * (-1 if match[1] else 1)
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return value if denominator == 1 else None


@pytest.mark.timeout(60)
def test_equivalent_forms_of_the_answer_are_correct(env: MathEnvironment) -> None:
    index = first_index(env, lambda family, _, answer: family == "fraction" and terminating(answer) is not None)
    value = terminating(env.problem(index).answer or "")
    assert value is not None
    p, q = value.numerator, value.denominator
    decimal = f"{float(value):.10g}"
    for form in (f"\\frac{{{2 * p}}}{{{2 * q}}}", f"{p}/{q}", f"\\dfrac{{{p}}}{{{q}}}", decimal):
        assert env.score(index, boxed(form)).status == "correct", form
    radical = first_index(env, lambda _, __, answer: re.fullmatch(r"\d+\\sqrt\{\d+\}", answer or "") is not None)
    k, m = map(int, re.findall(r"\d+", env.problem(radical).answer or ""))
    assert env.score(radical, boxed(f"\\sqrt{{{k * k * m}}}")).status == "correct"
    pair = first_index(env, lambda family, level, _: family == "system" and level == 1)
    x, y = (env.problem(pair).answer or "").strip("()").split(", ")
    assert env.score(pair, boxed(f"x = {x}, y = {y}")).status == "correct"
    percent = first_index(env, lambda family, level, _: family == "percent" and level == 3)
    assert env.score(percent, boxed(f"{env.problem(percent).answer}\\%")).status == "correct"


@pytest.mark.timeout(60)
def test_a_wrong_answer_is_incorrect_and_no_answer_is_unparsed(env: MathEnvironment) -> None:
    index = first_index(env, lambda _, __, answer: re.fullmatch(r"-?\d+", answer or "") is not None)
    wrong = env.score(index, boxed(str(int(env.problem(index).answer or "0") + 1)))
    assert (wrong.reward, wrong.status) == (0.0, "incorrect")
    for completion in ("", "I do not know.", f"The answer is {env.problem(index).answer}", "\\boxed{}"):
        assert env.score(index, completion) == Score(0.0, "unparsed", env.score(index, completion).detail)
    assert env.score(index, "\\boxed{\\underbrace{}}").status == "unparsed"


@pytest.mark.timeout(60)
def test_hostile_answers_hit_the_cpu_limit_and_the_environment_keeps_working(env: MathEnvironment) -> None:
    for completion in ("\\boxed{9^{9^{9^{9}}}}", "\\boxed{(10^{9})!}"):
        score = env.score(0, completion)
        assert score.reward == 0.0 and score.status in ("timeout", "incorrect"), score
    assert env.score(0, boxed(env.problem(0).answer or "")).status == "correct"


@pytest.mark.timeout(60)
def test_nul_bytes_surrogates_and_huge_strings_never_raise(env: MathEnvironment) -> None:
    answer = env.problem(0).answer or ""
    for completion in (
        "\x00",
        f"\\boxed{{{answer}\x00}}",
        "\ud800\\boxed{\udfff}",
        "x" * 2_000_000 + boxed(answer),
        "}" * 500_000,
        "$" * 100_000,
        "\\boxed{" * 20_000,
    ):
        score = env.score(0, completion)
        assert score.status in SCORE_STATUSES and 0.0 <= score.reward <= 1.0
    assert env.score(0, "x" * 2_000_000 + boxed(answer)).status == "correct"


@pytest.mark.timeout(60)
def test_a_completion_is_parsed_as_latex_never_evaluated_as_code(env: MathEnvironment, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payloads = (
        f"\\boxed{{__import__('os').system('touch {marker}')}}",
        f"The final answer is 1 + __import__('os').system('touch {marker}')",
        f"answer: 2*3 + exec(\"open('{marker}', 'w')\")",
    )
    for completion in payloads:
        assert env.score(0, completion).status != "correct"
    assert not marker.exists()


@pytest.mark.timeout(60)
def test_scores_are_the_same_from_threads_and_from_another_worker(env: MathEnvironment) -> None:
    cases = [(i, boxed(env.problem(i).answer or "")) for i in range(12)] + [(i, boxed("7")) for i in range(12)]
    expected = [env.score(i, c) for i, c in cases]
    from_threads: dict[int, Score] = {}

    def run(k: int) -> None:
        from_threads[k] = env.score(*cases[k])

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(cases))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=50)
    assert [from_threads[k] for k in range(len(cases))] == expected
    with make(FAST) as other:
        assert [other.score(i, c) for i, c in cases] == expected


@pytest.mark.timeout(60)
def test_a_dead_worker_is_replaced(env: MathEnvironment) -> None:
    env.score(0, "\\boxed{1}")
    worker = env._scorer._worker
    assert worker is not None
    worker.proc.kill()
    worker.proc.wait()
    assert env.score(0, boxed(env.problem(0).answer or "")).status == "correct"
