"""`proofpool.validator.checks.update.judge_update`: a training pool's file judged on its bytes alone.

Every reason of the DiLoCo contract the judge names, on files changed one thing at a time from an
honest one; an honest file (a real replay of a tiny Llama's inner steps) accepted bitwise, and a
file that does not match its replay rejected with the comparison as evidence. No chain, database
or store: the facts the pipeline reads from them are plain values here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
import torch
from proofpool.validator.checks.facts import SubmissionFacts
from proofpool.validator.checks.update import BATCH, RoundFacts, judge_update

from proofpool.core.diloco.shard import node_rows
from proofpool.core.diloco.spec import DilocoSpec, parse_diloco_spec
from proofpool.core.diloco.update_file import UpdateMeta, encode_update
from proofpool.training.inner import InnerResult, TrainJob, load_model, parameter_shapes, run_inner
from tests.unit.test_training_inner import VOCAB, tiny_llama

POOL = 3
NODE = "0x" + "Ab" * 20
ROUND = 2
BASE = "b0" * 32
SHAPES = {"embed.weight": (16, 8), "layer.bias": (8,), "head.weight": (4, 8)}


def make_spec(**changes: object) -> DilocoSpec:
    raw = {
        "kind": "diloco",
        "spec_version": 1,
        "model": {
            "architecture": "LlamaForCausalLM",
            "vocab_size": 256,
            "manifest_sha256": "a0" * 32,
            "uri": "s3://bucket/models/base/",
        },
        "dataset": {"sha256": "d0" * 32, "sequences": 64, "seq_len": 32, "eval_sequences": 8},
        "inner": {"steps": 3, "batch_size": 2, "lr": 1e-3},
        "round": {"deadline_seconds": 60, "min_contributors": 1},
        "validation": {"sample_rate": 1.0, "tolerance": 0.05},
    }
    for path, value in changes.items():
        section, key = path.split("__")
        raw[section][key] = value  # type: ignore[index]
    return parse_diloco_spec(raw)


SPEC = make_spec()


def gradient(seed: int = 0, shapes: Mapping[str, tuple[int, ...]] = SHAPES) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=generator) * 1e-3 for name, shape in shapes.items()}


def meta(spec: DilocoSpec = SPEC, **changes: object) -> UpdateMeta:
    honest = UpdateMeta(
        pool_id=POOL,
        node=NODE,
        round=ROUND,
        base_manifest_sha256=BASE,
        spec_sha256=spec.sha256(),
        codec=spec.codec.name,
        block_size=spec.codec.block_size,
        inner_steps=spec.inner.steps,
        tokens=spec.work_units,
        losses=tuple(5.0 - 0.1 * i for i in range(spec.inner.steps)),
    )
    return dataclasses.replace(honest, **changes)  # type: ignore[arg-type]


def submission(data: bytes, **changes: object) -> SubmissionFacts:
    honest = SubmissionFacts(POOL, hashlib.sha256(data).digest(), NODE.lower(), SPEC.work_units, ROUND)
    return dataclasses.replace(honest, **changes)  # type: ignore[arg-type]


def facts(spec: DilocoSpec = SPEC, shapes: Mapping[str, tuple[int, ...]] = SHAPES, **changes: object) -> RoundFacts:
    honest = RoundFacts(
        spec=spec,
        spec_sha256=spec.sha256(),
        shapes=shapes,
        latest_version=ROUND,
        base_manifest_sha256=BASE,
        superseded_before=None,
        stale_grace=60.0,
        max_file_bytes=1 << 20,
    )
    return dataclasses.replace(honest, **changes)  # type: ignore[arg-type]


def replaying(pseudo_gradient: Mapping[str, torch.Tensor]) -> Callable[[], InnerResult]:
    result = InnerResult(dict(pseudo_gradient), [5.0, 4.9, 4.8], SPEC.work_units, seconds=0.25)
    return lambda: result


def never() -> InnerResult:
    raise AssertionError("a file that fails a cheap check is never replayed")


HONEST = gradient()
DATA = encode_update(HONEST, meta())


def test_an_honest_file_is_accepted_bitwise_with_the_replay_in_its_evidence() -> None:
    verdict = judge_update(DATA, submission(DATA), facts(), replaying(HONEST))
    assert verdict.accepted, verdict
    evidence = verdict.evidence
    assert evidence["batch"] == BATCH == 0 and evidence["round"] == ROUND
    assert evidence["bitwise"] is True and evidence["relative_l2"] < 0.01
    assert evidence["tolerance"] == 0.05 and evidence["replay_seconds"] == 0.25
    assert len(evidence["replay_sha256"]) == 64
    expected_norm = float(torch.sqrt(sum((t.double() ** 2).sum() for t in HONEST.values())))
    assert evidence["norm"] == pytest.approx(expected_norm, rel=0.01)
    assert verdict.checked_tokens == SPEC.work_units
    json.dumps(evidence, allow_nan=False)  # strict JSON, as the evidence document needs


def test_an_unselected_file_gets_every_cheap_check_and_no_replay() -> None:
    verdict = judge_update(DATA, submission(DATA), facts(), None)
    assert verdict.accepted and verdict.evidence["batch"] == 0 and "relative_l2" not in verdict.evidence
    assert verdict.checked_tokens == 0
    bad = encode_update(HONEST, meta(round=ROUND + 1))
    assert judge_update(bad, submission(bad), facts(), None).reason == "wrong_round"


def test_a_replay_within_tolerance_but_not_bitwise_is_accepted() -> None:
    close = {name: t * 1.01 for name, t in HONEST.items()}
    verdict = judge_update(DATA, submission(DATA), facts(), replaying(close))
    assert verdict.accepted and verdict.evidence["bitwise"] is False
    assert 0.005 < verdict.evidence["relative_l2"] < 0.05


@pytest.mark.parametrize(
    ("case", "replayed"),
    [
        ("another direction", gradient(seed=1)),
        ("scaled by 10 (the int8 codes are the same)", {n: t * 10 for n, t in HONEST.items()}),
        ("zero (a node that trained nothing)", {n: torch.zeros_like(t) for n, t in HONEST.items()}),
    ],
)
def test_a_file_that_is_not_its_replay_is_a_pseudo_gradient_mismatch(case: str, replayed: dict) -> None:
    verdict = judge_update(DATA, submission(DATA), facts(), replaying(replayed))
    assert not verdict.accepted and verdict.reason == "pseudo_gradient_mismatch", case
    evidence = verdict.evidence
    assert evidence["bitwise"] is False and evidence["tolerance"] == 0.05
    assert evidence["relative_l2"] is None or evidence["relative_l2"] > 0.05  # None: inf against a zero replay
    assert set(evidence) >= {"replay_sha256", "replay_seconds", "norm", "batch"}
    json.dumps(evidence, allow_nan=False)


def test_round_statistics_flag_but_never_decide() -> None:
    """Norm ratio and cosine with the running direction are in the evidence; an update pointing
    against the direction, or far longer than the round's median, is flagged and still accepted
    when its replay agrees (a flag alone never slashes)."""
    norm = float(torch.sqrt(sum((t.double() ** 2).sum() for t in HONEST.values())))
    plain = judge_update(DATA, submission(DATA), facts(), None).evidence
    assert plain["flags"] == [] and "cosine" not in plain and "norm_ratio" not in plain

    against = {name: -t for name, t in HONEST.items()}
    flagged = judge_update(
        DATA, submission(DATA), facts(reference_norm=norm / 5, direction=lambda: against), replaying(HONEST)
    )
    assert flagged.accepted, flagged
    assert flagged.evidence["flags"] == ["norm_high", "opposed"]
    assert flagged.evidence["cosine"] == pytest.approx(-1.0, abs=1e-3)
    assert flagged.evidence["norm_ratio"] == pytest.approx(5.0, rel=0.01)

    along = judge_update(DATA, submission(DATA), facts(reference_norm=norm * 4, direction=lambda: HONEST), None)
    assert along.evidence["flags"] == ["norm_low"] and along.evidence["cosine"] == pytest.approx(1.0, abs=1e-3)


def test_the_bytes_must_be_the_submitted_object() -> None:
    verdict = judge_update(DATA, submission(DATA, work_key=b"\x01" * 32), facts(), never)
    assert verdict.reason == "hash_mismatch" and verdict.evidence["actual"] == hashlib.sha256(DATA).hexdigest()
    verdict = judge_update(DATA, submission(DATA), facts(max_file_bytes=len(DATA) - 1), never)
    assert verdict.reason == "file_too_large"


def with_losses(losses: list[float]) -> bytes:
    """An honest file whose metadata claims `losses`, written as a hostile node can: JSON with NaN
    or Infinity (`encode_update` refuses to write them)."""
    from safetensors.torch import load, save

    size = struct.unpack("<Q", DATA[:8])[0]
    raw = json.loads(json.loads(DATA[8 : 8 + size])["__metadata__"]["proofpool"])
    raw["losses"] = losses
    return save(load(DATA), metadata={"proofpool": json.dumps(raw)})


def _header_length_lie(data: bytes) -> bytes:
    return struct.pack("<Q", len(data) * 4) + data[8:]


@pytest.mark.parametrize(
    ("case", "data", "reason"),
    [
        ("garbage", os.urandom(300), "not_safetensors"),
        ("empty", b"", "not_safetensors"),
        ("truncated", DATA[: len(DATA) // 2], "not_safetensors"),
        ("header length beyond the file", _header_length_lie(DATA), "not_safetensors"),
        (
            "a parameter missing",
            encode_update({k: v for k, v in HONEST.items() if k != "layer.bias"}, meta()),
            "wrong_tensors",
        ),
        (
            "a parameter of another shape",
            encode_update({**HONEST, "layer.bias": torch.zeros(9)}, meta()),
            "wrong_shape",
        ),
        ("another codec", encode_update(HONEST, meta(codec="fp32")), "wrong_codec"),
    ],
)
def test_a_file_that_is_not_an_update_of_this_model_is_rejected_with_the_readers_reason(
    case: str, data: bytes, reason: str
) -> None:
    verdict = judge_update(data, submission(data), facts(), never)
    assert not verdict.accepted and verdict.reason == reason, (case, verdict)
    assert isinstance(verdict.evidence.get("detail"), str)


@pytest.mark.parametrize(
    ("case", "file_meta", "sub_changes", "fact_changes", "reason"),
    [
        ("another pool", {"pool_id": POOL + 1}, {}, {}, "wrong_pool"),
        ("another node", {"node": "0x" + "cd" * 20}, {}, {}, "wrong_node"),
        ("another round than submitted", {"round": ROUND - 1}, {}, {}, "wrong_round"),
        ("a round not published as of the submission", {}, {}, {"latest_version": ROUND - 1}, "wrong_round"),
        ("a round whose checkpoint is unknown", {}, {}, {"base_manifest_sha256": None}, "wrong_round"),
        ("another spec", {"spec_sha256": "ee" * 32}, {}, {}, "wrong_spec"),
        ("trained from another checkpoint", {"base_manifest_sha256": "c0" * 32}, {}, {}, "wrong_base"),
        ("more work units claimed on-chain", {}, {"work_units": SPEC.work_units * 2}, {}, "wrong_units"),
        ("fewer tokens in the file", {"tokens": SPEC.work_units - 1}, {}, {}, "wrong_units"),
        ("fewer inner steps", {"inner_steps": 2}, {}, {}, "wrong_units"),
        ("a loss per step missing", {"losses": (5.0, 4.9)}, {}, {}, "loss_trace"),
        ("submitted long after the round closed", {}, {}, {"superseded_before": 61.0}, "stale"),
        ("submitted exactly at the grace", {}, {}, {"superseded_before": 60.0}, "stale"),
    ],
)
def test_metadata_and_round_reasons(
    case: str, file_meta: dict, sub_changes: dict, fact_changes: dict, reason: str
) -> None:
    data = encode_update(HONEST, meta(**file_meta))
    verdict = judge_update(data, submission(data, **sub_changes), facts(**fact_changes), never)
    assert not verdict.accepted and verdict.reason == reason, (case, verdict)
    json.dumps(verdict.evidence, allow_nan=False)


@pytest.mark.parametrize("losses", [[5.0, float("nan"), 4.8], [5.0, 4.9, float("inf")], [float("-inf")] * 3])
def test_a_loss_trace_that_is_not_finite_is_rejected(losses: list[float]) -> None:
    data = with_losses(losses)
    verdict = judge_update(data, submission(data), facts(), never)
    assert verdict.reason == "loss_trace"
    assert verdict.evidence == {
        "losses": 3,
        "finite": sum(x == x and abs(x) != float("inf") for x in losses),
        "inner_steps": 3,
    }


def test_evidence_of_metadata_mismatches_names_both_values() -> None:
    data = encode_update(HONEST, meta(base_manifest_sha256="c0" * 32))
    verdict = judge_update(data, submission(data), facts(), never)
    assert verdict.evidence == {"file": "c0" * 32, "expected": BASE}


def test_node_and_hashes_compare_in_any_case_and_the_grace_spares_a_file_submitted_as_the_round_closed() -> None:
    data = encode_update(HONEST, meta(node=NODE.upper().replace("0X", "0x")))
    assert judge_update(data, submission(data), facts(base_manifest_sha256=BASE.upper()), None).accepted
    assert judge_update(DATA, submission(DATA), facts(superseded_before=59.0), None).accepted
    assert judge_update(DATA, submission(DATA), facts(superseded_before=0.0), None).accepted


def test_version_zero_is_the_specs_checkpoint() -> None:
    data = encode_update(HONEST, meta(round=0, base_manifest_sha256=SPEC.model.manifest_sha256))
    sub = submission(data, model_version=0)
    assert judge_update(
        data, sub, facts(latest_version=0, base_manifest_sha256=SPEC.model.manifest_sha256), None
    ).accepted


def test_hostile_bytes_never_raise() -> None:
    """Bit flips and truncations anywhere in an honest file: always a verdict, never an exception."""
    generator = torch.Generator().manual_seed(7)
    for _ in range(200):
        data = bytearray(DATA)
        for position in torch.randint(0, len(data), (3,), generator=generator).tolist():
            data[position] ^= 1 << int(torch.randint(0, 8, (1,), generator=generator))
        cut = int(torch.randint(len(data) // 2, len(data) + 1, (1,), generator=generator))
        damaged = bytes(data[:cut])
        verdict = judge_update(damaged, submission(damaged), facts(), replaying(HONEST))
        json.dumps(verdict.evidence, allow_nan=False)


def test_a_real_replay_of_an_honest_nodes_inner_steps_is_bitwise_and_a_lazy_node_is_caught(tmp_path: Path) -> None:
    """The worker's and the validator's runs of the same TrainJob: the file re-quantizes bitwise. A
    node that trained on other rows (its own choice) submits a file its replay does not match."""
    checkpoint = tiny_llama(tmp_path / "v2")
    shapes = parameter_shapes(load_model(checkpoint))
    tokens = torch.randint(
        0,
        VOCAB,
        (SPEC.dataset.sequences, SPEC.dataset.seq_len),
        generator=torch.Generator().manual_seed(1),
        dtype=torch.int32,
    )

    def job(rows: list[int]) -> TrainJob:
        return TrainJob(POOL, ROUND, NODE, checkpoint, tokens, rows, SPEC.inner)

    rows = node_rows(SPEC, POOL, ROUND, NODE)
    honest = run_inner(job(rows))
    data = encode_update(honest.pseudo_gradient, meta(losses=tuple(honest.losses)))
    verdict = judge_update(data, submission(data), facts(shapes=shapes), lambda: run_inner(job(rows)))
    assert verdict.accepted and verdict.evidence["bitwise"] is True, verdict

    other_rows = run_inner(job(list(range(len(rows)))))
    lazy = encode_update(other_rows.pseudo_gradient, meta(losses=tuple(other_rows.losses)))
    verdict = judge_update(lazy, submission(lazy), facts(shapes=shapes), lambda: run_inner(job(rows)))
    assert verdict.reason == "pseudo_gradient_mismatch" and verdict.evidence["relative_l2"] > 0.05
