"""What the trainer checks before it learns from an accepted rollout file.

"Accepted" means a validator looked at the file; it does not mean the bytes the trainer fetches
now are those bytes, nor that every value in them is safe to feed the model. One row with a NaN
advantage makes every weight NaN after a single step (and the next published checkpoint with
them); a token id of 2**31 - 1 crashes the embedding lookup, again after every restart if the
file is fetched anew. So each fetched file is screened here, with the cheap checks that need no
model run:

- file: its sha256 is its work key; it parses with the schema of `proofpool.core.rollout`; its
  metadata names the pool and the node the ledger says submitted it;
- row: finite reward, advantage and temperature; a reward in [0, 1] and a positive temperature;
  the model version of the submission (the behaviour policy is looked up by it); a non-empty
  prompt and completion, prompt + completion within the model's positions; token ids within the
  model's vocabulary;
- group: one problem per group, and each advantage its reward minus the group's mean reward
  (`proofpool.core.rl.advantages`, what workers write and validators recompute), so a finite but
  absurd advantage is refused as surely as a NaN.

A bad file is dropped whole. A bad row takes its whole group with it: group advantages are
centred on the group, so the rest of a group missing a row no longer sums to zero. Any file
with a problem is recorded in `PoisonList` (the work key and why), which is written to the state
directory at once, not with the state after the next published step, so a trainer that dies
before then still never fetches the file again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol

from proofpool.core.rl.advantages import group_advantages
from proofpool.core.rollout import RolloutFileError, RolloutSample, read_rollouts

log = logging.getLogger(__name__)

POISON_FILE = "poisoned-files.json"
REWARD_RANGE: Final = (0.0, 1.0)
"""What a pool's task set can score (`proofpool.core.environment.Taskset.score`)."""
ADVANTAGE_TOLERANCE: Final = 1e-5
"""Absolute, in reward units: `group_advantages` is deterministic in float32, so an honest file
matches exactly; the tolerance only spares a writer that sums a group in another order (the
validator's scoring check allows the same)."""


class _ModelConfig(Protocol):
    vocab_size: int
    max_position_embeddings: int


@dataclass(frozen=True)
class ModelLimits:
    """What the model can take: ids index its embedding table, positions its rotary cache."""

    vocab_size: int
    max_positions: int

    @classmethod
    def of(cls, config: _ModelConfig) -> ModelLimits:
        """The limits of a Hugging Face model config (`model.config`)."""
        return cls(int(config.vocab_size), int(config.max_position_embeddings))


@dataclass(frozen=True)
class Submission:
    """What the ledger says about a file: the screen checks the file against it."""

    work_key: bytes
    """sha256 of the file's bytes, as submitted on-chain."""
    pool_id: int
    node: str
    model_version: int


@dataclass(frozen=True)
class Screened:
    """The rows of a file fit to train on, and what was wrong with the rest."""

    rows: list[RolloutSample]
    problem: str | None = None
    """Why rows (or the whole file) were dropped; None for a clean file."""
    rows_dropped: int = 0


def screen_file(data: bytes, sub: Submission, limits: ModelLimits | None) -> Screened:
    """The rows of `data` fit to train on (see the module docstring); never raises on bad bytes.

    `limits` None skips the checks that need the model's config (vocabulary, positions).
    """
    problem = _file_problem(data, sub)
    if isinstance(problem, str):
        return Screened([], problem)
    rows = problem
    bad = {i: why for i, row in enumerate(rows) if (why := row_problem(row, sub, limits)) is not None}
    bad |= group_problems(rows, skip=bad.keys())
    if not bad:
        return Screened(rows)
    poisoned_groups = {rows[i].group_id for i in bad}  # group ids are numbered per file
    kept = [row for row in rows if row.group_id not in poisoned_groups]
    first = min(bad)
    why = f"{len(bad)} bad rows, first row {first}: {bad[first]}"
    return Screened(kept, why, len(rows) - len(kept))


def _file_problem(data: bytes, sub: Submission) -> str | list[RolloutSample]:
    """Why the file as a whole is unusable, or its rows when it is not."""
    digest = hashlib.sha256(data).digest()
    if digest != sub.work_key:
        return f"sha256_mismatch: bytes hash to 0x{digest.hex()}"
    try:
        meta, rows = read_rollouts(data)
    except RolloutFileError as exc:
        return f"unreadable: {exc}"
    if meta.pool_id != sub.pool_id:
        return f"wrong_pool: file says pool {meta.pool_id}, submitted to {sub.pool_id}"
    if meta.node.lower() != sub.node.lower():
        return f"wrong_node: file says {meta.node}, submitted by {sub.node}"
    return rows


def row_problem(row: RolloutSample, sub: Submission, limits: ModelLimits | None) -> str | None:
    """Why one row must not reach the model, or None.

    `limits` None skips the vocabulary and position checks (they need the model's config).
    """
    for name in ("reward", "advantage", "temperature"):
        value = getattr(row, name)
        if not math.isfinite(value):
            return f"non_finite: {name} is {value}"
    low, high = REWARD_RANGE
    if not low <= row.reward <= high:
        return f"reward_out_of_range: {row.reward} not in [{low}, {high}]"
    if not row.temperature > 0:
        return f"temperature_out_of_range: {row.temperature} is not positive"
    if row.model_version != sub.model_version:
        return f"model_version_mismatch: row {row.model_version}, submission {sub.model_version}"
    if not row.prompt_tokens or not row.completion_tokens:
        return "length_out_of_range: empty prompt or completion"
    if limits is None:
        return None
    tokens = (*row.prompt_tokens, *row.completion_tokens)
    if len(tokens) > limits.max_positions:
        return f"length_out_of_range: {len(tokens)} tokens > {limits.max_positions} positions"
    if min(tokens) < 0 or max(tokens) >= limits.vocab_size:
        bad = next(t for t in tokens if not 0 <= t < limits.vocab_size)
        return f"token_out_of_range: {bad} not in [0, {limits.vocab_size})"
    return None


def group_problems(rows: Sequence[RolloutSample], skip: Iterable[int] = ()) -> dict[int, str]:
    """Row index -> why, for rows that break their group: a group spanning problems
    (`group_mismatch`), or an advantage that is not the row's reward minus its group's mean reward
    (`advantage_mismatch`, which a NaN fails too). Groups holding a row in `skip` (already refused
    row by row, perhaps for a non-finite reward) are not looked at: they are dropped anyway.
    """
    groups: dict[int, list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        groups[row.group_id].append(i)
    refused = set(skip)
    out: dict[int, str] = {}
    for group_id, members in groups.items():
        if refused.intersection(members):
            continue
        problem_id = rows[members[0]].problem_id
        strays = [i for i in members if rows[i].problem_id != problem_id]
        if strays:
            out |= {i: f"group_mismatch: {rows[i].problem_id} in group {group_id} of {problem_id}" for i in strays}
            continue
        expected = group_advantages([rows[i].reward for i in members], [group_id] * len(members))
        for i, want in zip(members, expected, strict=True):
            if not abs(rows[i].advantage - want) <= ADVANTAGE_TOLERANCE:  # `not <=` so NaN fails too
                out[i] = f"advantage_mismatch: {rows[i].advantage}, reward minus group mean is {want}"
    return out


@dataclass
class PoisonList:
    """Work keys of accepted files the trainer refused, with why; persisted as JSON in the state dir.

    Written atomically on every new entry (temporary file, fsync, rename): the trainer's state is
    saved only after a published step, and a file that crashed or stalled the trainer before then
    must not be fetched again after the restart.
    """

    path: Path | None = None
    """None keeps the list in memory only (tests, one-off runs)."""
    reasons: dict[str, str] = field(default_factory=dict)
    """0x-hex work key -> reason."""

    @classmethod
    def load(cls, state_dir: Path) -> PoisonList:
        """The list saved in `state_dir`, empty when there is none yet."""
        path = state_dir / POISON_FILE
        reasons = json.loads(path.read_text()) if path.is_file() else {}
        return cls(path, {str(k): str(v) for k, v in reasons.items()})

    def __contains__(self, work_key: bytes) -> bool:
        return _hex(work_key) in self.reasons

    def record(self, work_key: bytes, reason: str, *, pool_id: int) -> None:
        """Remember `work_key` as poisoned (saved before returning) and log it."""
        log.warning(
            "poisoned rollout file skipped: %s",
            reason,
            extra={"pool": pool_id, "work_key": _hex(work_key), "reason": reason},
        )
        self.reasons[_hex(work_key)] = reason
        if self.path is not None:
            _write_json(self.path, self.reasons)


def _hex(work_key: bytes) -> str:
    return "0x" + work_key.hex()


def _write_json(path: Path, value: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".partial")
    with open(staging, "w") as handle:
        json.dump(value, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)
