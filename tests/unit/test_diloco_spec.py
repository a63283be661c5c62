"""Training pools' specs (`proofpool.core.diloco.spec`): canonical and hashed, strict (every bad or
unknown field refused with its path), readable without torch."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from proofpool.core.diloco.spec import (
    CodecSpec,
    DilocoData,
    DilocoModel,
    DilocoSpec,
    InnerSpec,
    OuterSpec,
    ReplaySpec,
    RoundSpec,
    parse_diloco_spec,
    spec_kind,
)
from proofpool.core.spec import SpecError, canonical_json

pytestmark = pytest.mark.timeout(60)

SPEC = DilocoSpec(
    model=DilocoModel(architecture="LlamaForCausalLM", vocab_size=512),
    dataset=DilocoData(sha256="ab" * 32, sequences=1000, seq_len=32, eval_sequences=100, name="tiny"),
    inner=InnerSpec(steps=8, batch_size=4, lr=1e-3, warmup_steps=2),
    outer=OuterSpec(),
    codec=CodecSpec(block_size=4096),
    round=RoundSpec(deadline_seconds=600, min_contributors=2),
    validation=ReplaySpec(sample_rate=0.5),
)
GOLDEN_SHA256 = "71f341a62ed3288f66f1c8aae091230a4ec5ae6aecd70f612b977024125a465e"
"""The sha256 of SPEC: changing how a spec is written changes every training pool's commitment."""


def _parse_changed(change: Callable[[dict[str, Any]], Any]) -> DilocoSpec:
    raw = copy.deepcopy(SPEC.to_json())
    change(raw)
    return parse_diloco_spec(raw)


def test_a_spec_round_trips_through_its_canonical_json() -> None:
    data = SPEC.canonical()
    assert data == canonical_json(json.loads(data))
    assert parse_diloco_spec(data) == SPEC
    assert parse_diloco_spec(data.decode()) == SPEC
    assert parse_diloco_spec(json.loads(data)).sha256() == SPEC.sha256()
    assert SPEC.to_json()["kind"] == "diloco" and SPEC.to_json()["spec_version"] == 1


def test_the_hash_is_stable() -> None:
    assert SPEC.sha256() == GOLDEN_SHA256


def test_fields_left_out_take_their_defaults_and_hash_as_written_in_full() -> None:
    raw = SPEC.to_json()
    for section in ("outer", "validation"):
        del raw[section]
    del raw["codec"]["name"]
    for key in ("weight_decay", "beta1", "beta2", "eps", "grad_clip"):
        del raw["inner"][key]
    del raw["dataset"]["uri"]
    parsed = parse_diloco_spec(raw)
    assert parsed.outer == OuterSpec() and parsed.validation == ReplaySpec()
    assert parsed.inner == SPEC.inner and parsed.codec == SPEC.codec
    assert parsed.to_json()["outer"] == {"lr": 0.7, "momentum": 0.9, "nesterov": True, "clip_norm": 0.0}


def test_every_field_changes_the_hash() -> None:
    changes: list[Callable[[dict[str, Any]], Any]] = [
        lambda r: r["model"].update(vocab_size=513),
        lambda r: r["model"].update(uri="s3://b/p/", manifest_sha256="cd" * 32),
        lambda r: r["dataset"].update(sha256="ef" * 32),
        lambda r: r["dataset"].update(eval_sequences=99),
        lambda r: r["dataset"].update(name="other"),
        lambda r: r["inner"].update(steps=9),
        lambda r: r["inner"].update(lr=2e-3),
        lambda r: r["inner"].update(warmup_steps=0),
        lambda r: r["inner"].update(grad_clip=1.0),
        lambda r: r["outer"].update(nesterov=False),
        lambda r: r["outer"].update(clip_norm=10.0),
        lambda r: r["codec"].update(block_size=0),
        lambda r: r["round"].update(min_contributors=3),
        lambda r: r["validation"].update(tolerance=0.1),
    ]
    hashes = {SPEC.sha256()} | {_parse_changed(change).sha256() for change in changes}
    assert len(hashes) == len(changes) + 1


def test_work_units_and_training_rows() -> None:
    assert SPEC.work_units == 8 * 4 * 32
    assert SPEC.training_rows == 900


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda r: r.update(extra=1), "spec.extra"),
        (lambda r: r["inner"].update(momentum=0.9), "spec.inner.momentum"),
        (lambda r: r["outer"].update(nesterove=True), "spec.outer.nesterove"),
        (lambda r: r["codec"].update(bits=8), "spec.codec.bits"),
    ],
)
def test_unknown_keys_are_refused_by_path(change: Callable[[dict[str, Any]], Any], path: str) -> None:
    with pytest.raises(SpecError, match=rf"{path} is not a known field"):
        _parse_changed(change)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("inner", "steps", 0),
        ("inner", "steps", 100_001),
        ("inner", "steps", 3.0),
        ("inner", "steps", True),
        ("inner", "batch_size", 0),
        ("inner", "batch_size", 65_537),
        ("inner", "lr", 0),
        ("inner", "lr", 10.5),
        ("inner", "lr", "0.001"),
        ("inner", "beta1", 1.0),
        ("inner", "beta2", -0.1),
        ("inner", "eps", 0),
        ("inner", "weight_decay", -0.1),
        ("inner", "grad_clip", -1),
        ("inner", "warmup_steps", -1),
        ("outer", "lr", 0.0),
        ("outer", "lr", 10.01),
        ("outer", "momentum", 1.0),
        ("outer", "momentum", -0.5),
        ("outer", "nesterov", 1),
        ("outer", "clip_norm", -1.0),
        ("validation", "tolerance", 0),
        ("validation", "tolerance", 1.5),
        ("validation", "sample_rate", 1.01),
        ("validation", "sample_rate", -0.01),
        ("round", "min_contributors", 0),
        ("round", "deadline_seconds", 0),
        ("codec", "name", "int4"),
        ("codec", "block_size", -1),
        ("dataset", "sha256", "AB" * 32),
        ("dataset", "sha256", "ab" * 31),
        ("dataset", "seq_len", 1),
        ("dataset", "sequences", 0),
        ("model", "vocab_size", 0),
        ("model", "architecture", ""),
    ],
)
def test_out_of_bounds_fields_are_refused_by_name(section: str, key: str, value: Any) -> None:
    with pytest.raises(SpecError, match=rf"spec\.{section}\.{key}"):
        _parse_changed(lambda r: r[section].update({key: value}))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r["dataset"].update(eval_sequences=1000), "eval_sequences must be below"),
        (lambda r: r["model"].update(uri="s3://b/p/"), "go together"),
        (lambda r: r["model"].update(manifest_sha256="cd" * 32), "go together"),
        (lambda r: r["codec"].update(name="fp32"), "block_size must be 0 for the fp32 codec"),
        (lambda r: r["inner"].update(steps=100_000, batch_size=65_536), "at most"),
        (lambda r: r.update(kind="rl"), "spec.kind must be 'diloco'"),
        (lambda r: r.pop("kind"), "spec.kind is missing"),
        (lambda r: r.update(spec_version=2), "spec_version 2 is not supported"),
        (lambda r: r.pop("inner"), "spec.inner is missing"),
        (lambda r: r.update(round=[]), "spec.round must be a dict"),
    ],
)
def test_inconsistent_specs_are_refused(change: Callable[[dict[str, Any]], Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _parse_changed(change)


@pytest.mark.parametrize("data", [b"{", b"[1, 2]", "null", b"\xff\xfe"])
def test_non_objects_are_refused(data: bytes | str) -> None:
    with pytest.raises(SpecError):
        parse_diloco_spec(data)


def test_spec_kind_tells_training_pools_from_rl_pools() -> None:
    assert spec_kind(SPEC.canonical()) == "diloco"
    assert spec_kind({"spec_version": 1, "environment": {}}) == "rl"
    with pytest.raises(SpecError, match=r"spec\.kind"):
        spec_kind({"kind": "sft"})
    with pytest.raises(SpecError):
        spec_kind(b"not json")


def test_reading_a_spec_does_not_import_torch() -> None:
    """The CLI and the backend read training pools' specs on a base install (no torch)."""
    code = (
        "import sys; from proofpool.core.diloco.shard import node_rows; "
        "from proofpool.core.diloco.spec import parse_diloco_spec; print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"
