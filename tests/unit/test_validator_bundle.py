"""Judging a bundle of rollout files (`proofpool.validator.checks.bundle`): each file with the single
file's checks, every file screened before any is recomputed, the first invalid file is the verdict.

Files are real rollout files answering the node's assigned batches, built as the cheap-check tests
build them (`tests/unit/test_validator_checks.py`: right rewards, advantages and prompts, placeholder
proofs). The recomputation is not run here (the model checks are in
`tests/integration/test_validator_bundles.py`): a model loader that raises `Recomputing` shows
exactly when a judge would start recomputing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from proofpool.validator.checks import PoolRules, SubmissionFacts, Verdict, run_checks
from proofpool.validator.checks.bundle import KEEP_PARSED_BYTES, bundle_facts, claim_batches, judge_bundle
from proofpool.validator.checks.verdict import reject
from proofpool_arithmetic import ENVIRONMENT

from proofpool.core.rollout import RolloutFileError, RolloutFileMeta, RolloutSample, read_rollouts, rollouts_bytes
from proofpool.core.rollout.io import rollouts_table
from tests.fixtures.arithmetic_rows import honest_rows

TASKS = ENVIRONMENT.taskset
NODE = "0x" + "ab" * 20
POOL_ID = 7
VERSION = 3
PROBLEMS = 3
GROUP_SIZE = 4
META = RolloutFileMeta(pool_id=POOL_ID, node=NODE)
RULES = PoolRules.of(
    ENVIRONMENT, latest_version=VERSION, batch_size=PROBLEMS, group_size=GROUP_SIZE, last_issued_batch=7
)
BUNDLE_KEY = hashlib.sha256(b"the bundle key").digest()


class Recomputing(Exception):
    """Raised by the test's model loader: the judge asked for the checkpoint to recompute a file."""


def batch_rows(batch: int) -> list[RolloutSample]:
    """An honest file's rows for the node's batch `batch` (`tests/fixtures/arithmetic_rows.py`)."""
    return honest_rows(POOL_ID, NODE, VERSION, batch, problems=PROBLEMS, group_size=GROUP_SIZE)


def flip_reward(rows: list[RolloutSample]) -> list[RolloutSample]:
    """A cheat the scoring checks catch without a model: row 5's reward flipped."""
    rows[5] = dataclasses.replace(rows[5], reward=1.0 - rows[5].reward)
    return rows


@dataclasses.dataclass
class Store:
    """The files of one bundle by key, and every fetch in order (file keys)."""

    files: dict[bytes, bytes | Verdict]
    fetched: list[bytes] = dataclasses.field(default_factory=list)
    not_yet: set[bytes] = dataclasses.field(default_factory=set)

    def fetch(self, facts: SubmissionFacts) -> bytes | Verdict:
        self.fetched.append(facts.work_key)
        if facts.work_key in self.not_yet:
            raise NotYet(facts.work_key.hex())
        return self.files[facts.work_key]


class NotYet(Exception):
    """The test store's 'not uploaded yet' (the pipeline's `FileNotYetAvailable`)."""


@dataclasses.dataclass
class Bundle:
    files: tuple[SubmissionFacts, ...]
    store: Store

    def key(self, index: int) -> bytes:
        return self.files[index].work_key

    def index_of(self, data: bytes) -> int:
        """Where the file `data` landed in the bundle's (ascending key) order."""
        return next(i for i, f in enumerate(self.files) if self.store.files[f.work_key] == data)

    def judge(self, model: Callable[[int], Any] | None = None, **kwargs: Any) -> Verdict:
        kwargs.setdefault("sample_rate", 0.0 if model is None else 1.0)
        verdict = judge_bundle(self.files, self.store.fetch, RULES, model, not_yet=(NotYet,), **kwargs)
        json.dumps(verdict.evidence, allow_nan=False)  # strict JSON, always
        return verdict


def bundle(*contents: bytes) -> Bundle:
    """The bundle of files `contents` in canonical (ascending key) order, each with its honest units."""
    entries = []
    for data in contents:
        key = hashlib.sha256(data).digest()
        units = sum(len(r.completion_tokens) for r in _rows_of(data))
        entries.append((key, units, data))
    entries.sort()
    files = bundle_facts(POOL_ID, NODE, VERSION, [(k, u) for k, u, _ in entries])
    return Bundle(files, Store({k: d for k, _, d in entries}))


def _rows_of(data: bytes) -> Sequence[RolloutSample]:
    try:
        return read_rollouts(data)[1]
    except (RolloutFileError, pa.ArrowException, OSError, ValueError):  # not a rollout file: no units to count
        return []


def reencoded(rows: Sequence[RolloutSample]) -> bytes:
    """The same rows in other bytes (two row groups), as the devnet's `replay` cheat writes them
    (`proofpool.devnet.adversary.reencode`, which imports the worker and vLLM)."""
    sink = io.BytesIO()
    pq.write_table(rollouts_table(META, rows), sink, row_group_size=len(rows) - 1, use_dictionary=False)
    return sink.getvalue()


def honest(batch: int) -> bytes:
    return rollouts_bytes(META, batch_rows(batch))


def recompute_log() -> tuple[list[int], Callable[[int], Any]]:
    """A model loader that records the version asked for and raises `Recomputing`."""
    asked: list[int] = []

    def load(version: int) -> Any:
        asked.append(version)
        raise Recomputing(version)

    return asked, load


def test_a_bundle_of_honest_files_is_accepted_with_a_summary_per_file() -> None:
    b = bundle(honest(0), honest(1), honest(2))
    verdict = b.judge()
    assert verdict.accepted, verdict.evidence
    rows = PROBLEMS * GROUP_SIZE
    assert (verdict.rows, verdict.checked_rows, verdict.checked_tokens) == (3 * rows, 0, 0)
    evidence = verdict.evidence
    assert evidence["bundle_files"] == 3
    assert evidence["work_units"] == sum(f.work_units for f in b.files)
    assert [f["file_key"] for f in evidence["files"]] == [f.work_key.hex() for f in b.files]
    assert sorted(f["batch"] for f in evidence["files"]) == [0, 1, 2]
    for summary, facts in zip(evidence["files"], b.files, strict=True):
        assert (summary["rows"], summary["checked_rows"], summary["work_units"]) == (rows, 0, facts.work_units)
        assert "file_statistic" not in summary  # per-file summaries only: the document stays small
    # each file got exactly the verdict it gets alone
    for facts in b.files:
        alone = run_checks(b.store.files[facts.work_key], facts, RULES, None, sample_rate=0)  # type: ignore[arg-type]
        assert alone.accepted and alone.rows == rows


def test_judging_stops_at_the_first_invalid_file_and_names_it() -> None:
    b = bundle(honest(0), rollouts_bytes(META, flip_reward(batch_rows(1))), b"PAR1 not a parquet file")
    first_bad = min(i for i in range(3) if i != b.index_of(honest(0)))
    verdict = b.judge()
    alone = run_checks(b.store.files[b.key(first_bad)], b.files[first_bad], RULES, None, sample_rate=0)  # type: ignore[arg-type]
    assert (verdict.accepted, verdict.reason) == (False, alone.reason)
    assert verdict.evidence == {
        **alone.evidence,
        "file_key": b.key(first_bad).hex(),
        "file_index": first_bad,
        "bundle_files": 3,
    }
    assert verdict.rows == alone.rows
    assert b.store.fetched == [f.work_key for f in b.files[: first_bad + 1]]  # nothing after it was fetched


def test_every_file_is_screened_before_any_is_recomputed() -> None:
    """A file the scoring checks reject costs no recomputation of the good files before it."""
    tampered = rollouts_bytes(META, flip_reward(batch_rows(2)))
    b = bundle(honest(0), honest(1), tampered)
    bad = b.index_of(tampered)
    asked, load = recompute_log()
    verdict = b.judge(load)
    assert (verdict.reason, verdict.evidence["file_index"], verdict.evidence["row"]) == ("reward_mismatch", bad, 5)
    assert asked == []  # rejected while screening: the model was never asked for

    good = bundle(honest(0), honest(1), honest(2))
    asked, load = recompute_log()
    with pytest.raises(Recomputing):
        good.judge(load)
    assert asked == [VERSION]
    assert good.store.fetched == [f.work_key for f in good.files]  # all screened, then the first recomputed


def test_files_beyond_the_memory_budget_are_fetched_again_for_the_recomputation() -> None:
    b = bundle(honest(0), honest(1))
    with pytest.raises(Recomputing):
        b.judge(recompute_log()[1], keep_bytes=0)
    assert b.store.fetched == [b.key(0), b.key(1), b.key(0)]  # file 0 parsed again for its turn
    kept = bundle(honest(0), honest(1))
    with pytest.raises(Recomputing):
        kept.judge(recompute_log()[1], keep_bytes=KEEP_PARSED_BYTES)
    assert kept.store.fetched == [kept.key(0), kept.key(1)]


def test_two_files_of_one_batch_in_a_bundle_are_a_duplicate() -> None:
    rows = batch_rows(4)
    b = bundle(honest(0), rollouts_bytes(META, rows), reencoded(rows))
    indexes = sorted(i for i in range(3) if i != b.index_of(honest(0)))
    verdict = b.judge()
    assert (verdict.accepted, verdict.reason) == (False, "duplicate_batch")
    assert verdict.evidence == {
        "batch": 4,
        "model_version": VERSION,
        "first_work_key": b.key(indexes[0]).hex(),
        "file_key": b.key(indexes[1]).hex(),
        "file_index": indexes[1],
        "bundle_files": 3,
    }


def test_an_accepted_bundle_claims_every_files_batch_and_a_taken_batch_is_a_duplicate() -> None:
    """`claim_batches` with the claim rule of `batch_claims` (the first key to claim a batch holds it):
    a file accepted in one bundle is a duplicate when it comes again in another bundle, or alone."""
    claims: dict[int, bytes] = {}

    def claim_for(key: bytes) -> Callable[[int], bytes]:
        return lambda batch: claims.setdefault(batch, key)

    first = bundle(honest(0), honest(1)).judge()
    assert claim_batches(BUNDLE_KEY, VERSION, first, claim_for(BUNDLE_KEY)) is first
    assert claims == {0: BUNDLE_KEY, 1: BUNDLE_KEY}
    assert claim_batches(BUNDLE_KEY, VERSION, first, claim_for(BUNDLE_KEY)) is first  # a redelivered task

    again = bundle(honest(2), honest(1))  # batch 1 again, in other company
    second_key = hashlib.sha256(b"another bundle").digest()
    verdict = claim_batches(second_key, VERSION, again.judge(), claim_for(second_key))
    index = again.index_of(honest(1))
    assert (verdict.accepted, verdict.reason) == (False, "duplicate_batch")
    assert verdict.evidence == {
        "batch": 1,
        "model_version": VERSION,
        "first_work_key": BUNDLE_KEY.hex(),
        "file_key": again.key(index).hex(),
        "file_index": index,
        "bundle_files": 2,
    }
    assert verdict.rows == PROBLEMS * GROUP_SIZE

    rejected = reject("reward_mismatch", 12)
    assert claim_batches(second_key, VERSION, rejected, claim_for(second_key)) is rejected  # only accepted work claims
    single = Verdict(accepted=True, reason=None, evidence={"batch": 9}, rows=12)
    assert claim_batches(second_key, VERSION, single, claim_for(second_key)) is single  # not a bundle's verdict


def test_a_file_not_uploaded_yet_is_waited_for_unless_another_file_is_invalid() -> None:
    b = bundle(honest(0), honest(1), honest(2))
    b.store.not_yet = {b.key(0)}
    with pytest.raises(NotYet):
        b.judge()
    assert b.store.fetched == [f.work_key for f in b.files]  # the others were screened meanwhile

    bad = bundle(honest(0), b"PAR1 not a parquet file")
    bad_index = bad.index_of(b"PAR1 not a parquet file")
    bad.store.not_yet = {bad.key(1 - bad_index)}
    verdict = bad.judge()
    assert (verdict.reason, verdict.evidence["file_index"]) == ("not_parquet", bad_index)


def test_a_file_judged_missing_or_too_large_makes_the_bundle_so() -> None:
    b = bundle(honest(0), honest(1))
    b.store.files[b.key(1)] = reject("missing", waited_seconds=301.0)
    verdict = b.judge()
    assert (verdict.reason, verdict.rows) == ("missing", 0)
    assert verdict.evidence == {"waited_seconds": 301.0, "file_key": b.key(1).hex(), "file_index": 1, "bundle_files": 2}


def test_a_file_whose_units_differ_from_the_event_is_rejected() -> None:
    b = bundle(honest(0), honest(1))
    b.files = (b.files[0], dataclasses.replace(b.files[1], work_units=b.files[1].work_units + 1))
    verdict = b.judge()
    assert (verdict.reason, verdict.evidence["file_index"]) == ("work_units_mismatch", 1)


def test_the_accepted_hook_sees_each_file_and_may_reject_one() -> None:
    b = bundle(honest(0), honest(1))
    seen: list[tuple[int, bytes]] = []

    def judged(index: int, facts: SubmissionFacts, verdict: Verdict) -> Verdict:
        seen.append((index, facts.work_key))
        return dataclasses.replace(verdict, evidence={**verdict.evidence, "judged_rows": verdict.rows})

    verdict = b.judge(accepted=judged)
    assert seen == [(0, b.key(0)), (1, b.key(1))]
    assert [f["judged_rows"] for f in verdict.evidence["files"]] == [12, 12]

    def vanished(index: int, facts: SubmissionFacts, verdict: Verdict) -> Verdict:
        return reject("missing", waited_seconds=0.0) if index == 1 else verdict

    verdict = b.judge(accepted=vanished)
    assert (verdict.reason, verdict.evidence["file_index"]) == ("missing", 1)


def test_an_empty_bundle_is_a_caller_mistake() -> None:
    with pytest.raises(ValueError, match="at least one file"):
        judge_bundle((), Store({}).fetch, RULES, None, sample_rate=0)
