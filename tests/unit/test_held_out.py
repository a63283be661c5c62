"""Held-out slices (`Taskset.held_out`): problems of the task set's own distribution that no draw
returns, the same on every machine, chosen by sha256 of the problem id whatever the order of the
pool's index list; a task set without one draws exactly as before."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.task import HELD_OUT_PROBLEMS, Problem, generate_problems, problem_from_id
from proofpool_arithmetic.tokenizer import save_tokenizer

from proofpool.core.assignment import task_ids
from proofpool.core.environment import InvalidProblemId, Message, Score
from proofpool.core.environment import Problem as TaskProblem
from proofpool.envs.tokenized import TokenizedTaskset, default_held_out, held_out_slice

TASKS = ENVIRONMENT.taskset
DATA = Path(__file__).resolve().parents[1] / "data" / "ill_conditioned"


class Numbers:
    """A task environment of `size` problems; problem i asks for i (only draws matter here)."""

    id, version = "numbers", "1"

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def problem(self, index: int) -> TaskProblem:
        return TaskProblem(index, f"numbers/{index}", (Message("user", f"Say {index}."),), str(index))

    def score(self, index: int, completion: str) -> Score:
        return Score(float(completion == str(index)), "correct" if completion == str(index) else "incorrect")

    def reference_completion(self, index: int) -> str | None:
        return str(index)

    def describe(self) -> Mapping[str, Any]:
        return {"size": self.size}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Any tokenizer: draws and held-out slices never tokenize."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(save_tokenizer(tmp_path_factory.mktemp("tok"))))


def _taskset(tokenizer: Any, indices: list[int], held_out: int, size: int = 400) -> TokenizedTaskset:
    return TokenizedTaskset(Numbers(size), tokenizer, frozenset({2}), indices=indices, held_out=held_out)


# --- the devnet's arithmetic task set ------------------------------------------------------------


def test_arithmetic_holds_out_a_fixed_prefix_ordered_slice() -> None:
    held = TASKS.held_out(10_000)
    assert len(held) == len(set(held)) == HELD_OUT_PROBLEMS == 512
    assert TASKS.held_out(10) == held[:10] and TASKS.held_out(0) == []
    assert all(problem_from_id(p).problem_id == p for p in held)  # real problems, promptable and scoreable
    assert TASKS.score(held[0], ENVIRONMENT.reference_completion(held[0])) == 1.0
    assert held == list(held_out_slice([Problem(a, b).problem_id for a in range(100) for b in range(100)], 512))
    with pytest.raises(ValueError, match="count"):
        TASKS.held_out(-1)


def test_no_arithmetic_draw_returns_a_held_out_problem() -> None:
    held = set(TASKS.held_out(HELD_OUT_PROBLEMS))
    drawn = [p for seed in range(2_000) for p in TASKS.draw(seed, 32)]  # ~3,300 hits if nothing were excluded
    assert not held & set(drawn)
    assert len(set(drawn)) > 9_000  # and the draws still cover the rest of the task


def test_an_arithmetic_draw_skips_held_out_problems_and_keeps_the_others() -> None:
    """The generator draws again for a held-out pair, so a draw that meets none is unchanged."""
    held = set(TASKS.held_out(HELD_OUT_PROBLEMS))
    met = 0
    for seed in range(300):
        plain = generate_problems(seed, 64)
        met += any(p.problem_id in held for p in plain)
        expected = [p.problem_id for p in plain if p.problem_id not in held]
        assert TASKS.draw(seed, 64)[: len(expected)] == expected
    assert met > 200  # the seeds exercised the skipping, not only untouched draws


def test_the_stored_real_file_is_still_the_batch_it_was_assigned() -> None:
    """`tests/data/ill_conditioned` is batch 5 of a real devnet node at version 7: the validator
    re-derives its problems from the assignment, and the held-out rule leaves them as they were
    (as it does the pinned draw of `test_assignment.py`)."""
    import pyarrow.parquet as pq

    table = pq.read_table(DATA / "rollout.parquet")  # the columns alone, whatever the schema version
    meta = table.schema.metadata
    pool_id, node = int(meta[b"proofpool.pool_id"]), meta[b"proofpool.node"].decode()
    rows = table.select(["problem_id", "group_id", "model_version"]).to_pylist()
    assert {r["model_version"] for r in rows} == {7} and len(rows) == 64
    assigned = task_ids(TASKS, pool_id, node, 7, 5, 8)
    assert [r["problem_id"] for r in rows] == [assigned[r["group_id"]] for r in rows]


def test_arithmetic_held_out_problems_come_from_the_training_distribution() -> None:
    """Uniform pairs 0..99: mean operand 49.5, half the sums have three digits. An ordered choice
    (the first 512 ids, the largest sums) would miss both by far."""
    problems = [problem_from_id(p) for p in TASKS.held_out(HELD_OUT_PROBLEMS)]
    operands = [p.a for p in problems] + [p.b for p in problems]
    assert abs(sum(operands) / len(operands) - 49.5) < 4
    assert abs(sum(p.answer >= 100 for p in problems) / len(problems) - 0.495) < 0.07


# --- task sets over an index list (`TokenizedTaskset`) -------------------------------------------


def test_no_draw_returns_a_held_out_index_and_every_other_index_is_drawn(tokenizer: Any) -> None:
    indices = list(range(0, 400, 2))  # 200 problems
    taskset = _taskset(tokenizer, indices, held_out=20)
    held = taskset.held_out(100)
    assert len(held) == 20 and set(held) <= {str(i) for i in indices}
    drawn = {p for seed in range(300) for p in taskset.draw(seed, 64)}
    assert not drawn & set(held)
    assert drawn == {str(i) for i in indices} - set(held)
    assert taskset.training == tuple(i for i in indices if str(i) not in held)
    for problem_id in held:  # still the pool's problems: the trainer prompts and scores them
        assert taskset.index(problem_id) == int(problem_id)


def test_the_slice_depends_on_the_set_of_indices_not_their_order(tokenizer: Any) -> None:
    indices = list(range(300))
    shuffled = indices[:]
    random.Random(4).shuffle(shuffled)
    first = _taskset(tokenizer, indices, held_out=30).held_out(30)
    assert _taskset(tokenizer, shuffled, held_out=30).held_out(30) == first
    assert _taskset(tokenizer, indices + indices[:50], held_out=30).held_out(30) == first  # repeats too
    assert _taskset(tokenizer, indices, held_out=30).held_out(30) == first  # deterministic
    assert _taskset(tokenizer, indices, held_out=10).held_out(10) == first[:10]  # a smaller slice is a prefix
    assert first != [str(i) for i in range(30)]  # a hash choice, not the head of the list
    rank = [hashlib.sha256(b"proofpool/held-out/v1/" + p.encode()).digest() for p in first]
    assert rank == sorted(rank)


def test_without_a_held_out_slice_draws_are_what_they_always_were(tokenizer: Any) -> None:
    indices = [7, 3, 99, 42, 5]
    taskset = _taskset(tokenizer, indices, held_out=0)
    assert taskset.held_out(10) == [] and taskset.training == tuple(indices)
    for seed in (0, 1, 2**64 - 1):
        expected = [str(indices[int.from_bytes(_draw_digest(seed, k)[:8], "big") % len(indices)]) for k in range(20)]
        assert taskset.draw(seed, 20) == expected


def _draw_digest(seed: int, k: int) -> bytes:
    return hashlib.sha256(b"proofpool/draw/v1" + seed.to_bytes(32, "big") + k.to_bytes(8, "big")).digest()


@pytest.mark.parametrize(("indices", "held_out"), [([1, 2, 3], 1), (list(range(40)), 11), (list(range(40)), -1)])
def test_a_slice_that_leaves_too_little_to_train_on_is_refused(
    tokenizer: Any, indices: list[int], held_out: int
) -> None:
    with pytest.raises(ValueError, match=r"at most \d+ .a quarter. may be held out"):
        _taskset(tokenizer, indices, held_out=held_out)


def test_a_quarter_of_the_pool_may_be_held_out(tokenizer: Any) -> None:
    taskset = _taskset(tokenizer, list(range(40)), held_out=10)
    assert len(taskset.training) == 30


@pytest.mark.parametrize(("problems", "held_out"), [(4, 0), (9, 0), (180, 18), (2_430, 243), (100_000, 256)])
def test_the_default_slice_is_a_tenth_up_to_256(problems: int, held_out: int) -> None:
    assert default_held_out(problems) == held_out


def test_a_foreign_id_is_still_refused(tokenizer: Any) -> None:
    taskset = _taskset(tokenizer, list(range(40)), held_out=4)
    with pytest.raises(InvalidProblemId):
        taskset.index("41")
