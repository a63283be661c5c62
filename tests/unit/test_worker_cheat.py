"""The cheating worker's file transforms (no vLLM, no chain): each cheat yields a file that the
validator's cheap checks accept (schema, bounds, rewards, advantages, work units), so only the check
meant for it can catch it; `stale-version` is the exception, caught by the version window alone.

Files are judged with `run_checks` at `sample_rate=0` (placeholder proofs, no model): what is
asserted here is that the cheats are self-consistent, not that TOPLOC or sampling catch them (that
is tests/integration/test_worker_cheat.py, with real processes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from proofpool.devnet.adversary import (
    STALE_VERSION,
    Cheater,
    CheatMode,
    claimed_version,
    correct_completion,
    edit_to_correct_answers,
    reencode,
    restamp_version,
)
from proofpool.validator.checks import PoolRules, SubmissionFacts, Verdict, run_checks
from proofpool.worker.journal import BatchState, JournalEntry
from proofpool.worker.rollout import RolloutFile, work_units
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.task import Problem, problem_from_id, reward
from proofpool_arithmetic.tokenizer import EOS_ID, decode_tokens, encode_text

from proofpool.core.assignment import sampling_seed, task_ids
from proofpool.core.rl.advantages import group_advantages
from proofpool.core.rollout import RolloutFileMeta, RolloutSample, read_rollouts, rollouts_bytes
from proofpool.infra.http.node_api import Assignment

TASKS = ENVIRONMENT.taskset

NODE = "0x" + "cd" * 20
POOL_ID = 3
VERSION = 4
META = RolloutFileMeta(POOL_ID, NODE)
PROBLEMS = (Problem(12, 30), Problem(5, 7), Problem(99, 99), Problem(0, 0))
BATCH = 1
GROUP_SIZE = 4
MAX_TOKENS = 8


def generated_rows(
    version: int = VERSION, problems: tuple[Problem, ...] = PROBLEMS, seed: int = 1234
) -> list[RolloutSample]:
    """What an honest worker writes: row i with sample index i, some answers wrong, distinct proofs
    (fixed problems the edit tests rely on, not an assignment's: see `assigned_rows`)."""
    rows: list[RolloutSample] = []
    for g, problem in enumerate(problems):
        for i in range(GROUP_SIZE):
            answer = problem.answer if (i + g) % 3 else problem.answer + 1 + i
            completion = (*encode_text(str(answer)), EOS_ID)
            index = len(rows)
            rows.append(
                RolloutSample(
                    problem_id=problem.problem_id,
                    group_id=g,
                    prompt_tokens=tuple(problem.prompt_tokens()),
                    completion_tokens=completion,
                    reward=reward(problem, completion),
                    advantage=0.0,
                    sampling_seed=seed,
                    temperature=1.0,
                    model_version=version,
                    proofs=bytes([index]) * 258,
                )
            )
    advantages = group_advantages([r.reward for r in rows], [r.group_id for r in rows])
    return [dataclasses.replace(r, advantage=a) for r, a in zip(rows, advantages, strict=True)]


def assigned_rows(version: int = VERSION) -> list[RolloutSample]:
    """`generated_rows` for the node's batch 1 of `version`: its problems and its sampling seed."""
    problems = tuple(problem_from_id(t) for t in task_ids(TASKS, POOL_ID, NODE, version, BATCH, len(PROBLEMS)))
    return generated_rows(version, problems, sampling_seed(POOL_ID, NODE, version, BATCH))


def cheap_verdict(
    rows: list[RolloutSample], version: int = VERSION, latest: int = VERSION, *, assignment: bool = False
) -> Verdict:
    """The validator's verdict on `rows` submitted as a file claiming `version`, without recomputation
    (and without the assignment check unless asked: `generated_rows` answers no assignment)."""
    data = rollouts_bytes(META, rows)
    sub = SubmissionFacts(POOL_ID, hashlib.sha256(data).digest(), NODE, work_units(rows), version)
    rules = PoolRules.of(
        ENVIRONMENT,
        latest_version=latest,
        check_assignment=assignment,
        max_completion_tokens=MAX_TOKENS,
        batch_size=len(PROBLEMS),
        group_size=GROUP_SIZE,
    )
    return run_checks(data, sub, rules, None, sample_rate=0)


def test_the_honest_fixture_is_accepted_and_has_wrong_answers_to_cheat_on() -> None:
    rows = generated_rows()
    assert cheap_verdict(rows).accepted
    assert 0 < sum(r.reward for r in rows) < len(rows)


def test_correct_completion_is_the_answer_then_eos() -> None:
    assert correct_completion(ENVIRONMENT, "add-99-99", MAX_TOKENS) == (*encode_text("198"), EOS_ID)
    assert decode_tokens(correct_completion(ENVIRONMENT, "add-3-4", MAX_TOKENS)) == "7"
    assert correct_completion(ENVIRONMENT, "add-99-99", 2) == tuple(encode_text("19"))  # cut at the budget


def test_edit_tokens_makes_every_answer_right_with_matching_rewards_and_advantages() -> None:
    honest = generated_rows()
    edited, changed = edit_to_correct_answers(ENVIRONMENT, honest, MAX_TOKENS)

    assert changed == sum(r.reward == 0.0 for r in honest) > 0
    assert [r.reward for r in edited] == [1.0] * len(honest)
    assert [r.advantage for r in edited] == [0.0] * len(honest)  # all-right groups: zero advantage
    for before, after in zip(honest, edited, strict=True):
        assert reward(after.problem_id, after.completion_tokens) == 1.0
        assert after.proofs == before.proofs  # the cheater cannot prove what the model did not produce
        assert (after.problem_id, after.group_id, after.prompt_tokens, after.model_version) == (
            before.problem_id,
            before.group_id,
            before.prompt_tokens,
            before.model_version,
        )
        if before.reward == 1.0:  # rows already right are left alone (their group's mean moved)
            assert after == dataclasses.replace(before, advantage=after.advantage)
    assert cheap_verdict(edited).accepted  # self-consistent: only TOPLOC or sampling can tell


def test_edit_tokens_recomputes_advantages_of_groups_it_cannot_make_all_right() -> None:
    honest = generated_rows()
    # A budget of 2 tokens cannot hold "198": the 99+99 group keeps a wrong row, so mixed rewards.
    edited, _ = edit_to_correct_answers(ENVIRONMENT, honest, 2)
    assert edited[9].completion_tokens == tuple(encode_text("19")) and edited[9].reward == 0.0
    assert {r.reward for r in edited[8:12]} == {0.0, 1.0}
    expected = group_advantages([r.reward for r in edited], [r.group_id for r in edited])
    assert [r.advantage for r in edited] == expected and any(expected)
    # Cut short of the pool's 8-token budget without EOS: the cheap checks see it on every row.
    assert cheap_verdict(edited).reason == "eos_mismatch"


def test_replay_keeps_the_rows_in_other_bytes_and_passes_the_per_file_checks() -> None:
    honest = assigned_rows()
    replayed = reencode(META, honest, 1)

    assert replayed.data != rollouts_bytes(META, honest)
    assert rows_of(replayed) == honest  # the same rows: only a claim of the batch can tell
    verdict = cheap_verdict(rows_of(replayed), assignment=True)
    assert verdict.accepted and verdict.evidence["batch"] == BATCH


def test_successive_replays_never_repeat_an_earlier_files_bytes() -> None:
    honest = generated_rows()
    files = {rollouts_bytes(META, honest)} | {reencode(META, honest, k).data for k in range(1, len(honest))}
    assert len(files) == len(honest)


def test_replay_needs_a_layout_other_than_the_original() -> None:
    for replay in (0, len(generated_rows())):
        with pytest.raises(ValueError):
            reencode(META, generated_rows(), replay)


def test_stale_version_claims_version_zero_whatever_is_assigned() -> None:
    assert STALE_VERSION == 0
    assert claimed_version(CheatMode.STALE_VERSION, 7) == 0
    assert all(claimed_version(m, 7) == 7 for m in CheatMode if m is not CheatMode.STALE_VERSION)
    assert claimed_version(None, 7) == 7
    stale = restamp_version(assigned_rows())
    assert {r.model_version for r in stale} == {0}

    # Inside the async window (2) the version passes, but the rows answer a batch of version 4.
    early = cheap_verdict(stale, version=0, latest=2, assignment=True)
    assert (early.reason, early.evidence["model_version"]) == ("seed_not_assigned", 0)
    late = cheap_verdict(stale, version=0, latest=3, assignment=True)
    assert (late.reason, late.evidence["oldest_accepted"]) == ("stale_model_version", 1)


# --- the hooks, with fakes for the engine and the resolver ---------------------------------------


def assignment(version: int = VERSION, batch: int = 0) -> Assignment:
    return Assignment(
        pool_id=POOL_ID,
        checkpoint_version=version,
        manifest_sha256=b"\x11" * 32 if version else None,
        checkpoint_uri=f"s3://bucket/pools/{POOL_ID}/checkpoints/{version}/" if version else None,
        batch=batch,
        task_ids=tuple(p.problem_id for p in PROBLEMS),
        sampling_seed=1234,
        group_size=GROUP_SIZE,
        max_tokens=MAX_TOKENS,
        temperature=1.0,
    )


def honest_file(version: int = VERSION) -> RolloutFile:
    rows = generated_rows(version)
    data = rollouts_bytes(META, rows)
    return RolloutFile(data, hashlib.sha256(data).digest(), work_units(rows), len(rows))


def rows_of(file: RolloutFile) -> list[RolloutSample]:
    assert hashlib.sha256(file.data).digest() == file.sha256
    _, rows = read_rollouts(file.data)
    assert file.work_units == work_units(rows) and file.samples == len(rows)
    return rows


def test_a_cheater_says_it_is_cheating(caplog: pytest.LogCaptureFixture) -> None:
    said: list[str] = []
    with caplog.at_level(logging.WARNING, logger="proofpool.devnet.adversary"):
        cheater = Cheater(CheatMode.EDIT_TOKENS, ENVIRONMENT, said.append)
        cheater.make_file(assignment(), META, honest_file)
    assert all("CHEATING (edit-tokens)" in line for line in said) and len(said) == 2
    assert "rewrote" in said[1]
    assert all("CHEATING (edit-tokens)" in r.getMessage() for r in caplog.records)


def test_stale_version_hooks_resolve_version_zero_and_claim_it_in_file_and_on_chain() -> None:
    cheater = Cheater(CheatMode.STALE_VERSION, ENVIRONMENT, lambda _line: None)
    asked: list[Assignment] = []

    def resolve(a: Assignment) -> Path:
        asked.append(a)
        return Path(f"/models/v{a.checkpoint_version}")

    assert cheater.model_path(assignment(version=5), resolve) == Path("/models/v0")
    assert (asked[0].checkpoint_version, asked[0].manifest_sha256, asked[0].checkpoint_uri) == (0, None, None)
    made = cheater.make_file(assignment(version=5), META, lambda: honest_file(version=5))
    assert {r.model_version for r in rows_of(made)} == {0}
    entry = JournalEntry(
        POOL_ID, 5, 0, made.sha256, made.work_units, made.samples, BatchState.WRITTEN, False, None, None
    )
    assert cheater.on_chain(entry).version == 0
    assert entry.version == 5  # the journal (and the heartbeat report) keep the assigned version


def test_replay_hook_is_honest_once_then_replays_without_generating() -> None:
    cheater = Cheater(CheatMode.REPLAY, ENVIRONMENT, lambda _line: None)
    generated = 0

    def generate() -> RolloutFile:
        nonlocal generated
        generated += 1
        return honest_file()

    first = cheater.make_file(assignment(batch=0), META, generate)
    assert first == honest_file()
    keys = [first.sha256]
    rows = len(rows_of(first))
    for batch in range(1, rows):  # rows - 1 replays, each in its own row-group layout
        replayed = cheater.make_file(assignment(batch=batch), META, generate)
        assert replayed.sha256 not in keys, f"replay {batch} repeats an earlier file: the contract would refuse it"
        keys.append(replayed.sha256)
        assert rows_of(replayed) == rows_of(first)
    assert generated == 1
    # Then the layouts start over (never back to the honest file): the contract refuses the repeat.
    again = cheater.make_file(assignment(batch=rows), META, generate)
    assert again.sha256 == keys[1]


@pytest.mark.parametrize("mode", [CheatMode.OTHER_MODEL, CheatMode.EDIT_TOKENS, CheatMode.REPLAY])
def test_only_stale_version_changes_the_version_sent_on_chain(mode: CheatMode) -> None:
    entry: Any = JournalEntry(POOL_ID, 5, 0, b"\x00" * 32, 1, 1, BatchState.WRITTEN, False, None, None)
    assert Cheater(mode, ENVIRONMENT, lambda _line: None).on_chain(entry) == entry


def test_the_cli_offers_the_cheat_modes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proofpool.cli.main", "worker", "run", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert "--cheat" in done.stdout
    assert all(m.value in done.stdout for m in CheatMode)
