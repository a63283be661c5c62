"""The arithmetic task: seeded problems, stable ids, and a reward that never crashes on junk."""

from __future__ import annotations

import pytest
from proofpool_arithmetic.task import (
    MAX_OPERAND,
    InvalidProblemId,
    Problem,
    generate_problems,
    parse_answer,
    problem_from_id,
    reward,
)
from proofpool_arithmetic.tokenizer import BOS_ID, EOS_ID, PAD_ID, encode_text


def test_generator_is_seeded_and_independent_of_global_random_state() -> None:
    import random

    first = generate_problems(7, 50)
    random.seed(123)
    random.random()
    assert generate_problems(7, 50) == first
    assert generate_problems(8, 50) != first


def test_problems_stay_below_100() -> None:
    problems = generate_problems(0, 2000)
    assert all(0 <= p.a <= MAX_OPERAND and 0 <= p.b <= MAX_OPERAND for p in problems)
    assert {p.a for p in problems} == set(range(MAX_OPERAND + 1))  # the whole range is drawn


def test_problem_ids_are_stable_strings_that_round_trip() -> None:
    problem = Problem(7, 42)
    assert problem.problem_id == "add-7-42"
    assert problem.prompt == "7+42="
    assert problem.answer == 49
    for p in generate_problems(3, 200):
        assert problem_from_id(p.problem_id) == p


@pytest.mark.parametrize("bad", ["", "add-1", "add-1-2-3", "add-07-5", "add-100-1", "sub-1-2", "add--1-2", "ADD-1-2"])
def test_malformed_problem_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidProblemId):
        problem_from_id(bad)


def test_prompt_tokens_start_with_bos() -> None:
    assert Problem(3, 4).prompt_tokens() == [BOS_ID, *encode_text("3+4=")]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("49", 1.0),
        (" 49 ", 1.0),
        ("049", 1.0),
        ("48", 0.0),
        ("", 0.0),
        ("4 9", 0.0),
        ("49+", 0.0),
        ("-49", 0.0),
        ("49=49", 0.0),
        ("x", 0.0),
    ],
)
def test_reward_on_text(completion: str, expected: float) -> None:
    assert reward(Problem(7, 42), completion) == expected


def test_reward_on_tokens_stops_at_eos_and_ignores_specials() -> None:
    answer = encode_text("49")
    problem = Problem(7, 42)
    assert reward(problem, [*answer, EOS_ID]) == 1.0
    assert reward(problem, answer) == 1.0  # cut by max_tokens right after the answer
    assert reward(problem, [*answer, EOS_ID, *encode_text("1")]) == 1.0  # after EOS does not count
    assert reward(problem, [*answer, *encode_text("1"), EOS_ID]) == 0.0
    assert reward(problem, [BOS_ID, *answer, PAD_ID, EOS_ID]) == 1.0
    assert reward(problem, [EOS_ID]) == 0.0
    assert reward(problem, []) == 0.0


def test_reward_accepts_a_problem_id_and_survives_hostile_tokens() -> None:
    assert reward("add-7-42", encode_text("49")) == 1.0
    assert reward("add-7-42", [-5, 10**9, *encode_text("49")]) == 1.0  # out-of-vocab ids decode to nothing
    assert parse_answer([10**9]) is None
    with pytest.raises(InvalidProblemId):
        reward("nonsense", "49")
