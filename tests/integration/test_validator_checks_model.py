"""The validator's checks with the model: an honest file is accepted, each cheat is rejected with its reason.

No vLLM: honest rows are made as the worker makes them, with plain PyTorch in bf16 (the engine's
dtype; `tests/fixtures/pytorch_rows.py`). Validators recompute in bf16 or fp32 through `run_checks`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from proofpool.validator.checks import PoolRules, SubmissionFacts, Verdict, run_checks
from proofpool_arithmetic import ENVIRONMENT
from proofpool_arithmetic.build import ModelSpec, create_model
from proofpool_arithmetic.cache import ensure_devnet_model
from proofpool_arithmetic.task import problem_from_id
from proofpool_arithmetic.tokenizer import VOCAB

from proofpool.core.assignment import sampling_seed, task_ids
from proofpool.core.rollout import RolloutFileMeta, RolloutSample, read_rollouts, rollouts_bytes
from proofpool.core.sampling.verify import DEFAULT_TIE_TOLERANCE
from proofpool.inference import check
from proofpool.inference.check import spot_check_rows
from proofpool.inference.model import load_model
from tests.fixtures.pytorch_rows import proven_rows, sample_completions

TASKS = ENVIRONMENT.taskset

pytestmark = [pytest.mark.slow]

BATCH = 2
TEMPERATURE = 1.0
MAX_TOKENS = 8
GROUP_SIZE = 4
N_PROBLEMS = 8
N_ROWS = GROUP_SIZE * N_PROBLEMS
VERSION = 5
NODE = "0x" + "42" * 20
POOL_ID = 3
META = RolloutFileMeta(pool_id=POOL_ID, node=NODE)
SEED = sampling_seed(POOL_ID, NODE, VERSION, BATCH)
"""The files answer the node's batch 2 (its seed and problems), as validators require."""
RULES = PoolRules.of(
    ENVIRONMENT,
    latest_version=VERSION + 1,
    max_completion_tokens=MAX_TOKENS,
    batch_size=N_PROBLEMS,
    group_size=GROUP_SIZE,
)
PLUS_ID = VOCAB.index("+")
"""A token the warmed model never writes in an answer: an edit to it trails the sampled token by far."""
TOPLOC_OR_SAMPLING = {"toploc_exp_mismatch", "toploc_mantissa", "sampling_mismatch"}


def generate(model: Any, prompts: Sequence[Sequence[int]]) -> list[list[int]]:
    """What the worker's engine samples for `prompts` with this module's seed (`sample_completions`)."""
    return sample_completions(model, prompts, SEED, TEMPERATURE, MAX_TOKENS)


def build_rows(
    model: Any, prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], ids: Sequence[str]
) -> list[RolloutSample]:
    """Rows as the worker writes them, with `model`'s own final-norm states proving the tokens."""
    return proven_rows(
        model, prompts, completions, ids, seed=SEED, temperature=TEMPERATURE, version=VERSION, group_size=GROUP_SIZE
    )


@dataclasses.dataclass
class World:
    worker_model: Any
    validators: dict[str, Any]
    prompts: list[list[int]]
    ids: list[str]
    honest: list[RolloutSample]
    loads: list[int] = dataclasses.field(default_factory=list)

    def loader(self, precision: str = "bf16") -> Callable[[int], Any]:
        def load(version: int) -> Any:
            self.loads.append(version)
            assert version == VERSION
            return self.validators[precision]

        return load


@pytest.fixture(scope="module")
def world() -> World:
    path = ensure_devnet_model(progress=None)
    worker_model = load_model(path, "bf16")
    problems = [problem_from_id(t) for t in task_ids(TASKS, POOL_ID, NODE, VERSION, BATCH, N_PROBLEMS)]
    prompts = [p.prompt_tokens() for p in problems for _ in range(GROUP_SIZE)]
    ids = [p.problem_id for p in problems for _ in range(GROUP_SIZE)]
    honest = build_rows(worker_model, prompts, generate(worker_model, prompts), ids)
    _, read_back = read_rollouts(rollouts_bytes(META, honest))
    validators = {"bf16": load_model(path, "bf16"), "fp32": load_model(path, "fp32")}
    return World(worker_model, validators, prompts, ids, read_back)


def submit(samples: Sequence[RolloutSample], **changes: Any) -> tuple[bytes, SubmissionFacts]:
    data = rollouts_bytes(META, samples)
    units = sum(len(s.completion_tokens) for s in samples)
    sub = SubmissionFacts(META.pool_id, hashlib.sha256(data).digest(), NODE, units, VERSION)
    return data, dataclasses.replace(sub, **changes)


def judge(world: World, samples: Sequence[RolloutSample], precision: str = "bf16", **kwargs: Any) -> Verdict:
    sub_changes = kwargs.pop("sub", {})
    rules = kwargs.pop("rules", RULES)
    data, sub = submit(samples, **sub_changes)
    verdict = run_checks(data, sub, rules, world.loader(precision), **kwargs)
    json.dumps(verdict.evidence, allow_nan=False)
    return verdict


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_honest_pytorch_file_is_accepted(world: World, precision: str) -> None:
    world.loads.clear()
    verdict = judge(world, world.honest, precision)
    assert verdict.accepted, verdict.evidence
    tokens = sum(len(s.completion_tokens) for s in world.honest)
    assert (verdict.rows, verdict.checked_rows, verdict.checked_tokens) == (N_ROWS, N_ROWS, tokens)
    evidence = verdict.evidence
    assert evidence["rejected_rows"] == 0 and evidence["reproduced_fraction"] == 1.0
    assert evidence["work_units"] == tokens
    assert 0 <= evidence["worst_exp_mismatches"] <= 38  # TOPLOC's bound, with the margin on record
    assert 0 <= evidence["worst_sampling_gap"] <= DEFAULT_TIE_TOLERANCE  # the sampling margin on record
    assert world.loads == [VERSION]  # loaded once, for the submitted version
    # the task is learnable: both rewards occur, so advantages are not all zero
    assert {s.reward for s in world.honest} == {0.0, 1.0}


def _edit(world: World, row: int, token: int, *, reprove: bool) -> list[RolloutSample]:
    """Row `row` with its first completion token changed; re-proven (and re-scored) with the right model,
    the cheat that earns reward, or with the honest proofs kept."""
    samples = list(world.honest)
    completion = [token, *samples[row].completion_tokens[1:]]
    if not reprove:
        samples[row] = dataclasses.replace(samples[row], completion_tokens=tuple(completion))
        return samples
    completions = [list(s.completion_tokens) for s in samples]
    completions[row] = completion
    return build_rows(world.worker_model, world.prompts, completions, world.ids)


def _other_model(world: World) -> list[RolloutSample]:
    """A whole worker run with another model: its tokens, its activations, its proofs."""
    other = create_model(ModelSpec(seed=1)).to(torch.bfloat16).eval()
    return build_rows(other, world.prompts, generate(other, world.prompts), world.ids)


def _replace_row(row: int, **changes: Any) -> Callable[[World], list[RolloutSample]]:
    def tamper(world: World) -> list[RolloutSample]:
        samples = list(world.honest)
        samples[row] = dataclasses.replace(samples[row], **changes)
        return samples

    return tamper


def _proofs(row: int, change: Callable[[bytes], bytes]) -> Callable[[World], list[RolloutSample]]:
    return lambda world: _replace_row(row, proofs=change(world.honest[row].proofs))(world)


def _proofs_of(row: int, donor: int) -> Callable[[World], list[RolloutSample]]:
    return lambda world: _replace_row(row, proofs=world.honest[donor].proofs)(world)


def _flip_reward(world: World) -> list[RolloutSample]:
    return _replace_row(9, reward=1.0 - world.honest[9].reward)(world)


def _shift_advantage(world: World) -> list[RolloutSample]:
    return _replace_row(10, advantage=world.honest[10].advantage + 0.25)(world)


# (name, tamper, submission changes, expected reasons, row named in the evidence or None)
CHEATS: list[tuple[str, Callable[[World], list[RolloutSample]], dict[str, Any], set[str], int | None]] = [
    ("completion token edited, re-proven", lambda w: _edit(w, 6, PLUS_ID, reprove=True), {}, {"sampling_mismatch"}, 6),
    ("completion token edited, proofs kept", lambda w: _edit(w, 7, PLUS_ID, reprove=False), {}, TOPLOC_OR_SAMPLING, 7),
    ("another model's generation and proofs", _other_model, {}, {"toploc_exp_mismatch", "toploc_mantissa"}, 0),
    ("proofs zeroed", _proofs(4, lambda p: bytes(len(p))), {}, {"proof_malformed"}, 4),
    ("proofs of another problem's row", _proofs_of(1, 9), {}, {"toploc_exp_mismatch", "toploc_mantissa"}, 1),
    ("reward flipped", _flip_reward, {}, {"reward_mismatch"}, 9),
    ("advantage shifted", _shift_advantage, {}, {"advantage_mismatch"}, 10),
    ("work units inflated", lambda w: w.honest, {"work_units": 10_000}, {"work_units_mismatch"}, None),
]


@pytest.mark.parametrize(("tamper", "sub", "reasons", "row"), [c[1:] for c in CHEATS], ids=[c[0] for c in CHEATS])
def test_cheat_is_rejected_with_reason(
    world: World,
    tamper: Callable[[World], list[RolloutSample]],
    sub: dict[str, Any],
    reasons: set[str],
    row: int | None,
) -> None:
    samples = tamper(world)
    verdict = judge(world, samples, sub=sub)
    assert not verdict.accepted and verdict.reason in reasons, (verdict.reason, verdict.evidence)
    scoring = {
        "bad_problem_id",
        "prompt_mismatch",
        "reward_mismatch",
        "group_mismatch",
        "advantage_mismatch",
        "work_units_mismatch",
    }
    # the scoring checks run before the model's, so a file they reject costs no prefill
    assert verdict.checked_rows == (0 if verdict.reason in scoring else N_ROWS)
    if row is not None:
        assert verdict.evidence["row"] == row
    if verdict.reason in TOPLOC_OR_SAMPLING | {"proof_malformed", "proof_count_mismatch"}:
        chunks = verdict.evidence["toploc"]
        assert chunks and set(chunks[0]) == {"exp_mismatches", "mant_err_mean", "mant_err_median", "error"}
        assert verdict.evidence["rejected_rows"] >= 1
        assert verdict.evidence["sampling"]["n_tokens"] == len(samples[verdict.evidence["row"]].completion_tokens)


def test_sampling_evidence_names_the_edited_position(world: World) -> None:
    verdict = judge(world, _edit(world, 6, PLUS_ID, reprove=True))
    assert verdict.reason == "sampling_mismatch"
    assert verdict.evidence["sampling"]["first_mismatch"] == 0
    assert verdict.evidence["reproduced_fraction"] == (N_ROWS - 1) / N_ROWS
    assert verdict.evidence["worst_sampling_gap"] > DEFAULT_TIE_TOLERANCE  # the edited row's gap
    assert all(c["exp_mismatches"] <= 38 for c in verdict.evidence["toploc"])  # re-proven: TOPLOC passes


@pytest.mark.parametrize(
    ("sub", "rules", "reason"),
    [
        ({"node": "0x" + "43" * 20}, RULES, "metadata_mismatch"),
        ({"model_version": VERSION + 1}, RULES, "model_version_mismatch"),
        ({}, dataclasses.replace(RULES, latest_version=VERSION + 3), "stale_model_version"),
        ({}, dataclasses.replace(RULES, latest_version=VERSION - 1), "unknown_model_version"),
    ],
)
def test_cheap_failures_never_load_the_model(world: World, sub: dict[str, Any], rules: PoolRules, reason: str) -> None:
    world.loads.clear()
    verdict = judge(world, world.honest, sub=sub, rules=rules)
    assert verdict.reason == reason
    assert world.loads == [] and verdict.checked_rows == 0


@pytest.mark.parametrize(
    ("tamper", "row"),
    [(_proofs(3, lambda p: p[:-2]), 3), (_proofs(5, lambda p: b""), 5), (_proofs(6, lambda p: p + p[:258]), 6)],
    ids=["proofs truncated by 2 bytes", "proofs removed", "a proof too many"],
)
def test_proof_sizes_are_checked_on_every_row_without_the_model(
    world: World, tamper: Callable[[World], list[RolloutSample]], row: int
) -> None:
    world.loads.clear()
    verdict = judge(world, tamper(world))
    assert (verdict.reason, verdict.evidence["row"]) == ("proof_count_mismatch", row)
    assert world.loads == [] and verdict.checked_rows == 0


def test_sample_rate_zero_recomputes_nothing(world: World) -> None:
    """The edited, re-proven and re-scored file passes every cheap check: only recomputation catches it."""
    cheat = _edit(world, 6, PLUS_ID, reprove=True)
    world.loads.clear()
    skipped = judge(world, cheat, sample_rate=0)
    assert skipped.accepted and (skipped.checked_rows, skipped.checked_tokens) == (0, 0)
    assert skipped.evidence["recomputed"] is False and world.loads == []
    assert judge(world, cheat, sample_rate=1).reason == "sampling_mismatch"


def test_spot_check_draws_a_quarter_of_the_rows_by_seed(world: World) -> None:
    seed = b"block-hash-of-the-submission"
    drawn = spot_check_rows(N_ROWS, 0.25, seed)
    assert len(drawn) == N_ROWS // 4
    verdict = judge(world, world.honest, sample_rate=0.25, selection_seed=seed)
    assert verdict.accepted and verdict.checked_rows == N_ROWS // 4
    assert verdict.checked_tokens == sum(len(world.honest[r].completion_tokens) for r in drawn)
    assert verdict.evidence["selection_seed"] == seed.hex()
    assert judge(world, world.honest, sample_rate=0.25, selection_seed=seed) == verdict  # deterministic

    inside, outside = drawn[1], next(r for r in range(N_ROWS) if r not in drawn)
    caught = judge(world, _edit(world, inside, PLUS_ID, reprove=True), sample_rate=0.25, selection_seed=seed)
    assert caught.reason == "sampling_mismatch" and caught.evidence["row"] == inside
    missed = judge(world, _edit(world, outside, PLUS_ID, reprove=True), sample_rate=0.25, selection_seed=seed)
    assert missed.accepted and missed.checked_rows == N_ROWS // 4
    other_seed = next(s for s in map(bytes, ([i] for i in range(64))) if outside in spot_check_rows(N_ROWS, 0.25, s))
    again = judge(world, _edit(world, outside, PLUS_ID, reprove=True), sample_rate=0.25, selection_seed=other_seed)
    assert again.reason == "sampling_mismatch"


def test_file_level_tests_run_on_accepted_rows_and_can_reject_the_file(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run_checks` runs the file tests once every row passed: their figures are in an accepted
    verdict's evidence, and a file statistic past its threshold rejects a file whose every row
    passed. (What the thresholds catch is measured in tests/integration/test_detection_matrix.py.)"""
    accepted = judge(world, world.honest, "fp32")  # bf16 rows on a bf16 validator match exactly
    assert accepted.accepted, accepted.evidence
    statistic = accepted.evidence["file_statistic"]
    assert statistic["chunks"] == N_ROWS  # one 32-token chunk per short completion
    assert 0 < statistic["mant_err_mean"] <= check.MAX_FILE_MANT_ERR_MEAN
    assert accepted.evidence["tie_test"]["p_value"] > accepted.evidence["tie_test"]["alpha"]

    monkeypatch.setattr(check, "MAX_FILE_MANT_ERR_MEAN", statistic["mant_err_mean"] / 2)
    rejected = judge(world, world.honest, "fp32")
    assert (rejected.accepted, rejected.reason) == (False, "file_statistic")
    assert rejected.evidence["rejected_rows"] == 0  # no row failed on its own
    assert rejected.evidence["file_statistic"] == statistic
