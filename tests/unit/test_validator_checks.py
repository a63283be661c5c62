"""The validator's cheap checks (no model): each hostile file is rejected with its reason, never raises.

Files are built by hand through `proofpool.core.rollout` and judged at `sample_rate=0`, so TOPLOC and
the sampling check do not run (their proofs are placeholders) and no model is needed; the model
checks are in tests/integration/test_validator_checks_model.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proofpool.validator.checks import PoolRules, SubmissionFacts, Verdict, run_checks
from proofpool.validator.checks.assignment import BatchIndex
from proofpool.validator.checks.verdict import json_safe
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.task import Problem, problem_from_id
from proofpool_arithmetic.tokenizer import EOS_ID, VOCAB_SIZE

from proofpool.core.assignment import sampling_seed, task_ids
from proofpool.core.rl.advantages import group_advantages
from proofpool.core.rollout import ROLLOUT_SCHEMA, RolloutFileMeta, RolloutSample, rollouts_bytes
from proofpool.core.rollout.io import rollouts_table
from proofpool.core.rollout.schema import META_SCHEMA_VERSION, META_SPEC_SHA256
from tests.fixtures.arithmetic_rows import completion, honest_rows

TASKS = ENVIRONMENT.taskset

NODE = "0x" + "ab" * 20
POOL_ID = 7
VERSION = 3
META = RolloutFileMeta(pool_id=POOL_ID, node=NODE)
RULES = PoolRules.of(ENVIRONMENT, latest_version=VERSION, batch_size=3, group_size=4)
BATCH = 5
PROBLEMS = tuple(problem_from_id(task) for task in task_ids(TASKS, POOL_ID, NODE, VERSION, BATCH, 3))
"""The problems of the node's batch 5: honest files answer an assignment (`check_assignment`)."""
SEED = sampling_seed(POOL_ID, NODE, VERSION, BATCH)
OTHER_NODE = "0x" + "cd" * 20
NO_ASSIGNMENT = {"check_assignment": False}
"""For the scoring checks' own reasons: with the assignment checked, an id or group outside the
batch is `problem_not_assigned` before scoring runs."""
GROUP_SIZE = 4


def honest_samples() -> list[RolloutSample]:
    """Rows a worker could have written for batch `BATCH` (`tests/fixtures/arithmetic_rows.py`)."""
    return honest_rows(POOL_ID, NODE, VERSION, BATCH, problems=len(PROBLEMS), group_size=GROUP_SIZE)


def submission(data: bytes, samples: list[RolloutSample] | None = None, **changes: Any) -> SubmissionFacts:
    """What the chain records for `data`: its own hash, and the work units of `samples` (honest by default)."""
    units = sum(len(s.completion_tokens) for s in samples or honest_samples())
    facts = SubmissionFacts(POOL_ID, hashlib.sha256(data).digest(), NODE, units, VERSION)
    return dataclasses.replace(facts, **changes)


def cheap(data: bytes, sub: SubmissionFacts | None = None, rules: PoolRules = RULES) -> Verdict:
    """The verdict without recomputation; a loader that fails proves the model is never asked for."""

    def no_model(version: int) -> Any:
        raise AssertionError(f"model {version} loaded at sample_rate 0")

    verdict = run_checks(data, sub or submission(data), rules, no_model, sample_rate=0)
    json.dumps(verdict.evidence, allow_nan=False)  # strict JSON, always
    return verdict


def parquet_bytes(table: pa.Table, **options: Any) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, **options)
    return buffer.getvalue()


def with_column(name: str, values: pa.Array, meta: dict[bytes, bytes] | None = None) -> bytes:
    """The honest file with one column replaced or added (written by plain pyarrow)."""
    table = rollouts_table(META, honest_samples())
    columns = {n: table.column(n) for n in table.column_names} | {name: values}
    return parquet_bytes(pa.table(columns).replace_schema_metadata(meta or META.to_metadata()))


def tamper(change: Callable[[list[RolloutSample]], list[RolloutSample]]) -> bytes:
    return rollouts_bytes(META, change(honest_samples()))


def edit_row(row: int, **changes: Any) -> Callable[[list[RolloutSample]], list[RolloutSample]]:
    def change(samples: list[RolloutSample]) -> list[RolloutSample]:
        samples[row] = dataclasses.replace(samples[row], **changes)
        return samples

    return change


N_ROWS = len(PROBLEMS) * GROUP_SIZE


def test_honest_file_passes_the_cheap_checks_without_a_model() -> None:
    data = rollouts_bytes(META, honest_samples())
    verdict = cheap(data)
    assert verdict.accepted and verdict.reason is None
    assert (verdict.rows, verdict.checked_rows, verdict.checked_tokens) == (N_ROWS, 0, 0)
    assert verdict.evidence["recomputed"] is False
    assert verdict.evidence["work_units"] == submission(data).work_units
    assert verdict.evidence["batch"] == BATCH  # the pipeline claims it (one accepted file per batch)
    # A node address differing only in hex case is the same node.
    assert cheap(data, submission(data, node=NODE.upper().replace("0X", "0x"))).accepted
    # model=None is fine when nothing is recomputed
    assert run_checks(data, submission(data), RULES, None, sample_rate=0).accepted


def _mixed_group(samples: list[RolloutSample]) -> list[RolloutSample]:
    """Move the first row of group 1 into group 0: same rewards, but the group spans two problems."""
    moved = [dataclasses.replace(s, group_id=0) if i == GROUP_SIZE else s for i, s in enumerate(samples)]
    advantages = group_advantages([s.reward for s in moved], [s.group_id for s in moved])
    return [dataclasses.replace(s, advantage=a) for s, a in zip(moved, advantages, strict=True)]


def _other_prompt(samples: list[RolloutSample]) -> list[RolloutSample]:
    """Row 0 filed under its problem id but prompted with another problem that has the same answer."""
    samples[0] = dataclasses.replace(samples[0], prompt_tokens=tuple(Problem(30, 12).prompt_tokens()))
    return samples


HONEST = rollouts_bytes(META, honest_samples())
OTHER_NODE = "0x" + "cd" * 20
SPEC = hashlib.sha256(b"the pool spec").digest()
SPEC_FILE = rollouts_bytes(dataclasses.replace(META, spec_sha256=SPEC), honest_samples())
"""The honest rows in a file naming the spec `SPEC`."""

# (name, file bytes, submission changes, rules changes, reason, evidence that must be present)
HOSTILE: list[tuple[str, bytes, dict[str, Any], dict[str, Any], str, dict[str, Any]]] = [
    ("sha256 differs from the work key", HONEST, {"work_key": bytes(32)}, {}, "hash_mismatch", {}),
    ("larger than the pool allows", HONEST, {}, {"max_file_bytes": len(HONEST) - 1}, "file_too_large", {}),
    ("not Parquet", b"PAR1 certainly not a parquet file", {}, {}, "not_parquet", {}),
    ("empty object", b"", {}, {}, "not_parquet", {}),
    ("truncated Parquet", HONEST[:-9], {}, {}, "not_parquet", {}),
    ("extra column", with_column("logprobs", pa.array([0.5] * N_ROWS)), {}, {}, "extra_column", {}),
    (
        "reward as float64",
        with_column("reward", pa.array([0.0] * N_ROWS, pa.float64())),
        {},
        {},
        "wrong_type",
        {},
    ),
    (
        "no metadata",
        with_column("reward", pa.array([0.0] * N_ROWS, pa.float32()), meta={b"x": b"y"}),
        {},
        {},
        "missing_metadata",
        {},
    ),
    (
        "schema version 3",
        with_column(
            "reward", pa.array([0.0] * N_ROWS, pa.float32()), {**META.to_metadata(), META_SCHEMA_VERSION: b"3"}
        ),
        {},
        {},
        "wrong_schema_version",
        {},
    ),
    (
        "schema version 1 (before the spec hash)",
        with_column(
            "reward",
            pa.array([0.0] * N_ROWS, pa.float32()),
            {k: v for k, v in META.to_metadata().items() if k != META_SPEC_SHA256} | {META_SCHEMA_VERSION: b"1"},
        ),
        {},
        {},
        "wrong_schema_version",
        {
            "detail": "1, expected 2 (version 1 files predate the pool spec hash, proofpool.spec_sha256: "
            "regenerate the file)"
        },
    ),
    (
        "spec hash in the metadata is not hex",
        with_column(
            "reward", pa.array([0.0] * N_ROWS, pa.float32()), {**META.to_metadata(), META_SPEC_SHA256: b"spec"}
        ),
        {},
        {},
        "bad_metadata",
        {},
    ),
    (
        "null reward",
        with_column("reward", pa.array([None] + [0.0] * (N_ROWS - 1), pa.float32())),
        {},
        {},
        "null_value",
        {},
    ),
    ("metadata names another node", HONEST, {"node": OTHER_NODE}, {}, "metadata_mismatch", {"field": "node"}),
    ("metadata names another pool", HONEST, {"pool_id": POOL_ID + 1}, {}, "metadata_mismatch", {"field": "pool_id"}),
    (
        "no spec hash in a spec pool's file",
        HONEST,
        {},
        {"spec_sha256": SPEC},
        "spec_mismatch",
        {"file": "00" * 32, "pool": SPEC.hex()},
    ),
    (
        "a spec hash in a file of a pool without spec",
        SPEC_FILE,
        {},
        {},
        "spec_mismatch",
        {"file": SPEC.hex(), "pool": "00" * 32},
    ),
    (
        "another spec's hash",
        SPEC_FILE,
        {},
        {"spec_sha256": hashlib.sha256(b"another spec").digest()},
        "spec_mismatch",
        {"file": SPEC.hex()},
    ),
    ("no rows", rollouts_bytes(META, []), {"work_units": 0}, {}, "row_count", {"max_rows": 4096}),
    ("more rows than allowed", HONEST, {}, {"max_rows": N_ROWS - 1}, "row_count", {"max_rows": N_ROWS - 1}),
    (
        "token id = vocabulary size",
        tamper(edit_row(5, completion_tokens=(VOCAB_SIZE, EOS_ID))),
        {},
        {},
        "token_out_of_range",
        {"row": 5, "column": "completion_tokens", "token": VOCAB_SIZE},
    ),
    (
        "negative prompt token",
        tamper(edit_row(2, prompt_tokens=(1, -3, 4))),
        {},
        {},
        "token_out_of_range",
        {"row": 2, "column": "prompt_tokens", "token": -3},
    ),
    (
        "empty completion",
        tamper(edit_row(1, completion_tokens=())),
        {},
        {},
        "length_out_of_range",
        {"row": 1, "column": "completion_tokens", "length": 0},
    ),
    (
        "completion over budget",
        tamper(edit_row(3, completion_tokens=(5,) * 9)),
        {},
        {},
        "length_out_of_range",
        {"row": 3, "length": 9, "max": 8},
    ),
    (
        "empty prompt",
        tamper(edit_row(0, prompt_tokens=())),
        {},
        {},
        "length_out_of_range",
        {"row": 0, "column": "prompt_tokens"},
    ),
    (
        "temperature NaN",
        tamper(edit_row(4, temperature=float("nan"))),
        {},
        {},
        "temperature_mismatch",
        {"row": 4, "temperature": "nan"},
    ),
    ("temperature 0", tamper(edit_row(4, temperature=0.0)), {}, {}, "temperature_mismatch", {"row": 4}),
    ("temperature 1e-30", tamper(edit_row(0, temperature=1e-30)), {}, {}, "temperature_mismatch", {}),
    ("temperature 100", tamper(edit_row(7, temperature=100.0)), {}, {}, "temperature_mismatch", {"row": 7}),
    (
        "every row colder than the pool, within the old accepted range",
        tamper(lambda rows: [dataclasses.replace(s, temperature=0.5) for s in rows]),
        {},
        {},
        "temperature_mismatch",
        {"row": 0, "temperature": 0.5, "pool_temperature": 1.0},
    ),
    (
        "one row hotter than the pool",
        tamper(edit_row(9, temperature=1.25)),
        {},
        {},
        "temperature_mismatch",
        {"row": 9, "pool_temperature": 1.0},
    ),
    (
        "padding after EOS",
        tamper(edit_row(2, completion_tokens=(*completion(PROBLEMS[0], True), 5, 5))),
        {},
        {},
        "eos_mismatch",
        {"row": 2, "first_eos": 2},
    ),
    (
        "a completion cut short of its EOS",
        tamper(edit_row(1, completion_tokens=completion(PROBLEMS[0], True)[:-1])),
        {},
        {},
        "eos_mismatch",
        {"row": 1, "first_eos": None, "max_tokens": 8},
    ),
    (
        "a completion without EOS that did not hit the budget",
        tamper(edit_row(3, completion_tokens=(5, 6, 7))),
        {},
        {},
        "eos_mismatch",
        {"row": 3, "length": 3},
    ),
    (
        "a row without proofs",
        tamper(edit_row(5, proofs=b"")),
        {},
        {},
        "proof_count_mismatch",
        {"row": 5, "proof_bytes": 0, "expected_bytes": 258},
    ),
    (
        "an extra proof",
        tamper(edit_row(6, proofs=bytes(516))),
        {},
        {},
        "proof_count_mismatch",
        {"row": 6, "proof_bytes": 516, "expected_bytes": 258},
    ),
    (
        "a proof cut short",
        tamper(edit_row(7, proofs=bytes(257))),
        {},
        {},
        "proof_count_mismatch",
        {"row": 7, "proof_bytes": 257},
    ),
    (
        "a row of another model version",
        tamper(edit_row(6, model_version=VERSION - 1)),
        {},
        {},
        "model_version_mismatch",
        {"row": 6, "file": VERSION - 1, "submission": VERSION},
    ),
    (
        "submitted version newer than the chain's latest",
        HONEST,
        {},
        {"latest_version": VERSION - 1},
        "unknown_model_version",
        {"latest_version": VERSION - 1},
    ),
    (
        "submitted version older than the async window",
        HONEST,
        {},
        {"latest_version": VERSION + 3},
        "stale_model_version",
        {"oldest_accepted": VERSION + 1},
    ),
    (
        "problem id out of the task",
        tamper(edit_row(0, problem_id="add-100-1")),
        {},
        NO_ASSIGNMENT,
        "bad_problem_id",
        {"row": 0, "problem_id": "add-100-1"},
    ),
    (
        "problem id of a huge string",
        tamper(edit_row(0, problem_id="\u00e9" * 10_000)),
        {},
        NO_ASSIGNMENT,
        "bad_problem_id",
        {"row": 0},
    ),
    ("prompt of another problem", tamper(_other_prompt), {}, {}, "prompt_mismatch", {"row": 0}),
    (
        "reward claimed for a wrong answer",
        tamper(edit_row(0, reward=1.0)),  # row 0 of group 0 answers wrong ((0 + 0) % 3 == 0)
        {},
        {},
        "reward_mismatch",
        {"row": 0, "claimed": 1.0, "expected": 0.0},
    ),
    ("reward NaN", tamper(edit_row(1, reward=float("nan"))), {}, {}, "reward_mismatch", {"row": 1, "claimed": None}),
    (
        "group spans two problems",
        tamper(_mixed_group),
        {},
        NO_ASSIGNMENT,
        "group_mismatch",
        {"row": GROUP_SIZE, "group_id": 0},
    ),
    (
        "problem the batch does not have",
        tamper(edit_row(0, problem_id="add-100-1")),
        {},
        {},
        "problem_not_assigned",
        {"row": 0, "batch": BATCH, "group": 0, "problem_id": "add-100-1", "assigned": PROBLEMS[0].problem_id},
    ),
    ("group holding another problem", tamper(_mixed_group), {}, {}, "group_layout", {"row": GROUP_SIZE}),
    (
        "groups numbered from 1",
        tamper(lambda rows: [dataclasses.replace(s, group_id=s.group_id + 1) for s in rows]),
        {},
        {},
        "group_layout",
        {"batch": BATCH, "row": 0, "group_id": 1, "expected_group_id": 0},
    ),
    (
        "the worst group dropped",
        tamper(lambda rows: rows[: 2 * GROUP_SIZE]),
        {},
        {},
        "group_layout",
        {"file_rows": 2 * GROUP_SIZE, "expected_rows": 3 * GROUP_SIZE, "batch_size": 3, "group_size": GROUP_SIZE},
    ),
    (
        "one-sample groups",
        tamper(lambda rows: [dataclasses.replace(s, group_id=i) for i, s in enumerate(rows[::GROUP_SIZE])]),
        {},
        {},
        "group_layout",
        {"file_rows": 3, "expected_rows": 3 * GROUP_SIZE},
    ),
    (
        "a group shrunk to the samples the node liked, another padded",
        tamper(lambda rows: [*rows[:3], *rows[4:], rows[-1]]),
        {},
        {},
        "group_layout",
        {"row": 3, "group_id": 1, "expected_group_id": 0},
    ),
    (
        "a batch the orchestrator has not handed out yet",
        HONEST,
        {},
        {"last_issued_batch": BATCH - 1},
        "seed_not_assigned",
        {"batches_searched": BATCH, "last_issued_batch": BATCH - 1},
    ),
    ("two seeds in one file", tamper(edit_row(5, sampling_seed=SEED ^ 1)), {}, {}, "seed_mismatch", {"row": 5}),
    (
        "seed of no batch of this node",
        tamper(lambda rows: [dataclasses.replace(s, sampling_seed=42) for s in rows]),
        {},
        {},
        "seed_not_assigned",
        {"seed": "42", "model_version": VERSION},
    ),
    (
        "batch of another node",
        tamper(
            lambda rows: [
                dataclasses.replace(s, sampling_seed=sampling_seed(POOL_ID, OTHER_NODE, VERSION, 0)) for s in rows
            ]
        ),
        {},
        {},
        "seed_not_assigned",
        {},
    ),
    (
        "advantage inflated",
        tamper(edit_row(2, advantage=0.9)),
        {},
        {},
        "advantage_mismatch",
        {"row": 2, "claimed": pytest.approx(0.9)},
    ),
    ("advantage NaN", tamper(edit_row(3, advantage=float("nan"))), {}, {}, "advantage_mismatch", {"row": 3}),
    ("work units inflated", HONEST, {"work_units": 1_000_000}, {}, "work_units_mismatch", {"claimed": 1_000_000}),
]


@pytest.mark.parametrize(
    ("data", "sub_changes", "rule_changes", "reason", "evidence"),
    [h[1:] for h in HOSTILE],
    ids=[h[0] for h in HOSTILE],
)
def test_hostile_file_is_rejected_with_reason(
    data: bytes, sub_changes: dict[str, Any], rule_changes: dict[str, Any], reason: str, evidence: dict[str, Any]
) -> None:
    rules = dataclasses.replace(RULES, **rule_changes)
    verdict = cheap(data, submission(data, **sub_changes), rules)
    assert (verdict.accepted, verdict.reason) == (False, reason), verdict.evidence
    assert verdict.evidence.items() >= evidence.items(), verdict.evidence
    assert verdict.checked_rows == 0


def test_a_file_naming_its_pools_spec_is_accepted() -> None:
    verdict = cheap(SPEC_FILE, rules=dataclasses.replace(RULES, spec_sha256=SPEC))
    assert verdict.accepted, verdict.evidence


def test_advantage_within_tolerance_is_accepted() -> None:
    """An advantage off by far less than the tolerance (another summation order) is not a cheat."""
    samples = honest_samples()
    data = tamper(edit_row(2, advantage=samples[2].advantage + 2e-6))
    assert cheap(data).accepted


def test_rejection_evidence_names_expected_and_claimed_values() -> None:
    data = HONEST
    verdict = cheap(data, submission(data, work_key=b"\x01" * 32))
    assert verdict.evidence == {"expected": "01" * 32, "actual": hashlib.sha256(data).hexdigest()}
    units = submission(data).work_units
    verdict = cheap(data, submission(data, work_units=units + 1))
    assert verdict.evidence == {"claimed": units + 1, "counted": units}
    assert verdict.rows == N_ROWS


def _one_row_table(completion: pa.Array, proofs: pa.Array, rows: int = 1) -> pa.Table:
    s = honest_samples()[0]
    columns: dict[str, Any] = {name: [getattr(s, name)] * rows for name in ROLLOUT_SCHEMA.names}
    columns["completion_tokens"], columns["proofs"] = completion, proofs
    arrays = {
        name: value if isinstance(value, pa.Array) else pa.array(value, ROLLOUT_SCHEMA.field(name).type)
        for name, value in columns.items()
    }
    return pa.Table.from_pydict(arrays, schema=ROLLOUT_SCHEMA.with_metadata(META.to_metadata()))


def test_run_length_bomb_is_rejected_from_the_footer() -> None:
    """A few KiB that decode to 5 million tokens in one row: refused before decoding, by the footer's counts."""
    n = 5_000_000
    completion = pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), pa.array(np.full(n, EOS_ID, np.int32)))
    data = parquet_bytes(_one_row_table(completion, pa.array([b""])), use_dictionary=True, compression="zstd")
    assert len(data) < 50_000
    verdict = cheap(data, submission(data, work_units=n))
    assert verdict.reason == "length_out_of_range"
    assert verdict.evidence == {"column": "completion_tokens", "footer_values": n, "max_values": 8}


def test_dictionary_bomb_is_rejected_from_the_footer() -> None:
    """64 rows sharing one 64 KiB proof through a dictionary page: 4 MiB decoded from a tiny file."""
    rows, blob = 64, bytes(range(256)) * 256
    table = _one_row_table(pa.array([[EOS_ID]] * rows, pa.list_(pa.int32())), pa.array([blob] * rows), rows)
    data = parquet_bytes(table, use_dictionary=["proofs"], compression="zstd")
    assert len(data) < len(blob) * 2
    small = dataclasses.replace(RULES, max_decoded_bytes=2**20)
    verdict = cheap(data, submission(data, work_units=rows), small)
    assert verdict.reason == "file_too_large"
    assert verdict.evidence["decoded_bytes_estimate"] >= rows * len(blob)
    # Under the default limit the same file is read and judged on its rows: a 64 KiB proof blob
    # for a one-token completion is not one 258-byte proof.
    assert cheap(data, submission(data, work_units=rows)).reason == "proof_count_mismatch"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(HONEST) - 1), st.integers(1, 255)), min_size=1, max_size=8))
def test_damaged_bytes_give_a_verdict_never_an_exception(flips: list[tuple[int, int]]) -> None:
    data = bytearray(HONEST)
    for position, mask in flips:
        data[position] ^= mask
    verdict = cheap(bytes(data))  # its own hash: the damage must be judged past check 1
    assert isinstance(verdict, Verdict)
    assert verdict.accepted or verdict.reason is not None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sample_rate": 1.5}, "sample_rate"),
        ({"sample_rate": -0.1}, "sample_rate"),
        ({"sample_rate": 0.5}, "selection_seed"),
        ({"sample_rate": 0.5, "selection_seed": b""}, "selection_seed"),
        ({"sample_rate": 1.0}, "model"),
    ],
)
def test_caller_mistakes_raise(kwargs: dict[str, Any], message: str) -> None:
    """Not the file's fault: a sample rate outside [0, 1], no seed to draw rows with, no model to recompute with."""
    with pytest.raises(ValueError, match=message):
        run_checks(HONEST, submission(HONEST), RULES, None, **kwargs)


def test_verdict_reason_fits_bytes32_and_agrees_with_accepted() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        Verdict(accepted=False, reason="a_reason_code_that_is_far_too_long_for_a_bytes32")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="snake_case"):
        Verdict(accepted=False, reason="Bad Reason")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="accepted"):
        Verdict(accepted=True, reason="hash_mismatch")
    with pytest.raises(ValueError, match="accepted"):
        Verdict(accepted=False, reason=None)


def test_every_reason_code_fits_bytes32() -> None:
    from typing import get_args

    from proofpool.validator.checks.verdict import Reason

    codes = [c for part in get_args(Reason) for c in get_args(part)]
    assert len(codes) == len(set(codes)) >= 30
    for code in codes:
        Verdict(accepted=False, reason=code)  # validates the format


def test_json_safe_replaces_non_finite_floats() -> None:
    assert json_safe({"a": float("inf"), "b": (1.5, float("nan")), 3: [2**64]}) == {
        "a": None,
        "b": [1.5, None],
        "3": [2**64],
    }


@pytest.mark.parametrize(
    "changes",
    [
        {"max_rows": 0},
        {"stop_token_ids": frozenset({VOCAB_SIZE})},
        {"stop_token_ids": frozenset()},
        {"temperature": 0.0},
        {"temperature": float("inf")},
        {"temperature": float("nan")},
        {"batch_size": 0},
        {"group_size": 4097},
        {"hidden_size": 0},
        {"last_issued_batch": -1},
    ],
)
def test_invalid_pool_rules_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        PoolRules.of(ENVIRONMENT, latest_version=0, **changes)


def test_batch_index_finds_batches_and_remembers_them_only_when_found() -> None:
    index = BatchIndex(limit=50, keys=2)
    seed_7 = sampling_seed(POOL_ID, NODE, VERSION, 7)
    assert index.find(POOL_ID, NODE, VERSION, seed_7) == 7
    assert index.find(POOL_ID, NODE.upper().replace("0X", "0x"), VERSION, seed_7) == 7  # hex case
    assert index.find(POOL_ID, NODE, VERSION, sampling_seed(POOL_ID, NODE, VERSION, 3)) == 3  # from memory
    assert index.find(POOL_ID, NODE, VERSION, sampling_seed(POOL_ID, NODE, VERSION, 30)) == 30  # extends
    assert index.find(POOL_ID, NODE, VERSION, sampling_seed(POOL_ID, NODE, VERSION, 50)) is None  # past the limit
    assert index.find(POOL_ID, NODE, VERSION + 1, seed_7) is None  # seeds are per version
    assert index.find(POOL_ID, OTHER_NODE, VERSION, seed_7) is None  # and per node
    assert index.find(POOL_ID, NODE, VERSION, seed_7) == 7  # still right after the LRU evicted its entry


class _MachineDependent:
    """The arithmetic task set as a pool whose scores depend on the machine (the `code` environment's
    `reproducible_scores = False`)."""

    reproducible_scores = False

    def __getattr__(self, name: str) -> Any:
        return getattr(TASKS, name)


def _claims_one_reward_too_many() -> bytes:
    """The honest file with row 0's reward flipped and its group's advantages made to match."""
    samples = honest_samples()
    samples[0] = dataclasses.replace(samples[0], reward=1.0 - samples[0].reward)
    advantages = group_advantages([s.reward for s in samples], [s.group_id for s in samples])
    return rollouts_bytes(META, [dataclasses.replace(s, advantage=a) for s, a in zip(samples, advantages, strict=True)])


def test_without_reproducible_scores_a_reward_mismatch_is_not_a_rejection() -> None:
    data = _claims_one_reward_too_many()
    assert cheap(data).reason == "reward_mismatch"
    rules = dataclasses.replace(RULES, taskset=_MachineDependent())
    assert cheap(data, rules=rules).accepted


def test_without_reproducible_scores_advantages_still_follow_the_claimed_rewards() -> None:
    rules = dataclasses.replace(RULES, taskset=_MachineDependent())
    data = tamper(edit_row(0, reward=1.0 - honest_samples()[0].reward))  # advantages left as they were
    verdict = cheap(data, rules=rules)
    assert (verdict.reason, verdict.evidence["row"]) == ("advantage_mismatch", 0)
