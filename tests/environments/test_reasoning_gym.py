"""The `reasoning-gym` environment plugin: entry point, determinism, scoring, config checks, describe().

Only fast reasoning-gym tasks (basic_arithmetic, gcd, leg_counting, chain_sum) are drawn, so the
file runs in seconds; nothing touches the network.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from importlib.metadata import entry_points
from typing import Any

import proofpool_reasoning_gym
import pytest
from proofpool_reasoning_gym import (
    NONDETERMINISTIC_TASKS,
    UNSAFE_SCORER_TASKS,
    available_tasks,
    make,
)
from proofpool_reasoning_gym.answer import extract_answer
from proofpool_reasoning_gym.env import MAX_ANSWER_CHARS
from reasoning_gym.arithmetic.basic_arithmetic import BasicArithmeticDataset
from reasoning_gym.factory import DATASETS

from proofpool.core.environment import SCORE_STATUSES, InvalidProblemId, Problem, Score, TaskEnvironment

ARITHMETIC = {"tasks": "basic_arithmetic", "seed": 1234, "size": 500}
MIX = {"tasks": {"basic_arithmetic": 3, "gcd": 1, "leg_counting": 1}, "seed": 99, "size": 300}


@pytest.fixture(scope="module")
def env() -> TaskEnvironment:
    return make(ARITHMETIC)


def answered(text: str | None) -> str:
    return f"Let me think.\n<answer>{text}</answer>"


def fingerprint(environment: TaskEnvironment, count: int) -> str:
    rows = [dataclasses.asdict(environment.problem(index)) for index in range(count)]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


# --- the plugin ------------------------------------------------------------------------------------


def test_entry_point_resolves_to_make() -> None:
    found = {point.name: point for point in entry_points(group="proofpool.environments")}
    assert "reasoning-gym" in found
    assert found["reasoning-gym"].load() is make


def test_make_builds_a_task_environment(env: TaskEnvironment) -> None:
    assert isinstance(env, TaskEnvironment)
    assert env.id == "reasoning-gym"
    assert env.version == "0.1.0" == proofpool_reasoning_gym.__version__
    assert len(env) == 500


def test_construction_of_a_large_environment_is_fast() -> None:
    started = time.perf_counter()
    big = make({"tasks": {"basic_arithmetic": 1, "chain_sum": 1}, "seed": 5, "size": 10_000})
    assert time.perf_counter() - started < 2.0
    assert len(big) == 10_000
    assert big.problem(9_999).index == 9_999


# --- problems ---------------------------------------------------------------------------------------


def test_prompt_holds_a_system_message_and_the_question(env: TaskEnvironment) -> None:
    problem = env.problem(17)
    assert isinstance(problem, Problem)
    assert [message.role for message in problem.messages] == ["system", "user"]
    assert "<answer>" in problem.messages[0].content and "</answer>" in problem.messages[0].content
    assert problem.messages[1].content.startswith("Calculate")
    assert problem.source_id == "basic_arithmetic/17"
    assert problem.answer is not None and problem.answer.lstrip("-").isdigit()
    assert problem.metadata["task"] == "basic_arithmetic"
    assert "difficulty" in problem.metadata
    json.dumps(problem.metadata, allow_nan=False)


def test_problems_are_the_same_in_two_instances() -> None:
    first, second = make(ARITHMETIC), make(dict(ARITHMETIC))
    # Drawn in opposite orders: an item must not depend on what was drawn before it.
    forward = [first.problem(index) for index in range(40)]
    backward = [second.problem(index) for index in reversed(range(40))][::-1]
    assert forward == backward
    assert len({problem.messages[1].content for problem in forward}) > 30


def test_problems_are_the_same_in_a_process_with_another_hash_seed(env: TaskEnvironment) -> None:
    script = (
        "import dataclasses, hashlib, json\n"
        "from proofpool_reasoning_gym import make\n"
        f"env = make({json.dumps(ARITHMETIC)})\n"
        "rows = [dataclasses.asdict(env.problem(i)) for i in range(30)]\n"
        "print(hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest())\n"
        "print(env.describe()['data_sha256'])\n"
    )
    child_env = {**os.environ, "PYTHONHASHSEED": "4242"}
    result = subprocess.run(
        [sys.executable, "-c", script], env=child_env, capture_output=True, text=True, timeout=60, check=True
    )
    problems_digest, data_digest = result.stdout.split()
    assert problems_digest == fingerprint(env, 30)
    assert data_digest == env.describe()["data_sha256"]


def test_weighted_mix_draws_from_every_task() -> None:
    mix = make(MIX)
    problems = [mix.problem(index) for index in range(len(mix))]
    counts: dict[str, int] = {}
    for problem in problems:
        task = problem.metadata["task"]
        counts[task] = counts.get(task, 0) + 1
        assert problem.source_id.startswith(f"{task}/")
    assert set(counts) == {"basic_arithmetic", "gcd", "leg_counting"}
    assert counts["basic_arithmetic"] > counts["gcd"] and counts["basic_arithmetic"] > counts["leg_counting"]
    # Every task's reference answer is right by its own scorer, through the mix.
    for problem in problems[:30]:
        assert mix.score(problem.index, answered(problem.answer)).status == "correct"


def test_mix_does_not_depend_on_the_order_of_its_tasks() -> None:
    reordered = {**MIX, "tasks": dict(reversed(list(MIX["tasks"].items())))}
    assert fingerprint(make(MIX), 25) == fingerprint(make(reordered), 25)
    assert make(MIX).describe() == make(reordered).describe()


def test_other_seeds_draw_other_problems() -> None:
    assert fingerprint(make(ARITHMETIC), 10) != fingerprint(make({**ARITHMETIC, "seed": 1235}), 10)


def test_task_config_reaches_reasoning_gym() -> None:
    overrides = {"min_terms": 2, "max_terms": 2, "operators": ["+"]}
    narrow = make({**ARITHMETIC, "task_config": {"basic_arithmetic": overrides}})
    questions = [narrow.problem(index).messages[1].content for index in range(20)]
    assert all(question.count(" + ") == 1 and not set("*/") & set(question) for question in questions)
    wide = [make(ARITHMETIC).problem(index).messages[1].content for index in range(20)]
    assert any(set("*/") & set(question) for question in wide)
    assert narrow.describe()["config"]["task_config"] == {"basic_arithmetic": dict(sorted(overrides.items()))}


# --- scoring ----------------------------------------------------------------------------------------


def test_reference_answer_scores_correct(env: TaskEnvironment) -> None:
    for index in (0, 1, 250, 499):
        score = env.score(index, answered(env.problem(index).answer))
        assert score == Score(1.0, "correct", score.detail)


def test_wrong_answer_scores_incorrect(env: TaskEnvironment) -> None:
    answer = env.problem(3).answer
    assert answer is not None
    wrong = env.score(3, answered(str(int(answer) + 1)))
    assert wrong.reward < 1.0 and wrong.status == "incorrect"
    # reasoning-gym's default scorer gives partial credit when the answer contains the reference:
    # the reward is kept, the status stays incorrect.
    partial = env.score(3, answered(f"{answer} (I think)"))
    assert 0.0 < partial.reward < 1.0 and partial.status == "incorrect"


@pytest.mark.parametrize(
    "completion",
    ["", "42", "the answer is 42", "<answer>42", "42</answer>", "</answer>42<answer>", "<ANSWER>42</ANSWER>"],
)
def test_completion_without_an_answer_pair_is_unparsed(env: TaskEnvironment, completion: str) -> None:
    assert env.score(0, completion) == Score(0.0, "unparsed", env.score(0, completion).detail)


def test_last_answer_pair_wins(env: TaskEnvironment) -> None:
    right = env.problem(5).answer
    assert env.score(5, f"<answer>wrong</answer> on second thought <answer>{right}</answer>").status == "correct"
    assert env.score(5, f"<answer>{right}</answer> on second thought <answer>wrong</answer>").status == "incorrect"
    assert env.score(5, f"<answer>{right}</answer> and a stray </answer>").status == "correct"
    assert env.score(5, f"<answer>draft <answer> {right} \n</answer>").status == "correct"


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer> 7 </answer>", "7"),
        ("<answer>a</answer><answer>b</answer>", "b"),
        ("<answer>a <answer>b</answer>", "b"),
        ("<answer>a</answer> </answer>", "a"),
        ("<answer>a</answer><answer>unclosed", "a"),
        ("<answer></answer>", ""),
        ("</answer><answer>", None),
        ("nothing", None),
    ],
)
def test_extract_answer(completion: str, expected: str | None) -> None:
    assert extract_answer(completion) == expected


HOSTILE = [
    "x" * 2_000_000 + answered("1"),
    "<answer>" * 200_000 + "</answer>",
    "</answer>" * 100_000 + "<answer>" * 100_000,
    answered("1" * (MAX_ANSWER_CHARS + 1)),
    answered("\x00\x00\x00"),
    "\x00<answer>\x00</answer>\x00",
    answered("😀 ∑ \u202e مرحبا 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"),
    answered("\ud800\udfff lone surrogates"),
    answered("(" * 5_000),
    answered("9" * 20_000),
    answered("1e999999999"),
    answered("nan"),
    answered("__import__('os').system('false')"),
    "<answer><answer></answer></answer>",
    "\r\n\t" * 1000,
]


@pytest.mark.parametrize("completion", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_completions_never_raise(env: TaskEnvironment, completion: str) -> None:
    started = time.perf_counter()
    score = env.score(0, completion)
    assert time.perf_counter() - started < 2.0
    assert 0.0 <= score.reward <= 1.0 and score.status in SCORE_STATUSES
    assert score.status != "correct"
    assert "\n" not in score.detail and len(score.detail) <= 200


def test_overlong_answer_is_incorrect_without_reaching_the_scorer(env: TaskEnvironment) -> None:
    score = env.score(0, answered("1" * (MAX_ANSWER_CHARS + 1)))
    assert score.reward == 0.0 and score.status == "incorrect" and "limit" in score.detail


def test_scorer_exceptions_become_error_scores(env: TaskEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: Any, answer: str | None, entry: dict[str, Any]) -> float:
        raise RecursionError("scorer blew up\non two lines")

    monkeypatch.setattr(BasicArithmeticDataset, "score_answer", broken)
    score = env.score(0, answered("1"))
    assert score.reward == 0.0 and score.status == "error"
    assert "RecursionError" in score.detail and "\n" not in score.detail


@pytest.mark.parametrize(
    ("returned", "expected"),
    [(7.0, Score(1.0, "correct")), (-3.0, Score(0.0, "incorrect")), (0.25, Score(0.25, "incorrect"))],
)
def test_scorer_rewards_are_clipped_to_the_unit_interval(
    env: TaskEnvironment, monkeypatch: pytest.MonkeyPatch, returned: float, expected: Score
) -> None:
    monkeypatch.setattr(BasicArithmeticDataset, "score_answer", lambda self, answer, entry: returned)
    score = env.score(0, answered("1"))
    assert (score.reward, score.status) == (expected.reward, expected.status)


def test_scorer_nan_is_an_error(env: TaskEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(BasicArithmeticDataset, "score_answer", lambda self, answer, entry: math.nan)
    assert env.score(0, answered("1")).status == "error"


def test_scorer_cannot_change_the_problem(env: TaskEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    before = env.problem(8)

    def vandal(self: Any, answer: str | None, entry: dict[str, Any]) -> float:
        entry["answer"] = "vandalized"
        entry["metadata"].clear()
        return 0.0

    monkeypatch.setattr(BasicArithmeticDataset, "score_answer", vandal)
    env.score(8, answered("1"))
    assert env.problem(8) == before


@pytest.mark.parametrize("index", [-1, 500, 10**12, "3", 3.0, True, None])
def test_indices_outside_the_environment_are_invalid(env: TaskEnvironment, index: Any) -> None:
    with pytest.raises(InvalidProblemId):
        env.problem(index)
    with pytest.raises(InvalidProblemId):
        env.score(index, answered("1"))


# --- config -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"tasks": "basic_arithmetic"}, "'seed' is required"),
        ({"tasks": "basic_arithmetic", "seed": None}, "'seed' is required"),
        ({"tasks": "basic_arithmetic", "seed": "7"}, "'seed'"),
        ({"tasks": "basic_arithmetic", "seed": True}, "'seed'"),
        ({"tasks": "basic_arithmetic", "seed": -1}, "'seed'"),
        ({"seed": 1}, "'tasks' is required"),
        ({"tasks": {}, "seed": 1}, "'tasks'"),
        ({"tasks": ["gcd"], "seed": 1}, "'tasks'"),
        ({"tasks": "basic_arithmetc", "seed": 1}, "'basic_arithmetc'"),
        ({"tasks": {"gcd": 0}, "seed": 1}, "weight of 'gcd'"),
        ({"tasks": {"gcd": -2.5, "lcm": 1}, "seed": 1}, "weight of 'gcd'"),
        ({"tasks": {"gcd": "heavy", "lcm": 1}, "seed": 1}, "weight of 'gcd'"),
        ({"tasks": {"gcd": math.nan, "lcm": 1}, "seed": 1}, "weight of 'gcd'"),
        ({"tasks": {"gcd": math.inf, "lcm": 1}, "seed": 1}, "weight of 'gcd'"),
        ({"tasks": {"gcd": True}, "seed": 1}, "weight of 'gcd'"),
        ({"tasks": "time_intervals", "seed": 1}, "'time_intervals'"),
        ({"tasks": {"gcd": 1, "word_ladder": 1}, "seed": 1}, "'word_ladder'"),
        ({"tasks": "n_queens", "seed": 1}, "'n_queens'"),
        ({"tasks": "composite", "seed": 1}, "'composite'"),
        ({"tasks": "gcd", "seed": 1, "size": 0}, "'size'"),
        ({"tasks": "gcd", "seed": 1, "size": 10**9}, "'size'"),
        ({"tasks": "gcd", "seed": 1, "size": 10.5}, "'size'"),
        ({"tasks": "gcd", "seed": 1, "sede": 2}, "'sede'"),
        ({"tasks": "gcd", "seed": 1, "task_config": {"lcm": {}}}, "'lcm'"),
        ({"tasks": "gcd", "seed": 1, "task_config": {"gcd": {"seed": 3}}}, "task_config.gcd.seed"),
        ({"tasks": "gcd", "seed": 1, "task_config": {"gcd": {"bogus": 3}}}, "'bogus'"),
        ({"tasks": "gcd", "seed": 1, "task_config": {"gcd": {"min_value": math.nan}}}, "task_config.gcd"),
        ({"tasks": "basic_arithmetic", "seed": 1, "task_config": {"basic_arithmetic": {"min_terms": 0}}}, "min_terms"),
        ({"tasks": "basic_arithmetic", "seed": 1, "task_config": ["min_terms"]}, "'task_config'"),
    ],
)
def test_bad_configs_are_refused_naming_the_key(config: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError) as refused:
        make(config)
    assert named in str(refused.value)


def test_clock_reading_task_is_refused_as_nondeterministic() -> None:
    with pytest.raises(ValueError, match=r"time_intervals.*not deterministic.*date\.today"):
        make({"tasks": "time_intervals", "seed": 1})


def test_unknown_task_lists_known_names() -> None:
    with pytest.raises(ValueError) as refused:
        make({"tasks": "basic_arithmetc", "seed": 1})
    message = str(refused.value)
    assert "did you mean ['basic_arithmetic'" in message and "available_tasks()" in message


def test_refused_tasks_are_real_reasoning_gym_tasks() -> None:
    # A stale entry (a task renamed by a new reasoning-gym release) would refuse nothing.
    refused = set(NONDETERMINISTIC_TASKS) | set(UNSAFE_SCORER_TASKS)
    assert refused <= set(DATASETS)
    assert not refused & set(available_tasks())
    assert {"basic_arithmetic", "gcd"} <= set(available_tasks())
    assert "composite" not in available_tasks()


def test_single_task_by_name_or_mapping_is_the_same_environment() -> None:
    by_name = make({"tasks": "gcd", "seed": 3, "size": 20})
    by_mapping = make({"tasks": {"gcd": 5}, "seed": 3, "size": 20})
    assert by_name.describe() == by_mapping.describe()
    assert by_name.describe()["config"]["tasks"] == {"gcd": 1.0}


# --- describe() ---------------------------------------------------------------------------------------


def test_describe_is_json_and_stable() -> None:
    first = make(MIX).describe()
    again = make(json.loads(json.dumps(MIX)))
    assert json.loads(json.dumps(first, allow_nan=False)) == first
    assert again.describe() == first == make(MIX).describe()
    assert first["config"] == {
        "tasks": {"basic_arithmetic": 3.0, "gcd": 1.0, "leg_counting": 1.0},
        "seed": 99,
        "size": 300,
        "task_config": {},
    }
    assert first["packages"] == {"reasoning-gym": "0.1.25", "proofpool-reasoning-gym": "0.1.0"}
    assert len(first["data_sha256"]) == 64 and int(first["data_sha256"], 16) >= 0
    assert make({**MIX, "seed": 100}).describe()["data_sha256"] != first["data_sha256"]


def test_describe_digest_covers_the_first_problems() -> None:
    small = make({"tasks": "gcd", "seed": 11, "size": 3})
    rows = []
    for index in range(3):
        problem = small.problem(index)
        messages = [{"role": message.role, "content": message.content} for message in problem.messages]
        rows.append({"index": index, "messages": messages, "answer": problem.answer})
    canonical = json.dumps(rows, sort_keys=True, separators=(",", ":"))
    assert small.describe()["data_sha256"] == hashlib.sha256(canonical.encode()).hexdigest()
