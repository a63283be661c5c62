"""Judge rollout samples: their TOPLOC proofs, then their sampling, against a recomputation.

The two checks cover each other's blind spots. TOPLOC says the committed activations are the
model's on these tokens (catches another model, a perturbed model, a changed prompt, foreign
or broken proofs) but not that the tokens were sampled from the model; the sampling check says
each token is what the seeded sampler picks from the recomputed logits (catches tokens from a
cheap model proven afterwards with the right one, edited tokens, a false temperature or seed).
TOPLOC runs first, so a sample that fails both reports the TOPLOC reason, in the order the
validator lists its checks.

A file is checked in one batched prefill and one batched pass of each check (`check_samples`).
With `sample_rate` < 1 only a subset of rows is recomputed (spot-checking): the rows are drawn
from `selection_seed`, which the caller takes from something the worker could not know when it
built the file. A file with c cheated rows out of n, k of them checked, is caught with probability
`detection_probability(n, c, k)` = 1 - C(n - c, k) / C(n, k) (see docs/verifiable-inference.md).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from proofpool.core.sampling.gumbel import scores
from proofpool.core.sampling.ties import DEFAULT_TIE_ALPHA, TieTest, tie_test
from proofpool.core.sampling.verify import (
    DEFAULT_TIE_TOLERANCE,
    SamplingCheck,
    SamplingInput,
    SamplingReason,
    sampling_verdict,
    verify_batch,
)
from proofpool.core.toploc import DEFAULT_TOPK, ChunkCheck, toploc_verdict, verify_proof_blobs_batch
from proofpool.core.toploc.verify import NO_MATCH, ToplocReason
from proofpool.inference.prefill import Recomputation, prefill_batch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from proofpool.core.rollout import RolloutSample

SampleReason = ToplocReason | SamplingReason
FileReason = Literal["file_statistic", "tie_steering"]
"""Why `file_verdict` rejected a file whose checked rows each passed."""

MAX_FILE_MANT_ERR_MEAN: Final = 2.5
"""Largest mean |mantissa difference| over a file's chunks that passes. It grows with the model's
depth. Honest devnet files (4 layers; vLLM bf16 worker, bf16 and fp32 validators,
bench/results/detection.jsonl) run at 0.52-0.76 on the task and 0.91-1.15 on 48-token
completions, a file from the checkpoint one trainer step away at 3.8-6.3; on SmolLM2-135M (30
layers, bench/results/real_model.jsonl) honest 16-row files run at 1.28-1.75 and files from its
int8-quantized weights at 3.1-3.2 (docs/verifiable-inference.md)."""
MAX_FILE_EXP_MISMATCH_RATE: Final = 0.04
"""Largest share of exponent mismatches over a file's chunks that passes (honest: 0.005-0.024 on
the devnet model, up to 0.028 on SmolLM2; the devnet's neighbouring checkpoint: 0.049-0.094)."""

_SELECTION_DOMAIN: Final = b"proofpool/spot-check/v1"
"""Prefix of the per-row selection hash, so the draw cannot be confused with any other use of the seed."""


@dataclass(frozen=True)
class FileStatistic:
    """TOPLOC's agreement averaged over every chunk of a file's checked rows (rows that failed
    TOPLOC on their own are left to their row verdict): a model that is a little off on every row
    stays inside the per-chunk thresholds but not inside honest files' means.

    A count of chunks beyond a tighter per-chunk threshold would also see a model used on a few rows
    only, but honest chunks have a heavy tail on long contexts (one honest 48-token chunk reached a
    mantissa mean of 8.05 against the row threshold of 10), so no such threshold had a measured
    false-positive rate to rest on; see docs/verifiable-inference.md."""

    chunks: int
    """Chunks with a usable proof and at least one exponent match."""
    mant_err_mean: float
    """Mean over those chunks of their mean |mantissa difference| (0.0 without chunks)."""
    exp_mismatch_rate: float
    """Exponent mismatches per committed entry over those chunks (0.0 without chunks)."""

    @property
    def rejected(self) -> bool:
        """The file's activations drift further from the recomputation than honest files do."""
        return self.mant_err_mean > MAX_FILE_MANT_ERR_MEAN or self.exp_mismatch_rate > MAX_FILE_EXP_MISMATCH_RATE


def file_statistic(verdicts: Sequence[SampleVerdict]) -> FileStatistic:
    """The TOPLOC file statistic of `verdicts` (the checked rows of one file)."""
    chunks = [c for v in verdicts for c in v.toploc if c.error is None and c.mant_err_mean < NO_MATCH]
    if not chunks:
        return FileStatistic(0, 0.0, 0.0)
    return FileStatistic(
        chunks=len(chunks),
        mant_err_mean=sum(c.mant_err_mean for c in chunks) / len(chunks),
        exp_mismatch_rate=sum(c.exp_mismatches for c in chunks) / (len(chunks) * DEFAULT_TOPK),
    )


@dataclass(frozen=True)
class FileVerdict:
    """The file-level tests over checked rows that each passed on their own."""

    accepted: bool
    reason: FileReason | None
    """`file_statistic` (TOPLOC drift over the file) before `tie_steering`, as TOPLOC runs first."""
    statistic: FileStatistic
    ties: TieTest


def file_verdict(verdicts: Sequence[SampleVerdict], tie_alpha: float = DEFAULT_TIE_ALPHA) -> FileVerdict:
    """Judge what per-row thresholds cannot see: small differences that add up over a file.

    Only rows that passed count (a rejected row already rejects the file, and its numbers would
    swamp the statistic); with none, both tests pass vacuously."""
    passed = [v for v in verdicts if v.accepted]
    statistic = file_statistic(passed)
    ties = tie_test((v.sampling for v in passed), alpha=tie_alpha)
    reason: FileReason | None = "file_statistic" if statistic.rejected else "tie_steering" if ties.rejected else None
    return FileVerdict(reason is None, reason, statistic, ties)


@dataclass(frozen=True)
class SampleVerdict:
    """The verdict on one sample, with the evidence behind it."""

    accepted: bool
    reason: SampleReason | None
    """First failing rule (TOPLOC rules, then sampling rules); None when accepted."""
    toploc: tuple[ChunkCheck, ...]
    sampling: SamplingCheck
    row: int
    """The sample's row (= sample index) in its rollout file."""
    rechecked: bool = False
    """Accepted on a float32 recomputation after the reduced-precision one rejected its sampling
    (`recheck_in_fp32`); its evidence is the float32 one."""


def check_sample(
    recomputed: Recomputation,
    completion_tokens: Sequence[int],
    proofs: object,
    *,
    temperature: float,
    sampling_seed: int,
    sample_index: int,
    stop_ids: Collection[int],
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> SampleVerdict:
    """TOPLOC + sampling verdict for one sample, given the verifier's recomputation of it.

    `proofs` is the rollout row's concatenated proof blob, taken as untrusted: any value is
    judged, never raised on. `sample_index` is the row's index in its rollout file.
    """
    return _judge(
        [recomputed],
        [proofs],
        [SamplingInput(recomputed.logits, completion_tokens, temperature, sampling_seed, sample_index)],
        stop_ids=stop_ids,
        max_tokens=max_tokens,
        tie_tolerance=tie_tolerance,
    )[0]


def check_recomputed(
    samples: Sequence[RolloutSample],
    recomputed: Sequence[Recomputation],
    rows: Sequence[int],
    *,
    stop_ids: Collection[int],
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> list[SampleVerdict]:
    """Verdicts for rollout rows already recomputed: `samples[i]` is row `rows[i]` of its file and
    `recomputed[i]` the verifier's prefill of it. TOPLOC and sampling each run once for all of them."""
    return _judge(
        recomputed,
        [s.proofs for s in samples],
        [
            SamplingInput(r.logits, s.completion_tokens, s.temperature, s.sampling_seed, row)
            for s, r, row in zip(samples, recomputed, rows, strict=True)
        ],
        stop_ids=stop_ids,
        max_tokens=max_tokens,
        tie_tolerance=tie_tolerance,
    )


def check_samples(
    model: PreTrainedModel,
    samples: Sequence[RolloutSample],
    *,
    stop_ids: Collection[int],
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
    sample_rate: float = 1.0,
    selection_seed: bytes | None = None,
) -> list[SampleVerdict]:
    """Verdicts for the rows of a rollout file (row i has sample index i): one batched prefill, then
    batched TOPLOC and sampling checks.

    With `sample_rate` < 1 only `spot_check_rows(len(samples), sample_rate, selection_seed)` are
    recomputed and judged (at least one row); the verdicts come in row order and `SampleVerdict.row`
    says which rows they are. `selection_seed` must then be bytes the worker could not know when it
    built the file (the validator's own random bytes, or the hash of the block that recorded the
    submission); it is ignored at rate 1.

    Rows are expected to have passed the schema and bounds checks (token ids within the
    vocabulary, lengths within limits); out-of-vocabulary ids raise ValueError here.
    """
    rows = spot_check_rows(len(samples), sample_rate, selection_seed)
    chosen = [samples[i] for i in rows]
    recomputed = prefill_batch(model, [(s.prompt_tokens, s.completion_tokens) for s in chosen])
    verdicts = check_recomputed(
        chosen, recomputed, rows, stop_ids=stop_ids, max_tokens=max_tokens, tie_tolerance=tie_tolerance
    )
    return recheck_in_fp32(
        model, samples, verdicts, stop_ids=stop_ids, max_tokens=max_tokens, tie_tolerance=tie_tolerance
    )


def recheck_in_fp32(
    model: PreTrainedModel,
    samples: Sequence[RolloutSample],
    verdicts: Sequence[SampleVerdict],
    *,
    stop_ids: Collection[int],
    max_tokens: int,
    tie_tolerance: float = DEFAULT_TIE_TOLERANCE,
) -> list[SampleVerdict]:
    """Judge again the rows a reduced-precision model rejected for their sampling alone, with the
    tolerance widened by how much a float32 recomputation disagrees with it on that row; a row
    that passes in either precision is accepted (`SampleVerdict.rechecked`).

    A sampling gap is the disagreement of two engines' logits. Most positions are well conditioned
    and bf16 engines agree to a few hundredths; at an ill-conditioned one (an activation outlier
    that the final norm amplifies) bf16 kernels of different engines can disagree by a whole logit
    unit, and no precision of the validator's reproduces the worker's choice there (on the devnet,
    a vLLM worker committed a token that transformers ranked 0.87 behind the best in bf16 and 2.28
    behind in float32). The validator measures that conditioning itself: the committed token's
    margin behind the best, in bf16 and in float32, moves by `sensitivity` at the row's worst
    position, and the row is judged again in both precisions with `tie_tolerance + sensitivity`
    (scaled back to logit units): either may be the one nearer the worker's engine. An edited or
    cheap-model token sits in a well-conditioned position in most rows and trails by whole units in
    both precisions, so it stays rejected; a systematic use of wide positions is what the
    file-level tie-steering test looks for. Only failing rows are recomputed, so honest files cost
    nothing more."""
    import torch

    suspects = [i for i, v in enumerate(verdicts) if v.reason == "sampling_mismatch"]
    if not suspects or next(model.parameters()).dtype == torch.float32:
        return list(verdicts)
    exact = copy.deepcopy(model).float()
    rows = [verdicts[i].row for i in suspects]
    chosen = [samples[r] for r in rows]
    pairs = [(s.prompt_tokens, s.completion_tokens) for s in chosen]
    reduced, precise = prefill_batch(model, pairs), prefill_batch(exact, pairs)
    out = list(verdicts)
    for i, row, sample, low, high in zip(suspects, rows, chosen, reduced, precise, strict=True):
        widened = tie_tolerance + precision_sensitivity(low, high, sample, row) * (sample.temperature or 1.0)
        for recomputed in (high, low):  # either precision may be the one nearer the worker's
            [verdict] = check_recomputed(
                [sample], [recomputed], [row], stop_ids=stop_ids, max_tokens=max_tokens, tie_tolerance=widened
            )
            if verdict.accepted:
                out[i] = dataclasses.replace(verdict, rechecked=True)
                break
    return out


def precision_sensitivity(reduced: Recomputation, exact: Recomputation, sample: RolloutSample, row: int) -> float:
    """How far, in perturbed-score units, the committed tokens' margins behind the best score move
    between two recomputations of one row (bf16 and float32), at the row's worst position."""
    import torch

    positions = torch.arange(len(sample.completion_tokens))
    committed = torch.tensor(sample.completion_tokens, dtype=torch.long)
    margins = []
    for recomputed in (reduced, exact):
        perturbed = scores(recomputed.logits, sample.temperature, sample.sampling_seed, row, positions)
        margins.append(perturbed.max(dim=1).values - perturbed[positions, committed])
    return float((margins[0] - margins[1]).abs().max()) if len(positions) else 0.0


def spot_check_rows(n_rows: int, sample_rate: float, selection_seed: bytes | None) -> list[int]:
    """The rows a validator recomputes, ascending: all of them at rate 1, else the ceil(rate * n)
    (at least one) rows whose sha256(domain + seed + row) are smallest, a uniform draw without
    replacement that anyone holding the seed can repeat.

    Raises:
        ValueError: `sample_rate` outside (0, 1], or no `selection_seed` (bytes) below rate 1.
    """
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if sample_rate == 1:
        return list(range(n_rows))
    if not isinstance(selection_seed, bytes) or not selection_seed:
        raise ValueError("spot-checking needs a selection_seed (bytes the worker could not know)")
    k = min(n_rows, max(1, math.ceil(sample_rate * n_rows - 1e-9)))  # 0.1 * 30 is 3.0000000000000004
    prefix = hashlib.sha256(_SELECTION_DOMAIN + len(selection_seed).to_bytes(4, "big") + selection_seed)
    ranks = []
    for row in range(n_rows):
        h = prefix.copy()
        h.update(row.to_bytes(8, "big"))
        ranks.append((h.digest(), row))
    return sorted(row for _, row in sorted(ranks)[:k])


def detection_probability(n_rows: int, cheated_rows: int, checked_rows: int) -> float:
    """Chance that `checked_rows` rows drawn without replacement from `n_rows` include at least one
    of `cheated_rows`: 1 - C(n - c, k) / C(n, k). Assumes every checked cheated row is rejected
    (true for the cheats TOPLOC and the sampling check catch per sample; see the detection matrix)."""
    if not 0 <= cheated_rows <= n_rows or not 0 <= checked_rows <= n_rows:
        raise ValueError(f"need 0 <= cheated ({cheated_rows}), checked ({checked_rows}) <= rows ({n_rows})")
    return 1.0 - math.comb(n_rows - cheated_rows, checked_rows) / math.comb(n_rows, checked_rows)


def _judge(
    recomputed: Sequence[Recomputation],
    proofs: Sequence[object],
    sampling_inputs: Sequence[SamplingInput],
    *,
    stop_ids: Collection[int],
    max_tokens: int,
    tie_tolerance: float,
) -> list[SampleVerdict]:
    """TOPLOC for every sample in one batch, sampling in one batch, then one verdict per sample."""
    toploc = verify_proof_blobs_batch([r.hidden_states for r in recomputed], proofs)
    sampling = verify_batch(sampling_inputs, stop_ids, max_tokens, tie_tolerance=tie_tolerance)
    verdicts = []
    for chunks, check, claim in zip(toploc, sampling, sampling_inputs, strict=True):
        toploc_ok, toploc_reason = toploc_verdict(chunks)
        sampling_ok, sampling_reason = sampling_verdict(check)
        reason: SampleReason | None = toploc_reason if not toploc_ok else sampling_reason
        verdicts.append(
            SampleVerdict(
                accepted=toploc_ok and sampling_ok,
                reason=reason,
                toploc=tuple(chunks),
                sampling=check,
                row=claim.sample_index,
            )
        )
    return verdicts
