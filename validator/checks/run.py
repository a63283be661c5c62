"""All checks on one submission, in the order of DESIGN.md; the first failure is the verdict.

Cheap checks run first and on every row (hash, size, format, bounds, version window, assignment),
so a file that fails one never costs a model load or a prefill; the recomputation (TOPLOC, sampling) then
runs on all rows, a seeded subset, or none (`sample_rate`), and the scoring checks (rewards,
advantages, work units) run on every row again, as they cost nothing next to a prefill.
"""

from __future__ import annotations

import dataclasses

from proofpool.validator.checks.assignment import check_assignment
from proofpool.validator.checks.bounds import check_bounds
from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.file import ParsedFile, check_object, read_file
from proofpool.validator.checks.inference import ModelLoader, recompute, validate_sampling_args
from proofpool.validator.checks.scoring import check_scoring
from proofpool.validator.checks.verdict import Verdict
from proofpool.validator.checks.version import check_version


def run_checks(
    data: bytes,
    sub: SubmissionFacts,
    rules: PoolRules,
    model: ModelLoader | None,
    *,
    sample_rate: float = 1.0,
    selection_seed: bytes | None = None,
) -> Verdict:
    """The verdict on a submitted rollout file.

    Args:
        data: the object fetched from the store (untrusted).
        sub: what the chain recorded for the submission.
        rules: the pool's limits and newest checkpoint version.
        model: checkpoint version -> loaded model; called once, only if the cheap checks pass and
            `sample_rate` > 0 (None is allowed at rate 0).
        sample_rate: fraction of rows recomputed (1 = all, 0 = none: cheap checks only).
        selection_seed: bytes the worker could not know when it committed the file (the validator's
            own randomness, or the hash of the block that recorded the submission); needed when
            0 < sample_rate < 1, ignored otherwise.

    Malformed input of any kind is a rejection with a reason code, never an exception. Raises
    ValueError only for the caller's own mistakes (a sample rate outside [0, 1], a missing seed or
    model), and lets errors of `model` (e.g. a checkpoint that cannot be fetched) propagate, since
    they say nothing about the file.
    """
    validate_sampling_args(sample_rate, selection_seed, model is not None)
    rejected = check_object(data, sub, rules)
    if rejected is not None:
        return rejected
    parsed = read_file(data, sub, rules)
    if isinstance(parsed, Verdict):
        return parsed
    return _check_rows(parsed, sub, rules, model, sample_rate, selection_seed)


def _check_rows(
    parsed: ParsedFile,
    sub: SubmissionFacts,
    rules: PoolRules,
    model: ModelLoader | None,
    sample_rate: float,
    selection_seed: bytes | None,
) -> Verdict:
    """Checks 2b-8 on a file that parsed."""
    samples = parsed.samples
    rows = len(samples)
    rejected = check_bounds(samples, sub, rules) or check_version(sub, rules, rows)
    if rejected is not None:
        return rejected
    assigned: dict[str, int] = {}
    if rules.check_assignment:
        batch = check_assignment(samples, sub, rules)
        if isinstance(batch, Verdict):
            return batch
        assigned["batch"] = batch
    recomputed = recompute(samples, sub, rules, model, sample_rate=sample_rate, selection_seed=selection_seed)
    if recomputed.rejection is not None:
        return recomputed.rejection
    counted = {"checked_rows": recomputed.checked_rows, "checked_tokens": recomputed.checked_tokens}
    rejected = check_scoring(samples, sub, rules.taskset)
    if rejected is not None:
        return dataclasses.replace(rejected, **counted)
    work_units = sum(len(s.completion_tokens) for s in samples)
    evidence = {**recomputed.evidence, **assigned, "work_units": work_units}
    return Verdict(accepted=True, reason=None, evidence=evidence, rows=rows, **counted)
