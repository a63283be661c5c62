"""All checks on one submission, numbered as in DESIGN.md; the first failure is the verdict.

Cheap checks run first and on every row (hash, size, format, bounds, version window, assignment,
then the scoring checks: rewards, advantages, work units), so a file that fails one never costs a
model load or a prefill; the recomputation (TOPLOC, sampling, checks 4-5) runs last, on all rows,
a seeded subset, or none (`sample_rate`).

The two halves are public (`screen`, then `finish`) for a bundle of files
(`proofpool.validator.checks.bundle`), which screens every file before it recomputes any.
"""

from __future__ import annotations

from dataclasses import dataclass

from proofpool.validator.checks.assignment import check_assignment
from proofpool.validator.checks.bounds import check_bounds
from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.file import ParsedFile, check_object, read_file
from proofpool.validator.checks.inference import ModelLoader, recompute, validate_sampling_args
from proofpool.validator.checks.scoring import check_scoring
from proofpool.validator.checks.verdict import Verdict
from proofpool.validator.checks.version import check_version


@dataclass(frozen=True)
class Screened:
    """A file that passed every check but the recomputation (1-3b and 6-8)."""

    parsed: ParsedFile
    batch: int | None
    """The assigned batch the file answers (None when `PoolRules.check_assignment` is off)."""

    @property
    def rows(self) -> int:
        return len(self.parsed.samples)


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
    screened = screen(data, sub, rules)
    if isinstance(screened, Verdict):
        return screened
    return finish(screened, sub, rules, model, sample_rate=sample_rate, selection_seed=selection_seed)


def screen(data: bytes, sub: SubmissionFacts, rules: PoolRules) -> Screened | Verdict:
    """Every check that needs no model: 1-3b (the object, the file, every row's bounds, the version
    window, the assignment), then the scoring checks 6-8."""
    rejected = check_object(data, sub, rules)
    if rejected is not None:
        return rejected
    parsed = read_file(data, sub, rules)
    if isinstance(parsed, Verdict):
        return parsed
    samples = parsed.samples
    rejected = check_bounds(samples, sub, rules) or check_version(sub, rules, len(samples))
    if rejected is not None:
        return rejected
    if not rules.check_assignment:
        return _scored(Screened(parsed, None), sub, rules)
    batch = check_assignment(samples, sub, rules)
    if isinstance(batch, Verdict):
        return batch
    return _scored(Screened(parsed, batch), sub, rules)


def _scored(screened: Screened, sub: SubmissionFacts, rules: PoolRules) -> Screened | Verdict:
    rejected = check_scoring(screened.parsed.samples, sub, rules.taskset)
    return screened if rejected is None else rejected


def finish(
    screened: Screened,
    sub: SubmissionFacts,
    rules: PoolRules,
    model: ModelLoader | None,
    *,
    sample_rate: float,
    selection_seed: bytes | None = None,
) -> Verdict:
    """Checks 4-5 on a screened file (the recomputation), then the accepted verdict."""
    samples = screened.parsed.samples
    recomputed = recompute(samples, sub, rules, model, sample_rate=sample_rate, selection_seed=selection_seed)
    if recomputed.rejection is not None:
        return recomputed.rejection
    counted = {"checked_rows": recomputed.checked_rows, "checked_tokens": recomputed.checked_tokens}
    work_units = sum(len(s.completion_tokens) for s in samples)
    assigned = {} if screened.batch is None else {"batch": screened.batch}
    evidence = {**recomputed.evidence, **assigned, "work_units": work_units}
    return Verdict(accepted=True, reason=None, evidence=evidence, rows=len(samples), **counted)
