"""Cheating workers for the devnet and fault drills: `proofpool worker run --cheat MODE`.

The validators' checks are only worth what they catch, so the devnet needs workers that cheat the
way a dishonest provider would, through the real loop (join, heartbeat, upload, `submitWork`) and
not only through files forged in a test. A cheating worker is an honest `WorkerNode` whose
`proofpool.worker.strategy.RolloutStrategy` is a `Cheater`: three hooks, all here, that change how its rollout
files are made and nothing else, and no staleness check before sending:

- `Cheater.model_path`: which model directory generates (and so proves) the batch;
- `Cheater.make_file`: the rollout file, from an honest generation or instead of one;
- `Cheater.on_chain`: the journaled batch as `submitWork` sees it (the claimed model version).

- `other-model`: generates and proves with the devnet model built from another init seed while
  claiming the assigned version; caught by TOPLOC (`toploc_exp_mismatch`, `toploc_mantissa`).
- `edit-tokens`: generates honestly, rewrites wrong completions to the right answer and rescores
  the file, keeping the original proofs; caught by TOPLOC or the sampling check
  (`sampling_mismatch`, ...: the first failing row decides).
- `stale-version`: never leaves checkpoint 0 and says so in the file and on-chain; caught by the
  version window (`stale_model_version`) once the pool's latest version exceeds the async window,
  and before that by the assignment check (`seed_not_assigned`).
- `replay`: submits its first honest batch again for later assignments: the same rows in other
  bytes (other Parquet row groups), so another work key, and every per-file check passes; caught
  because its batch was accepted once already (`duplicate_batch`, `proofpool.validator.checks.assignment`).
  Which of the two files is judged first decides which one is invalidated.

Everything a cheater does is announced on the console and logged as a warning with the mode
(`CHEATING (other-model)`): a drill must never be mistaken for a faulty honest node. The pure
file transforms (`edit_to_correct_answers`, `reencode`, `restamp_version`) are separate
from the hooks so they can be tested without vLLM.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from proofpool.core.environment import Progress, Taskset
from proofpool.core.errors import ConfigError

if TYPE_CHECKING:
    from proofpool.worker.journal import JournalEntry
    from proofpool.worker.rollout import RolloutFile

    from proofpool.core.rollout import RolloutFileMeta, RolloutSample
    from proofpool.infra.http.node_api import Assignment

# Only the standard library at import time: the CLI imports `CheatMode` to declare `--cheat`, and
# `proofpool.worker.rollout` pulls in vLLM (seconds), which `proofpool --help` must not pay for. The functions
# import what they use.

log = logging.getLogger(__name__)

OTHER_MODEL_SEED: Final = 1
"""Init seed of the `other-model` cheat's model; the devnet's base model is seed 0."""
STALE_VERSION: Final = 0
"""The checkpoint a `stale-version` cheater keeps generating with (and claims)."""


@runtime_checkable
class DrillEnvironment(Protocol):
    """What the cheats need of a pool's environment beyond `proofpool.core.environment.Environment`:
    the answer a perfect policy writes (`edit-tokens`) and a model of the same shape from another
    seed (`other-model`). The devnet's arithmetic environment provides both; a pool on a Hugging
    Face model gets them from `proofpool.devnet.model_drill.ModelDrill`."""

    taskset: Taskset

    def reference_completion(self, problem_id: str) -> tuple[int, ...]:
        """The completion a perfect policy writes, ending with the end-of-sequence token."""
        ...

    def variant_model(self, seed: int, progress: Progress | None = None) -> Path:
        """The base model's architecture drawn from another init seed (cached like the base model)."""
        ...


def drill_environment(model_uri: str, spec_sha256: bytes) -> DrillEnvironment:
    """The environment of a pool created with `model_uri` and on-chain `specSha256`, reached as every
    role reaches it (`proofpool.envs.pool_environment`), if the cheats can run on it."""
    from proofpool.envs import pool_environment
    from proofpool.envs.tokenized import ModelEnvironment

    environment = pool_environment(model_uri, spec_sha256)
    if isinstance(environment, ModelEnvironment):
        from proofpool.devnet.model_drill import ModelDrill

        return ModelDrill(environment)
    if not isinstance(environment, DrillEnvironment):
        raise ConfigError(f"the {environment.name} environment supports no cheat drills (it has no reference answers)")
    return environment


class CheatMode(StrEnum):
    """How a cheating worker makes its rollout files (the values are the CLI's `--cheat` choices)."""

    OTHER_MODEL = "other-model"
    EDIT_TOKENS = "edit-tokens"
    STALE_VERSION = "stale-version"
    REPLAY = "replay"


EXPECTED_REASONS: Final[dict[CheatMode, frozenset[str]]] = {
    CheatMode.OTHER_MODEL: frozenset({"toploc_exp_mismatch", "toploc_mantissa"}),
    CheatMode.EDIT_TOKENS: frozenset(
        {"toploc_exp_mismatch", "toploc_mantissa", "sampling_mismatch", "eos_mismatch", "proof_count_mismatch"}
    ),
    CheatMode.STALE_VERSION: frozenset({"stale_model_version", "seed_not_assigned"}),
    CheatMode.REPLAY: frozenset({"duplicate_batch"}),
}
"""The verdict reasons validators are expected to give each cheat (the first failing row decides
between TOPLOC and the sampling check). A `stale-version` file is `stale_model_version` once version
0 is out of the pool's async window and, inside it, `seed_not_assigned`: its rows carry the seed of
the batch it was assigned under the newer version."""


def banner(mode: CheatMode) -> str:
    """The tag every console line and log record of a cheater carries."""
    return f"CHEATING ({mode.value})"


# --- pure file transforms ---------------------------------------------------------------------


def correct_completion(environment: DrillEnvironment, problem_id: str, max_tokens: int) -> tuple[int, ...]:
    """The completion a perfect policy writes, cut at `max_tokens`."""
    return environment.reference_completion(problem_id)[:max_tokens]


def rescore(taskset: Taskset, rows: Sequence[RolloutSample]) -> list[RolloutSample]:
    """`rows` with rewards and group advantages recomputed exactly as validators do, so a tampered
    file stays self-consistent and only the recomputation checks (TOPLOC, sampling) can catch it."""
    from proofpool.core.rl.advantages import group_advantages

    rewards = [taskset.score(r.problem_id, r.completion_tokens) for r in rows]
    advantages = group_advantages(rewards, [r.group_id for r in rows])
    return [dataclasses.replace(r, reward=w, advantage=a) for r, w, a in zip(rows, rewards, advantages, strict=True)]


def edit_to_correct_answers(
    environment: DrillEnvironment, rows: Sequence[RolloutSample], max_tokens: int
) -> tuple[list[RolloutSample], int]:
    """The `edit-tokens` cheat: every row the model got wrong now states the right answer.

    Rows already rewarded are left as they are (there is nothing to gain), the proofs of every row
    are kept as generated (the cheater cannot prove tokens the model did not produce), and rewards
    and advantages are recomputed. Returns the rows and how many were edited.
    """
    edited: list[RolloutSample] = []
    changed = 0
    for row in rows:
        if environment.taskset.score(row.problem_id, row.completion_tokens) == 1.0:  # the best reward there is
            edited.append(row)
            continue
        answer = correct_completion(environment, row.problem_id, max_tokens)
        changed += answer != row.completion_tokens
        edited.append(dataclasses.replace(row, completion_tokens=answer))
    return rescore(environment.taskset, edited), changed


def reencode(meta: RolloutFileMeta, rows: Sequence[RolloutSample], replay: int) -> RolloutFile:
    """The `replay` cheat's file: `rows` unchanged, written in row groups of len(rows) - `replay` rows.

    The rows (prompts, tokens, proofs, seeds) are the original's, so the file passes every check that
    looks at the rows; only the bytes, and so the work key, differ (an exact repeat would be refused
    by `submitWork` itself). Replay k has its own row-group layout, so no two replays share bytes.
    """
    import pyarrow.parquet as pq

    from proofpool.core.rollout.io import rollouts_table

    if not 1 <= replay < len(rows):
        raise ValueError(f"replay {replay} of a {len(rows)}-row file: needs 1 <= replay < rows")
    buffer = io.BytesIO()
    pq.write_table(rollouts_table(meta, rows), buffer, row_group_size=len(rows) - replay, use_dictionary=False)
    return _file(buffer.getvalue(), rows)


def restamp_version(rows: Sequence[RolloutSample], version: int = STALE_VERSION) -> list[RolloutSample]:
    """`rows` claiming `version` (the `stale-version` cheat says what it generated with)."""
    return [dataclasses.replace(r, model_version=version) for r in rows]


def claimed_version(mode: CheatMode | None, assigned: int) -> int:
    """The model version a worker in `mode` writes into its file and sends to `submitWork`."""
    return STALE_VERSION if mode is CheatMode.STALE_VERSION else assigned


def to_file(meta: RolloutFileMeta, rows: Sequence[RolloutSample]) -> RolloutFile:
    """Serialize rows the way `proofpool.worker.rollout.generate_rollout_file` does."""
    from proofpool.core.rollout import rollouts_bytes

    return _file(rollouts_bytes(meta, rows), rows)


def _file(data: bytes, rows: Sequence[RolloutSample]) -> RolloutFile:
    """`data` with its hash, work units and row count, as the worker journals a file."""
    from proofpool.worker.rollout import RolloutFile, work_units

    return RolloutFile(data, hashlib.sha256(data).digest(), work_units(rows), len(rows))


# --- the hooks ----------------------------------------------------------------------------------


def other_model(environment: DrillEnvironment, progress: Progress | None = None) -> Path:
    """The model an `other-model` cheater generates with: the pool's model from another init seed,
    built on first use (minutes on a busy CPU), then cached like the real one."""
    return environment.variant_model(OTHER_MODEL_SEED, progress)


class Cheater:
    """A worker's cheat: the `proofpool.worker.strategy.RolloutStrategy` of `proofpool worker run --cheat`.

    State lives in memory only (the `replay` cheat's first batch): a restarted cheater starts over.
    """

    checks_staleness = False
    """A `stale-version` cheater sends batches the window refuses; every cheater skips the check."""

    def __init__(self, mode: CheatMode, environment: DrillEnvironment, say: Callable[[str], None]) -> None:
        self.mode = mode
        self.environment = environment
        self._say = say
        self._first_rows: list[RolloutSample] | None = None
        """`replay`: the rows of the first (honest) batch."""
        self._replays = 0
        self.announce(f"this worker submits dishonest rollout files on purpose (expect {self._expected()})")

    def announce(self, text: str, **extra: object) -> None:
        """Say `text` on the console and log it as a warning, both tagged with the banner."""
        self._say(f"[bold red]{banner(self.mode)}[/bold red] {text}")
        log.warning("%s %s", banner(self.mode), text, extra={"cheat": self.mode.value, **extra})

    def model_path(self, a: Assignment, resolve: Callable[[Assignment], Path]) -> Path:
        """The model directory that generates the batch of `a` (`resolve` is the honest resolver)."""
        if self.mode is CheatMode.OTHER_MODEL:
            path = other_model(self.environment, progress=self._say)
            self.announce(
                f"generating checkpoint {a.checkpoint_version}'s batch with {path.name} (seed {OTHER_MODEL_SEED})"
            )
            return path
        if self.mode is CheatMode.STALE_VERSION and a.checkpoint_version != STALE_VERSION:
            self.announce(f"assigned checkpoint {a.checkpoint_version}, generating with {STALE_VERSION} instead")
            stale = dataclasses.replace(a, checkpoint_version=STALE_VERSION, manifest_sha256=None, checkpoint_uri=None)
            return resolve(stale)
        return resolve(a)

    def make_file(self, a: Assignment, meta: RolloutFileMeta, generate: Callable[[], RolloutFile]) -> RolloutFile:
        """The rollout file submitted for `a`; `generate` makes the honest one (with `model_path`'s model)."""
        context = {"version": a.checkpoint_version, "batch": a.batch}
        if self.mode is CheatMode.OTHER_MODEL:
            return generate()  # the model was swapped already: the file itself is "honest"
        if self.mode is CheatMode.REPLAY and self._first_rows is not None:
            self._replays += 1
            replay = (self._replays - 1) % (len(self._first_rows) - 1) + 1  # 1 .. rows - 1, then again
            self.announce(f"batch {a.batch}: replaying the first batch's rows in other bytes", **context)
            return reencode(meta, self._first_rows, replay)
        from proofpool.core.rollout import read_rollouts

        honest = generate()
        _, rows = read_rollouts(honest.data)
        if self.mode is CheatMode.REPLAY:
            self._first_rows = rows
            self.announce(f"batch {a.batch}: honest, kept to replay for later assignments", **context)
            return honest
        if self.mode is CheatMode.EDIT_TOKENS:
            rows, edited = edit_to_correct_answers(self.environment, rows, a.max_tokens)
            if edited:
                self.announce(
                    f"batch {a.batch}: rewrote {edited} of {len(rows)} completion(s) to the right answer", **context
                )
            else:
                self.announce(f"batch {a.batch}: every completion was right already, the file stays honest", **context)
            return to_file(meta, rows)
        # STALE_VERSION: generated with checkpoint 0 (model_path); the file says so.
        self.announce(
            f"batch {a.batch} of checkpoint {a.checkpoint_version}: file claims version {STALE_VERSION}", **context
        )
        return to_file(meta, restamp_version(rows))

    def on_chain(self, entry: JournalEntry) -> JournalEntry:
        """The journaled batch as `submitWork` sends it: the journal keeps the assigned version
        (the backend's batch counter is per version), the chain gets the claimed one."""
        return dataclasses.replace(entry, version=claimed_version(self.mode, entry.version))

    def _expected(self) -> str:
        return " or ".join(sorted(EXPECTED_REASONS[self.mode]))
