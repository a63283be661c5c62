"""Pools whose scores depend on the machine (`reproducible_scores` False, the `code` environment):
the validator's judgement is authoritative, and the trainer trains on it.

The validator does not reject a file over a reward there, but still holds the file's advantages
to its own claimed rewards and judges every row (`judge_rows`); the pipeline stores the
judgements beside the file (`judged_key`); the trainer drops `inconclusive` rows, takes the
validator's rewards and recomputes advantages (`apply_judgements`). The real code environment's
statuses feeding this are in tests/environments/test_code.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import pytest
from proofpool.trainer.data import apply_judgements
from proofpool.validator.checks import SubmissionFacts, Verdict
from proofpool.validator.checks.facts import NO_TASKS
from proofpool.validator.checks.scoring import check_scoring, judge_rows, reproducible_scores
from proofpool.validator.pipeline import record_judgements

from proofpool.core.environment import InvalidProblemId, Score
from proofpool.core.rl.advantages import group_advantages
from proofpool.core.rollout import RolloutFileMeta, RolloutSample, rollouts_bytes
from proofpool.envs.tokenized import TokenizedTaskset
from proofpool.infra.storage import (
    JudgedRow,
    JudgementsError,
    judged_document,
    judged_key,
    read_judged,
    rollout_key,
)

NODE = "0x976EA74026E726554dB657fA54763abd0C3a0aa9"
VALIDATOR = "0x" + "cd" * 20
POOL = 3
PROMPT = (1, 2)
RIGHT, WRONG, CLOSE_CALL = (5,), (7,), (6,)
"""Completions the fake task set judges correct (1.0), incorrect (0.0) and inconclusive (0.0)."""


class FakeTaskset:
    """Problems `p0`, `p1`; a judgement by completion (see RIGHT, WRONG, CLOSE_CALL)."""

    def __init__(self, reproducible: bool | None) -> None:
        if reproducible is not None:
            self.reproducible_scores = reproducible
        self.judged: list[tuple[str, tuple[int, ...]]] = []

    def draw(self, seed: int, count: int) -> list[str]:
        return ["p0"] * count

    def held_out(self, count: int) -> list[str]:
        return []

    def prompt_tokens(self, problem_id: str) -> tuple[int, ...]:
        if problem_id not in ("p0", "p1"):
            raise InvalidProblemId(problem_id)
        return PROMPT

    def judge(self, problem_id: str, completion_tokens: Sequence[int]) -> Score:
        self.judged.append((problem_id, tuple(completion_tokens)))
        if tuple(completion_tokens) == RIGHT:
            return Score(1.0, "correct")
        if tuple(completion_tokens) == CLOSE_CALL:
            return Score(0.0, "inconclusive", "finished within 10% of a limit")
        return Score(0.0, "incorrect")

    def score(self, problem_id: str, completion_tokens: Sequence[int]) -> float:
        return self.judge(problem_id, completion_tokens).reward


def rows(layout: Sequence[tuple[str, int, tuple[int, ...], float]]) -> list[RolloutSample]:
    """Rows of (problem id, group id, completion, claimed reward), advantages of the claimed rewards."""
    advantages = group_advantages([r for *_, r in layout], [g for _, g, _, _ in layout])
    return [
        RolloutSample(
            problem_id=p,
            group_id=g,
            prompt_tokens=PROMPT,
            completion_tokens=c,
            reward=r,
            advantage=a,
            sampling_seed=1,
            temperature=1.0,
            model_version=0,
            proofs=b"",
        )
        for (p, g, c, r), a in zip(layout, advantages, strict=True)
    ]


# Group 0 claims 1.0 for a completion the validator judges a close call; group 1 is as judged.
CLAIMED = [
    ("p0", 0, RIGHT, 1.0),
    ("p0", 0, CLOSE_CALL, 1.0),
    ("p0", 0, WRONG, 0.0),
    ("p1", 1, RIGHT, 1.0),
    ("p1", 1, WRONG, 1.0),
    ("p1", 1, WRONG, 0.0),
]


def facts(samples: Sequence[RolloutSample]) -> SubmissionFacts:
    units = sum(len(s.completion_tokens) for s in samples)
    return SubmissionFacts(POOL, hashlib.sha256(b"file").digest(), NODE, units, 0)


# --- The validator ---------------------------------------------------------------------------


def test_reproducibility_is_an_optional_attribute_defaulting_to_true() -> None:
    assert reproducible_scores(FakeTaskset(None)) is True
    assert reproducible_scores(FakeTaskset(True)) is True
    assert reproducible_scores(FakeTaskset(False)) is False
    assert reproducible_scores(NO_TASKS) is True


def test_a_tokenized_taskset_reports_its_environments_reproducibility() -> None:
    class Env:
        id = "fake"

        def __len__(self) -> int:
            return 4

    class CodeLike(Env):
        reproducible_scores = False

    assert TokenizedTaskset(Env(), None, frozenset({0})).reproducible_scores is True  # type: ignore[arg-type]
    assert TokenizedTaskset(CodeLike(), None, frozenset({0})).reproducible_scores is False  # type: ignore[arg-type]


def test_a_reproducible_task_set_still_rejects_a_reward_mismatch() -> None:
    samples = rows(CLAIMED)
    verdict = check_scoring(samples, facts(samples), FakeTaskset(None))
    assert verdict is not None and verdict.reason == "reward_mismatch"
    assert verdict.evidence == {"row": 1, "problem_id": "p0", "claimed": 1.0, "expected": 0.0}


def test_a_non_reproducible_task_set_accepts_a_reward_mismatch_and_judges_every_row() -> None:
    samples = rows(CLAIMED)
    taskset = FakeTaskset(False)
    assert check_scoring(samples, facts(samples), taskset) is None
    judged = judge_rows(samples, taskset)
    assert [(j.reward, j.status) for j in judged.judgements] == [
        (1.0, "correct"),
        (0.0, "inconclusive"),
        (0.0, "incorrect"),
        (1.0, "correct"),
        (0.0, "incorrect"),
        (0.0, "incorrect"),
    ]
    assert (judged.disagreements, judged.inconclusive) == (2, 1)  # rows 1 and 4 claimed 1.0
    assert judged.evidence() == {"judged_rows": 6, "reward_disagreements": 2, "inconclusive_rows": 1}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"advantage": 0.5}, "advantage_mismatch"),  # not its claimed reward minus the group's mean
        ({"problem_id": "p9"}, "bad_problem_id"),
        ({"prompt_tokens": (1, 3)}, "prompt_mismatch"),
        ({"problem_id": "p1"}, "group_mismatch"),
    ],
)
def test_a_non_reproducible_file_must_still_be_self_consistent(change: dict[str, Any], reason: str) -> None:
    samples = rows(CLAIMED)
    samples[2] = dataclasses.replace(samples[2], **change)
    verdict = check_scoring(samples, facts(samples), FakeTaskset(False))
    assert verdict is not None and verdict.reason == reason
    assert verdict.evidence["row"] == 2


def test_work_units_are_still_counted() -> None:
    samples = rows(CLAIMED)
    sub = dataclasses.replace(facts(samples), work_units=facts(samples).work_units + 1)
    verdict = check_scoring(samples, sub, FakeTaskset(False))
    assert verdict is not None and verdict.reason == "work_units_mismatch"


class FakeStore:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put_object(self, key: str, body: bytes, **_: Any) -> None:
        self.objects[key] = body


def test_the_pipeline_stores_the_judgements_beside_the_file_and_counts_them_in_the_evidence() -> None:
    samples = rows(CLAIMED)
    data = rollouts_bytes(RolloutFileMeta(POOL, NODE), samples)
    sub = dataclasses.replace(facts(samples), work_key=hashlib.sha256(data).digest())
    accepted = Verdict(accepted=True, reason=None, evidence={"batch": 4, "work_units": 6}, rows=6)
    store = FakeStore()
    verdict = record_judgements(store, sub, FakeTaskset(False), data, accepted, VALIDATOR)  # type: ignore[arg-type]
    assert verdict.evidence == {
        "batch": 4,
        "work_units": 6,
        "judged_rows": 6,
        "reward_disagreements": 2,
        "inconclusive_rows": 1,
    }
    key = judged_key(POOL, NODE, sub.work_key.hex())
    assert list(store.objects) == [key]
    judged = read_judged(store.objects[key], sub.work_key.hex())
    assert [(j.problem_id, j.group_id, j.reward, j.status) for j in judged] == [
        ("p0", 0, 1.0, "correct"),
        ("p0", 0, 0.0, "inconclusive"),
        ("p0", 0, 0.0, "incorrect"),
        ("p1", 1, 1.0, "correct"),
        ("p1", 1, 0.0, "incorrect"),
        ("p1", 1, 0.0, "incorrect"),
    ]


def test_a_task_set_that_cannot_judge_is_a_bug_not_a_verdict() -> None:
    class ScoreOnly:
        reproducible_scores = False

        def draw(self, seed: int, count: int) -> list[str]:
            return []

        def held_out(self, count: int) -> list[str]:
            return []

        def prompt_tokens(self, problem_id: str) -> tuple[int, ...]:
            return PROMPT

        def score(self, problem_id: str, completion_tokens: Sequence[int]) -> float:
            return 0.0

    samples = rows(CLAIMED)
    data = rollouts_bytes(RolloutFileMeta(POOL, NODE), samples)
    accepted = Verdict(accepted=True, reason=None)
    with pytest.raises(TypeError, match="no `judge`"):
        record_judgements(FakeStore(), facts(samples), ScoreOnly(), data, accepted, VALIDATOR)  # type: ignore[arg-type]


# --- The sidecar -----------------------------------------------------------------------------

JUDGED = (
    JudgedRow("p0", 0, 1.0, "correct"),
    JudgedRow("p0", 0, 0.0, "inconclusive"),
    JudgedRow("p1", 1, 0.0, "timeout"),
)
WORK_KEY = "ab" * 32


def test_the_judgements_live_beside_the_rollout_file() -> None:
    assert judged_key(POOL, NODE.lower(), WORK_KEY.upper()) == f"pools/{POOL}/rollouts/{NODE}/{WORK_KEY}.judged.json"
    assert judged_key(POOL, NODE, WORK_KEY).removesuffix(".judged.json") == rollout_key(
        POOL, NODE, WORK_KEY
    ).removesuffix(".parquet")


def test_judgements_round_trip_canonically() -> None:
    document = judged_document(WORK_KEY, VALIDATOR, JUDGED)
    assert read_judged(document, WORK_KEY) == JUDGED
    assert read_judged(document, WORK_KEY.upper()) == JUDGED
    assert document == judged_document(WORK_KEY.upper(), VALIDATOR.upper().replace("0X", "0x"), list(JUDGED))
    assert json.loads(document)["validator"].lower() == VALIDATOR


def _edited(**changes: Any) -> bytes:
    document = json.loads(judged_document(WORK_KEY, VALIDATOR, JUDGED))
    first_row = changes.pop("first_row", None)
    if first_row is not None:
        document["rows"][0].update(first_row)
    document.update(changes)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff not json", "not JSON"),
        (_edited(format=2), "format"),
        (_edited(file_sha256="cd" * 32), "of file"),
        (_edited(first_row={"status": "lucky"}), "status 'lucky'"),
        (_edited(first_row={"reward": 1.5}), "reward 1.5"),
        (_edited(first_row={"reward": True}), "reward True"),
        (_edited(first_row={"group_id": "0"}), "group id"),
        (_edited(rows="all fine"), "no list of rows"),
    ],
)
def test_a_malformed_judgements_document_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(JudgementsError, match=message):
        read_judged(data, WORK_KEY)


# --- The trainer -----------------------------------------------------------------------------


def test_the_trainer_drops_inconclusive_rows_takes_the_validators_rewards_and_recomputes_advantages() -> None:
    samples = rows(CLAIMED)
    judged = [JudgedRow(s.problem_id, s.group_id, j.reward, j.status) for s, j in _judged(samples)]
    trained = apply_judgements(samples, judged)
    assert [(s.problem_id, s.completion_tokens, s.reward) for s in trained] == [
        ("p0", RIGHT, 1.0),
        ("p0", WRONG, 0.0),  # the close call is gone
        ("p1", RIGHT, 1.0),
        ("p1", WRONG, 0.0),  # claimed 1.0
        ("p1", WRONG, 0.0),
    ]
    assert [s.advantage for s in trained] == pytest.approx([0.5, -0.5, 2 / 3, -1 / 3, -1 / 3])
    assert [s.advantage for s in trained] == group_advantages([1, 0, 1, 0, 0], [0, 0, 1, 1, 1])
    assert trained[0].proofs == samples[0].proofs and trained[0].prompt_tokens == PROMPT


def test_timeouts_and_errors_are_the_completions_fault_and_are_trained_on() -> None:
    samples = rows([("p0", 0, WRONG, 0.0), ("p0", 0, WRONG, 0.0), ("p0", 0, RIGHT, 1.0)])
    judged = [
        JudgedRow("p0", 0, 0.0, "timeout"),
        JudgedRow("p0", 0, 0.0, "error"),
        JudgedRow("p0", 0, 1.0, "correct"),
    ]
    assert [s.reward for s in apply_judgements(samples, judged)] == [0.0, 0.0, 1.0]


def test_rows_the_screen_dropped_leave_their_judgements_unused() -> None:
    samples = rows(CLAIMED)
    judged = [JudgedRow(s.problem_id, s.group_id, j.reward, j.status) for s, j in _judged(samples)]
    trained = apply_judgements(samples[3:], judged)  # group 0 refused by the screen
    assert [s.reward for s in trained] == [1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("judged", "message"),
    [
        (lambda j: j[:-1], "group 1 has more rows than judgements"),
        (lambda j: [*j, JudgedRow("p1", 1, 0.0, "incorrect")], "group 1 has 3 rows but 4 judgements"),
        (lambda j: [dataclasses.replace(j[0], problem_id="p1"), *j[1:]], "its judgement of 'p1'"),
    ],
)
def test_judgements_that_do_not_fit_the_rows_are_refused(judged: Any, message: str) -> None:
    samples = rows(CLAIMED)
    fitting = [JudgedRow(s.problem_id, s.group_id, j.reward, j.status) for s, j in _judged(samples)]
    with pytest.raises(JudgementsError, match=message):
        apply_judgements(samples, judged(fitting))


def _judged(samples: Sequence[RolloutSample]) -> list[tuple[RolloutSample, Score]]:
    taskset = FakeTaskset(False)
    return list(zip(samples, judge_rows(samples, taskset).judgements, strict=True))
