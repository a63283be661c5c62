"""Judging a training pool's file: one node's int8 pseudo-gradient for one DiLoCo round.

A pure function of the file's bytes, what the chain recorded for the submission
(`SubmissionFacts`) and what the chain and the pool's spec say about the round (`RoundFacts`), like
the RL checks (`proofpool.validator.checks.run`), so anyone holding the file can re-derive the verdict.
The pipeline assembles the facts (`proofpool.validator.training`).

Order (the first failure is the verdict): the bytes are the submitted object (`hash_mismatch`,
`file_too_large`); they are an update file of the pool's codec and the model's parameters (the
reasons of `proofpool.core.diloco.update_file.UpdateFileError`); its metadata is this submission's
(`wrong_pool`, `wrong_node`, `wrong_round`, `wrong_spec`), of a published round (`wrong_round`),
trained from that round's checkpoint (`wrong_base`), of the spec's amount of work (`wrong_units`)
with a plausible loss trace (`loss_trace`); the round was still open when the file was submitted
(`stale`); and, for the sampled share, the file agrees with a replay of the same inner steps
(`pseudo_gradient_mismatch`). Replay compares dequantized values with the fp32 replay: the int8
codes alone say nothing, since scaling a tensor leaves its codes unchanged.

An accepted or replayed file's evidence also carries the round statistics (`round_statistics`): its
norm, the ratio to the round's median norm, the cosine with the pool's running direction and the
flags they raise, which never decide a verdict.

Every verdict's evidence carries `batch: 0` (a node trains one shard per round), so the pipeline's
`first_of_its_batch` makes a second file of one node in one round `duplicate_batch`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from proofpool.validator.checks.facts import SubmissionFacts
from proofpool.validator.checks.verdict import Reason, Verdict, json_safe, quote, reject

from proofpool.core.diloco.compare import compare_update
from proofpool.core.diloco.spec import DilocoSpec
from proofpool.core.diloco.stats import cosine, global_norm, round_flags
from proofpool.core.diloco.update_file import Update, UpdateFileError, read_update
from proofpool.training.inner import InnerResult

if TYPE_CHECKING:
    import torch

BATCH: Final = 0
"""The batch a training file claims (`first_of_its_batch`): one per node and round."""

Replayer = Callable[[], InnerResult]
"""Recomputes the submission's inner steps from public inputs (checkpoint, dataset shard, spec)."""


@dataclass(frozen=True)
class RoundFacts:
    """What the pool's spec and the chain (as of the submission's block) say about the round."""

    spec: DilocoSpec
    spec_sha256: str
    """Hex: the pool's on-chain `specSha256` (= the spec's sha256, `pool_diloco_spec` checked it)."""
    shapes: Mapping[str, tuple[int, ...]]
    """The model's named parameters and their shapes: exactly the tensors a file must carry."""
    latest_version: int
    """The pool's newest published checkpoint version as of the submission's block (0: none)."""
    base_manifest_sha256: str | None
    """Hex manifest sha256 of checkpoint `model_version` (the spec's for version 0, the chain's
    otherwise); None when that version was not published as of the submission's block."""
    superseded_before: float | None
    """Seconds from the publication of checkpoint `model_version + 1` to the submission's block
    (both chain timestamps); None when it was not published then (the round was open)."""
    stale_grace: float = 0.0
    """A file submitted less than this after its round was superseded is not `stale`: the node
    trained while the aggregator closed the round."""
    max_file_bytes: int = 64 * 2**20
    reference_norm: float | None = None
    """The median norm of the round's other accepted files (None: none judged yet): the yardstick of
    the `norm_high` / `norm_low` flags."""
    direction: Callable[[], Mapping[str, torch.Tensor] | None] | None = None
    """The pool's running direction, the outer momentum of checkpoint `model_version` (None for
    version 0, where it is zero): a file pointing against it is flagged `opposed`. Loaded only
    for a file that passed the cheap checks."""


def judge_update(data: bytes, sub: SubmissionFacts, facts: RoundFacts, replay: Replayer | None) -> Verdict:
    """The verdict on a training pool's submitted file (see the module docstring for the order).

    `replay` is called once, only when every cheap check passed (None: not selected for replay).
    Malformed bytes are a rejection, never an exception; errors of `replay` (a checkpoint that
    cannot be fetched) propagate, since they say nothing about the file.
    """
    digest = hashlib.sha256(data).digest()
    if digest != sub.work_key:
        return reject("hash_mismatch", expected=sub.work_key.hex(), actual=digest.hex())
    if len(data) > facts.max_file_bytes:
        return reject("file_too_large", bytes=len(data), max_bytes=facts.max_file_bytes)
    spec = facts.spec
    try:
        update = read_update(data, facts.shapes, codec=spec.codec.name, block_size=spec.codec.block_size)
    except UpdateFileError as exc:
        return reject(exc.reason, detail=quote(exc.detail))
    rejected = check_meta(update, sub, facts) or check_round(sub, facts)
    if rejected is not None:
        return rejected
    rows = spec.inner.steps * spec.inner.batch_size
    evidence: dict[str, Any] = {"batch": BATCH, "round": sub.model_version, **round_statistics(update, facts)}
    if replay is None:
        return Verdict(accepted=True, reason=None, evidence=json_safe(evidence), rows=rows)
    result = replay()
    comparison = compare_update(update, result.pseudo_gradient, spec.validation.tolerance)
    evidence |= {
        "relative_l2": round(comparison.relative_l2, 6),
        "tolerance": spec.validation.tolerance,
        "bitwise": comparison.bitwise,
        "replay_sha256": comparison.replay_sha256,
        "replay_seconds": round(result.seconds, 3),
    }
    counted = {"rows": rows, "checked_rows": rows, "checked_tokens": update.meta.tokens}
    reason = None if comparison.within else "pseudo_gradient_mismatch"
    return Verdict(accepted=reason is None, reason=reason, evidence=json_safe(evidence), **counted)


def check_meta(update: Update, sub: SubmissionFacts, facts: RoundFacts) -> Verdict | None:
    """The file's metadata against the submission, the pool's spec and the round's checkpoint."""
    meta, spec = update.meta, facts.spec
    if meta.pool_id != sub.pool_id:
        return _mismatch("wrong_pool", meta.pool_id, sub.pool_id)
    if meta.node.lower() != sub.node.lower():
        return _mismatch("wrong_node", meta.node, sub.node)
    if meta.round != sub.model_version:
        return _mismatch("wrong_round", meta.round, sub.model_version)
    if meta.spec_sha256.lower() != facts.spec_sha256.lower():
        return _mismatch("wrong_spec", meta.spec_sha256, facts.spec_sha256)
    if sub.model_version > facts.latest_version or facts.base_manifest_sha256 is None:
        return _reject("wrong_round", model_version=sub.model_version, latest_version=facts.latest_version)
    if meta.base_manifest_sha256.lower() != facts.base_manifest_sha256.lower():
        return _mismatch("wrong_base", meta.base_manifest_sha256, facts.base_manifest_sha256)
    work = (
        ("work_units", sub.work_units, spec.work_units),  # what the chain will pay for
        ("tokens", meta.tokens, spec.work_units),
        ("inner_steps", meta.inner_steps, spec.inner.steps),
    )
    for name, claimed, expected in work:
        if claimed != expected:
            return _reject("wrong_units", field=name, claimed=claimed, expected=expected)
    losses = meta.losses
    if len(losses) != spec.inner.steps or not all(math.isfinite(x) for x in losses):
        finite = sum(math.isfinite(x) for x in losses)
        return _reject("loss_trace", losses=len(losses), finite=finite, inner_steps=spec.inner.steps)
    return None


def check_round(sub: SubmissionFacts, facts: RoundFacts) -> Verdict | None:
    """`stale`: the round's next checkpoint was published at least `stale_grace` seconds before the
    submission's block, so the aggregator had closed the round without this file. A file submitted
    within the grace is not the node's fault (it trained while the round closed) and is accepted."""
    age = facts.superseded_before
    if age is not None and not 0 <= age < facts.stale_grace:
        return _reject(
            "stale",
            model_version=sub.model_version,
            latest_version=facts.latest_version,
            superseded_before=round(age, 3),
            stale_grace=facts.stale_grace,
        )
    return None


def round_statistics(update: Update, facts: RoundFacts) -> dict[str, Any]:
    """The file's norm, its ratio to the round's median, its cosine with the running direction, and
    the flags those raise (`proofpool.core.diloco.stats.round_flags`). Flags are for people and
    dashboards, never a reason: a copied or wrong-data file has an ordinary norm and angle (only
    replay catches those), and an honest node on an unusual shard can have an unusual one."""
    values = update.dequantized()
    norm = global_norm(values)
    direction = facts.direction() if facts.direction is not None else None
    cos = cosine(values, direction) if direction else None
    reference = facts.reference_norm
    out: dict[str, Any] = {"norm": _digits(norm), "flags": round_flags(norm, reference, cos)}
    if reference:
        out["norm_ratio"] = _digits(norm / reference)
    if cos is not None:
        out["cosine"] = round(cos, 6)
    return out


def _digits(value: float) -> float:
    """`value` to 6 significant digits (a norm can be 1e-7 or 1e3)."""
    return float(f"{value:.6g}")


def _reject(reason: Reason, **evidence: Any) -> Verdict:
    return reject(reason, **evidence)


def _mismatch(reason: Reason, file: object, expected: object) -> Verdict:
    """A metadata field that is not the submission's: both values quoted (the file's is untrusted)."""
    return _reject(reason, file=quote(str(file)), expected=str(expected))
