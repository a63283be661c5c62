"""A bundle of rollout files (`submitWorkBundle`): every file judged as a single file is, one verdict.

A bundle is one submission on-chain (one work key, the bundle key; the summed work units), so it
is accepted or invalid as a whole: one bad file invalidates it, and its node is slashed and
ejected once, as for a single bad file. Each file is judged with the checks of a single file
(`proofpool.validator.checks.run`), against facts of its own: its key and its units from the
bundle's event, and the bundle's pool, node and model version.

So that a clearly bad file is rejected without recomputing the good ones, every file is screened
first (fetched, then every check that needs no model: 1-3b and the scoring checks 6-8,
`proofpool.validator.checks.run.screen`), in bundle order, and only then is each file recomputed
(checks 4-5), in bundle order. Judging stops at the first file found invalid; its verdict (the one
the file gets alone) is the bundle's, with `file_key`, `file_index` and `bundle_files` added to its
evidence.

Two files of one bundle that answer the same assigned batch are caught while screening (the second
is `duplicate_batch`); a batch that another submission holds is caught when the accepted bundle
claims its files' batches (`claim_batches`, called with the validator's `batch_claims`).

Pure like the rest of the package: the store is behind `fetch`, the checkpoint behind `model`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from proofpool.validator.checks.facts import MIB, PoolRules, SubmissionFacts
from proofpool.validator.checks.inference import ModelLoader, validate_sampling_args
from proofpool.validator.checks.run import Screened, finish, screen
from proofpool.validator.checks.verdict import Verdict, json_safe, reject

KEEP_PARSED_BYTES: Final = 16 * MIB
"""Bytes of screened files whose parsed rows are kept for the recomputation (a parsed row costs
about 30 times its Parquet size); files beyond are fetched and parsed again when their turn
comes, so a bundle of 128 large files never holds them all in memory."""

SUMMARY_KEYS: Final = (
    "batch",
    "work_units",
    "reproduced_fraction",
    "tolerated_ties",
    "rechecked_in_fp32",
    "worst_sampling_gap",
    "worst_exp_mismatches",
    "worst_mant_err_mean",
    "judged_rows",
    "reward_disagreements",
    "inconclusive_rows",
)
"""What an accepted bundle's evidence keeps of each file's evidence: its batch, its units and the
margins to watch, not the file-level test figures (the document stays small at 128 files)."""

Fetch = Callable[[SubmissionFacts], "bytes | Verdict"]
"""The file of one entry (`SubmissionFacts.work_key` is the file's key): its bytes from the store,
or the verdict that it cannot be had (`missing`, `file_too_large`)."""

Accepted = Callable[[int, SubmissionFacts, Verdict], Verdict]
"""Called for each file of an accepted bundle (index, facts, the file's verdict) before the
bundle's verdict is composed; returns the file's verdict, its evidence completed (the pipeline
stores a code pool's judgements of the file here), or a rejection, which is then the bundle's."""


def bundle_facts(
    pool_id: int, node: str, model_version: int, files: Sequence[tuple[bytes, int]]
) -> tuple[SubmissionFacts, ...]:
    """The facts each file of a bundle is judged against: its own key and units, the bundle's
    pool, node and model version."""
    return tuple(SubmissionFacts(pool_id, key, node, units, model_version) for key, units in files)


def judge_bundle(
    files: Sequence[SubmissionFacts],
    fetch: Fetch,
    rules: PoolRules,
    model: ModelLoader | None,
    *,
    sample_rate: float,
    selection_seed: bytes | None = None,
    not_yet: tuple[type[Exception], ...] = (),
    accepted: Accepted | None = None,
    keep_bytes: int = KEEP_PARSED_BYTES,
) -> Verdict:
    """The verdict on a bundle (see the module docstring).

    `fetch` may raise one of `not_yet` for a file that is not in the store yet but may still come:
    screening goes on with the other files, and the first such exception is raised at the end of
    screening unless another file was invalid (then that is the verdict). `model`, `sample_rate`
    and `selection_seed` are `run_checks`'s, applied to every file; a spot check draws each file's
    rows with the seed followed by the file's key, so files do not all have the same rows drawn.
    Raises ValueError for an empty bundle and the caller mistakes `run_checks` refuses.
    """
    if not files:
        raise ValueError("a bundle has at least one file")
    validate_sampling_args(sample_rate, selection_seed, model is not None)
    count = len(files)
    kept: dict[int, Screened] = {}
    judged: dict[int, Verdict] = {}
    batches: dict[int, int] = {}
    waiting: Exception | None = None
    kept_bytes = 0
    for index, facts in enumerate(files):
        try:
            data = fetch(facts)
        except not_yet as exc:
            waiting = waiting or exc
            continue
        screened = _screen(data, facts, rules)
        if isinstance(screened, Verdict):
            return _file_rejected(index, facts, screened, count)
        if screened.batch is not None:
            first = batches.setdefault(screened.batch, index)
            if first != index:
                duplicate = reject(
                    "duplicate_batch",
                    screened.rows,
                    batch=screened.batch,
                    model_version=facts.model_version,
                    first_work_key=files[first].work_key.hex(),
                )
                return _file_rejected(index, facts, duplicate, count)
        if sample_rate == 0:  # nothing to recompute: the file's verdict is final now
            judged[index] = finish(screened, facts, rules, None, sample_rate=0)
        elif kept_bytes + len(data) <= keep_bytes:
            kept[index] = screened
            kept_bytes += len(data)
    if waiting is not None:
        raise waiting
    for index, facts in enumerate(files):
        if index in judged:
            continue
        screened_again = kept.pop(index, None) or _screen(fetch(facts), facts, rules)
        if isinstance(screened_again, Verdict):  # screened before: only a store that changed the bytes
            return _file_rejected(index, facts, screened_again, count)
        seed = None if selection_seed is None else selection_seed + facts.work_key  # each file its own draw
        verdict = finish(screened_again, facts, rules, model, sample_rate=sample_rate, selection_seed=seed)
        if not verdict.accepted:
            return _file_rejected(index, facts, verdict, count)
        judged[index] = verdict
    verdicts = [judged[i] for i in range(count)]
    if accepted is not None:
        for index, facts in enumerate(files):
            verdicts[index] = accepted(index, facts, verdicts[index])
            if not verdicts[index].accepted:
                return _file_rejected(index, facts, verdicts[index], count)
    return _bundle_accepted(files, verdicts, sample_rate)


def claim_batches(work_key: bytes, model_version: int, verdict: Verdict, claim: Callable[[int], bytes]) -> Verdict:
    """An accepted bundle claims each file's batch in bundle order (`claim(batch)` returns the key
    holding it, `work_key` when the claim is ours); the first file whose batch another submission
    holds makes the bundle `duplicate_batch` with that file's key and index. A rejected verdict, or
    one that is not a bundle's, is returned unchanged.

    The caller rolls the claims back when the result is a rejection: only accepted work holds batches.
    """
    entries = verdict.evidence.get("files") if verdict.accepted else None
    if not isinstance(entries, list):
        return verdict
    for index, entry in enumerate(entries):
        batch = entry.get("batch")
        if batch is None:
            continue
        owner = claim(int(batch))
        if owner != work_key:
            return reject(
                "duplicate_batch",
                int(entry["rows"]),
                batch=batch,
                model_version=model_version,
                first_work_key=owner.hex(),
                file_key=entry["file_key"],
                file_index=index,
                bundle_files=len(entries),
            )
    return verdict


def _screen(data: bytes | Verdict, facts: SubmissionFacts, rules: PoolRules) -> Screened | Verdict:
    """Checks 1-3b, then 6-8: everything about one file that needs no model."""
    return data if isinstance(data, Verdict) else screen(data, facts, rules)


def _file_rejected(index: int, facts: SubmissionFacts, verdict: Verdict, count: int) -> Verdict:
    """The bundle's verdict when file `index` is invalid: that file's verdict, naming the file."""
    evidence = {**verdict.evidence, "file_key": facts.work_key.hex(), "file_index": index, "bundle_files": count}
    return Verdict(
        accepted=False,
        reason=verdict.reason,
        evidence=evidence,
        rows=verdict.rows,
        checked_rows=verdict.checked_rows,
        checked_tokens=verdict.checked_tokens,
    )


def _bundle_accepted(files: Sequence[SubmissionFacts], verdicts: Sequence[Verdict], sample_rate: float) -> Verdict:
    """Every file accepted: the bundle's rows and recomputation summed, a summary per file."""
    summaries: list[dict[str, Any]] = []
    for facts, verdict in zip(files, verdicts, strict=True):
        kept = {k: verdict.evidence[k] for k in SUMMARY_KEYS if k in verdict.evidence}
        summaries.append(
            {"file_key": facts.work_key.hex(), "rows": verdict.rows, "checked_rows": verdict.checked_rows, **kept}
        )
    evidence = {
        "bundle_files": len(files),
        "files": summaries,
        "sample_rate": sample_rate,
        "work_units": sum(f.work_units for f in files),
    }
    return Verdict(
        accepted=True,
        reason=None,
        evidence=json_safe(evidence),
        rows=sum(v.rows for v in verdicts),
        checked_rows=sum(v.checked_rows for v in verdicts),
        checked_tokens=sum(v.checked_tokens for v in verdicts),
    )
