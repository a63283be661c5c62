"""Checks 4-5: TOPLOC per sample, then sampling reproduction, on one batched recomputation.

Both run in `proofpool.inference.check.check_samples` (one prefill, one batched pass of each check),
so worker and validator share the code; this module loads the submission's checkpoint, picks the
rows (all, a seeded subset, or none), and turns the per-row verdicts into the file's verdict and its
evidence. A file is rejected if any checked row is: the first such row (in file order) gives the
reason and the evidence. When every checked row passes, the file-level tests
(`proofpool.inference.check.file_verdict`) still run over all of them: `file_statistic` (TOPLOC's
mantissa and exponent agreement averaged over every chunk) and
`tie_steering` (more tolerated near-tie flips, at larger gaps, than engine noise explains). Their
figures are kept in accepted verdicts' evidence too (`file_statistic`, `tie_test`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proofpool.validator.checks.facts import PoolRules, SubmissionFacts
from proofpool.validator.checks.verdict import Verdict, json_safe

from proofpool.core.rollout import RolloutSample
from proofpool.inference.check import FileVerdict, SampleVerdict, check_samples, file_verdict

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ModelLoader = Callable[[int], "PreTrainedModel"]
"""Checkpoint version -> the loaded model (the caller caches it and has checked its hashes)."""


@dataclass(frozen=True)
class Recomputed:
    """The outcome of checks 4-5 for a file."""

    rejection: Verdict | None
    """The verdict if a checked row failed, else None."""
    checked_rows: int
    checked_tokens: int
    evidence: dict[str, Any] = field(default_factory=dict)
    """Summary of the checked rows, kept in an accepted verdict's evidence (margins to watch)."""


def validate_sampling_args(sample_rate: float, selection_seed: bytes | None, has_model: bool) -> None:
    """Raise ValueError for arguments no file can make right: they are the caller's bug.

    `sample_rate` must be in [0, 1]; below 1 and above 0 it needs `selection_seed` (bytes the worker
    could not know when it committed the file); above 0 it needs a model loader.
    """
    if not 0 <= sample_rate <= 1:
        raise ValueError(f"sample_rate must be in [0, 1], got {sample_rate}")
    if 0 < sample_rate < 1 and (not isinstance(selection_seed, bytes) or not selection_seed):
        raise ValueError("spot-checking needs a selection_seed (bytes the worker could not know)")
    if sample_rate > 0 and not has_model:
        raise ValueError("recomputation (sample_rate > 0) needs a model loader")


def recompute(
    samples: Sequence[RolloutSample],
    sub: SubmissionFacts,
    rules: PoolRules,
    model: ModelLoader | None,
    *,
    sample_rate: float,
    selection_seed: bytes | None,
) -> Recomputed:
    """TOPLOC and sampling verdicts for the chosen rows of a file that passed checks 1-3.

    At `sample_rate` 0 nothing is recomputed and the model is not loaded. Reasons pass through from
    `check_samples`: `proof_count_mismatch`, `proof_malformed`, `toploc_exp_mismatch`,
    `toploc_mantissa`, `length_exceeded`, `sampling_mismatch`, `eos_mismatch`; then, when every
    checked row passed, the file-level `file_statistic` and `tie_steering` (`file_verdict`).
    """
    drawn = selection_seed is not None and 0 < sample_rate < 1
    spot = {"sample_rate": sample_rate, "selection_seed": selection_seed.hex() if drawn else None}
    if sample_rate == 0:
        return Recomputed(None, 0, 0, {**spot, "recomputed": False})
    assert model is not None  # validate_sampling_args
    verdicts = check_samples(
        model(sub.model_version),
        samples,
        stop_ids=rules.stop_token_ids,
        max_tokens=rules.max_completion_tokens,
        sample_rate=sample_rate,
        selection_seed=selection_seed,
    )
    tokens = sum(len(samples[v.row].completion_tokens) for v in verdicts)
    summary = {**spot, **_summary(verdicts)}
    failed = next((v for v in verdicts if not v.accepted), None)
    if failed is None:
        whole = file_verdict(verdicts)
        summary = json_safe({**summary, **_file_evidence(whole)})
        if whole.accepted:
            return Recomputed(None, len(verdicts), tokens, summary)
        assert whole.reason is not None  # a rejected FileVerdict names its test
        reason, evidence = whole.reason, summary
    else:
        assert failed.reason is not None  # a rejected SampleVerdict names its rule
        reason, evidence = failed.reason, json_safe({**summary, **_row_evidence(failed)})
    rejection = Verdict(
        accepted=False,
        reason=reason,
        evidence=evidence,
        rows=len(samples),
        checked_rows=len(verdicts),
        checked_tokens=tokens,
    )
    return Recomputed(rejection, len(verdicts), tokens, summary)


def _summary(verdicts: Sequence[SampleVerdict]) -> dict[str, Any]:
    """Aggregate figures over the checked rows: how many failed, how many were reproduced token for
    token, the worst TOPLOC chunk, the tie count and the widest sampling gap (in perturbed-score
    units, against `DEFAULT_TIE_TOLERANCE`): how close honest files run to the thresholds."""
    chunks = [c for v in verdicts for c in v.toploc if c.error is None]
    reproduced = sum(v.sampling.reproduced == v.sampling.n_tokens for v in verdicts)
    return json_safe(
        {
            "recomputed": True,
            "checked_rows": len(verdicts),
            "rejected_rows": sum(not v.accepted for v in verdicts),
            "reproduced_fraction": reproduced / len(verdicts) if verdicts else 1.0,
            "tolerated_ties": sum(v.sampling.tolerated_ties for v in verdicts),
            "rechecked_in_fp32": sum(v.rechecked for v in verdicts),
            "worst_sampling_gap": max((v.sampling.max_gap for v in verdicts), default=0.0),
            "worst_exp_mismatches": max((c.exp_mismatches for c in chunks), default=None),
            "worst_mant_err_mean": max((c.mant_err_mean for c in chunks), default=None),
            "worst_mant_err_median": max((c.mant_err_median for c in chunks), default=None),
        }
    )


def _file_evidence(whole: FileVerdict) -> dict[str, Any]:
    """The file-level tests' figures: kept in accepted verdicts too, to watch honest margins."""
    s, t = whole.statistic, whole.ties
    return {
        "file_statistic": {
            "chunks": s.chunks,
            "mant_err_mean": s.mant_err_mean,
            "exp_mismatch_rate": s.exp_mismatch_rate,
        },
        "tie_test": {
            "near_ties": t.near_ties,
            "flips": t.flips,
            "expected_flips": t.expected_flips,
            "log_e_value": t.log_e_value,
            "p_value": t.p_value,
            "alpha": t.alpha,
        },
    }


def _row_evidence(v: SampleVerdict) -> dict[str, Any]:
    """The failing row, its per-chunk TOPLOC statistics and its sampling reproduction."""
    s = v.sampling
    return {
        "row": v.row,
        "toploc": [
            {
                "exp_mismatches": c.exp_mismatches,
                "mant_err_mean": c.mant_err_mean,
                "mant_err_median": c.mant_err_median,
                "error": c.error,
            }
            for c in v.toploc
        ],
        "sampling": {
            "n_tokens": s.n_tokens,
            "reproduced": s.reproduced,
            "tolerated_ties": s.tolerated_ties,
            "first_mismatch": s.first_mismatch,
            "eos_ok": s.eos_ok,
            "length_ok": s.length_ok,
            "max_gap": s.max_gap,
        },
    }
