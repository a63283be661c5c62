"""Pool specs (`proofpool.core.spec`, `proofpool.envs.spec`): canonical and hashed, parsed with a
reason for every bad field, and refused by a machine that builds anything differently."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from proofpool.devnet.tiny_model import build_tiny_qwen3

from proofpool.core.spec import PoolSpec, SpecError, canonical_json, ids_sha256, parse_spec
from proofpool.envs.spec import SpecMismatch, build_spec, spec_environment

pytestmark = pytest.mark.timeout(300)

CONFIG = {"families": ["linear", "fraction"], "levels": [1]}
SETTINGS: dict[str, Any] = {
    "batch_size": 4,
    "group_size": 2,
    "max_prompt_tokens": 1024,
    "max_tokens": 8192,
    "temperature": 0.7,
}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen3(tmp_path_factory.mktemp("qwen"))


@pytest.fixture(scope="module")
def spec(qwen: Path) -> PoolSpec:
    return build_spec("math", CONFIG, qwen, **SETTINGS)


def _tampered(spec: PoolSpec, change: Any) -> PoolSpec:
    raw = copy.deepcopy(spec.to_json())
    change(raw)
    return parse_spec(raw)


def test_a_built_spec_round_trips_and_hashes_its_canonical_json(spec: PoolSpec) -> None:
    data = spec.canonical()
    assert data == canonical_json(json.loads(data))
    again = parse_spec(data)
    assert again == spec and again.sha256() == spec.sha256() and len(spec.sha256()) == 64
    assert spec.generation.max_tokens == 8192  # budgets well beyond 4,096
    assert spec.environment.packages["math-verify"] == "0.9.0"
    assert [g.reward for g in spec.golden] == [1.0, 1.0, 1.0] and spec.indices.sha256 is None


def test_every_field_changes_the_hash(spec: PoolSpec) -> None:
    hashes = {spec.sha256()}
    for change in (
        lambda r: r["generation"].update(temperature=0.8),
        lambda r: r["prompt"].update(template_kwargs={"date_string": "02 Jan 2025"}),
        lambda r: r["environment"]["config"].update(levels=[2]),
        lambda r: r["golden"][0].update(completion="x"),
    ):
        hashes.add(_tampered(spec, change).sha256())
    assert len(hashes) == 5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("model"), "spec.model is missing"),
        (lambda r: r.update(spec_version=2), "spec_version 2 is not supported"),
        (lambda r: r["generation"].update(max_tokens=10**9), "spec.generation.max_tokens must be in"),
        (lambda r: r["generation"].update(temperature=float("nan")), "finite number"),
        (lambda r: r["generation"].update(group_size=True), "spec.generation.group_size must be a int"),
        (lambda r: r["generation"].update(stop_ids=[10**6]), "stop_ids must be ids below"),
        (lambda r: r["generation"].update(stop_ids=[]), "stop_ids must be ids below"),
        (lambda r: r["environment"].update(data_sha256="XY"), "64 lowercase hex"),
        (lambda r: r["model"].update(uri="s3://b/m/"), "go together"),
        (lambda r: r.update(golden=[]), "golden holds no vector"),
        (lambda r: r["golden"][0].update(reward=1.5), "spec.golden[0].reward must be in"),
        (lambda r: r["indices"].update(band=[0.9, 0.1]), "band"),
    ],
)
def test_a_malformed_spec_names_its_bad_field(spec: PoolSpec, change: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _tampered(spec, change)


def test_text_that_is_not_json_is_refused() -> None:
    with pytest.raises(SpecError, match="not JSON"):
        parse_spec(b"{nope")
    with pytest.raises(SpecError, match="must be a JSON object"):
        parse_spec("[1, 2]")


def test_this_machine_builds_the_spec_environment(spec: PoolSpec, qwen: Path) -> None:
    pool = spec_environment(spec, qwen)
    assert pool.tokens.stop_ids == set(spec.generation.stop_ids) and pool.tokens.max_completion_tokens == 8192
    assert len(pool.taskset.indices) == spec.indices.count


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["environment"]["packages"].update({"math-verify": "0.1.0"}), "package math-verify 0.9.0"),
        (lambda r: r["environment"].update(data_sha256="0" * 64), "problem data sha256"),
        (lambda r: r["environment"].update(version="9"), "environment version"),
        (lambda r: r["model"].update(architecture="LlamaForCausalLM"), "model Qwen3ForCausalLM"),
        (lambda r: r["golden"][1].update(prompt_sha256="0" * 64), "renders to other prompt ids"),
        (lambda r: r["golden"][2].update(reward=0.0), "scores 1.0 .spec: 0.0.: another scorer"),
        (lambda r: r["prompt"].update(chat_template="{{ messages[-1]['content'] }}"), "renders to other prompt ids"),
        (lambda r: r["indices"].update(count=3), "problems .spec: all 3."),
    ],
)
def test_any_difference_is_refused_before_work(spec: PoolSpec, qwen: Path, change: Any, message: str) -> None:
    with pytest.raises(SpecMismatch, match=message):
        spec_environment(_tampered(spec, change), qwen)


def test_a_filtered_index_list_is_pinned_by_its_hash(qwen: Path) -> None:
    chosen = [5, 1, 9, 30]
    filtered = build_spec("math", CONFIG, qwen, indices=chosen, band=(0.1, 0.8), golden=2, **SETTINGS)
    assert filtered.indices.sha256 == ids_sha256(chosen) and filtered.indices.count == 4
    assert [g.index for g in filtered.golden] == [5, 1]
    assert spec_environment(filtered, qwen, chosen).taskset.indices == tuple(chosen)
    with pytest.raises(SpecMismatch, match="pass the pool's list"):
        spec_environment(filtered, qwen)
    with pytest.raises(SpecMismatch, match="index list sha256"):
        spec_environment(filtered, qwen, [5, 1, 9, 31])


def test_a_prompt_longer_than_the_budget_cannot_make_a_spec(qwen: Path) -> None:
    with pytest.raises(SpecError, match="above max_prompt_tokens 5"):
        build_spec("math", CONFIG, qwen, **{**SETTINGS, "max_prompt_tokens": 5})


def test_a_spec_pools_assignment_is_its_spec_whatever_the_operator_overrides(spec: PoolSpec, qwen: Path) -> None:
    from proofpool_arithmetic import ENVIRONMENT

    from proofpool.core.assignment import DEFAULT_ASSIGNMENT, AssignmentConfig
    from proofpool.envs import pool_assignment

    pool = spec_environment(spec, qwen)
    pinned = AssignmentConfig(batch_size=4, group_size=2, max_tokens=8192, temperature=0.7)
    assert pool.assignment == pinned
    assert pool_assignment(pool) == pinned == pool_assignment(pool, 99, 99, 99, 2.0)
    assert pool_assignment(ENVIRONMENT) == DEFAULT_ASSIGNMENT  # the arithmetic budget is the default's 8
    assert pool_assignment(ENVIRONMENT, 4, None, 6, None) == AssignmentConfig(4, 8, 6, 1.0)


def test_the_held_out_slice_is_pinned_by_the_spec(spec: PoolSpec, qwen: Path) -> None:
    """A tenth of the 180 problems by default; every role holds the same ones out of its draws,
    and another size is another spec."""
    assert spec.indices.held_out == 18 and spec.to_json()["indices"]["held_out"] == 18
    taskset = spec_environment(spec, qwen).taskset
    held = taskset.held_out(100)
    assert len(held) == 18 and not set(held) & {p for seed in range(50) for p in taskset.draw(seed, 32)}
    other = _tampered(spec, lambda r: r["indices"].update(held_out=30))
    assert other.sha256() != spec.sha256()
    larger = spec_environment(other, qwen).taskset.held_out(100)
    assert len(larger) == 30 and larger[:18] == held  # the same ranking: a larger slice extends a smaller one


def test_a_spec_that_holds_nothing_out_keeps_the_hash_it_had_before_the_field(spec: PoolSpec, qwen: Path) -> None:
    none = build_spec("math", CONFIG, qwen, held_out=0, **SETTINGS)
    assert "held_out" not in none.to_json()["indices"]  # the JSON (and hash) of a spec from before the field
    explicit = copy.deepcopy(none.to_json())
    explicit["indices"]["held_out"] = 0
    assert parse_spec(explicit).sha256() == none.sha256()  # one canonical form
    assert spec_environment(none, qwen).taskset.held_out(100) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["indices"].update(held_out=-1), "spec.indices.held_out must be in"),
        (lambda r: r["indices"].update(held_out="9"), "spec.indices.held_out must be a int"),
        (lambda r: r["indices"].update(held_out=46), r"at most 45 \(a quarter\) may be held out"),
    ],
)
def test_a_bad_held_out_size_is_refused(spec: PoolSpec, qwen: Path, change: Any, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        spec_environment(_tampered(spec, change), qwen)


def test_a_creator_asking_for_too_large_a_slice_gets_a_spec_error(qwen: Path) -> None:
    with pytest.raises(SpecError, match=r"slice of 2 problems does not fit the pool's 4 distinct problems"):
        build_spec("math", CONFIG, qwen, indices=[5, 1, 9, 30], held_out=2, **SETTINGS)
