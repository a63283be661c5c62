"""Cheating training workers for the devnet and the detection matrix: `proofpool worker run --train-cheat KIND`.

A training pool pays for pseudo-gradients it cannot see being made; validators replay a sampled
share of files from public inputs (checkpoint, seeded rows, the spec's inner recipe) and compare the
dequantized values within a relative-L2 tolerance. These are the ways a provider would try to be paid
for less (or other) work than the pool asked for, each made from the real `run_inner`:

- `scaled`: the honest update times 10 (a node trying to pull the average its way). Its int8 codes
  are the honest ones (the lookup table scales), so only a comparison of dequantized values sees it;
- `sign-flipped`: minus the honest update (an attacker undoing everyone's progress);
- `random`: Gaussian noise of the honest update's norm, per tensor (no training at all, and norm
  statistics see nothing);
- `lazy`: H/4 inner steps on the first H/4 batches, the loss trace padded to H entries with the last
  loss (less work for the same pay, and a well-formed file);
- `copied`: another node's honest update: the same job with that node's rows (a copy of a file already
  in the store; norm, cosine and loss statistics all look honest);
- `wrong-data`: honest training on rows drawn from another seed (data of the node's choosing);
- `stale`: honest training from the previous checkpoint (a node that did not fetch the new one).

Every one is caught by replay as `pseudo_gradient_mismatch` (`tests/unit/test_diloco_cheats.py`, the
detection matrix). A cheater announces itself like the rollout cheaters (`proofpool.devnet.adversary`):
a drill must never be mistaken for a faulty honest node.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import torch

    from proofpool.training.inner import InnerResult, TrainJob

# Only the standard library at import time: the CLI imports `TrainCheat` to declare `--train-cheat`,
# and `proofpool --help` must not pay for torch. The functions import what they use.

log = logging.getLogger(__name__)


class TrainCheat(StrEnum):
    """How a cheating worker makes its pseudo-gradient (the values are `--train-cheat`'s choices)."""

    SCALED = "scaled"
    SIGN_FLIPPED = "sign-flipped"
    RANDOM = "random"
    LAZY = "lazy"
    COPIED = "copied"
    WRONG_DATA = "wrong-data"
    STALE = "stale"


EXPECTED_REASON: Final = "pseudo_gradient_mismatch"
"""The verdict reason validators give every train cheat (when they replay its file)."""
SCALE: Final = 10.0
LAZY_FRACTION: Final = 4
"""A lazy cheater runs steps // LAZY_FRACTION inner steps (at least one)."""
COPIED_FROM: Final = "0x" + hashlib.sha256(b"proofpool/devnet/copied-from").hexdigest()[:40]
"""The node whose rows a `copied` cheater's update is trained on: what copying that node's file gives."""
WRONG_DATA_TAG: Final = b"proofpool/devnet/wrong-data"


def banner(kind: TrainCheat) -> str:
    """The tag every console line and log record of a train cheater carries."""
    return f"CHEATING ({kind.value})"


def cheat_update(
    kind: TrainCheat,
    job: TrainJob,
    *,
    previous_checkpoint_dir: Path | None = None,
    training_rows: int | None = None,
    honest: Callable[[TrainJob], InnerResult] | None = None,
) -> InnerResult:
    """The pseudo-gradient a `kind` cheater submits for `job` (its metadata: losses, tokens, as the
    honest ones would read). `honest` runs the honest inner phase (default `run_inner`; a caller that
    already has the honest result passes a function returning it). `previous_checkpoint_dir` is
    checkpoint `job.round - 1` (`stale` only); `training_rows` is the pool's number of training rows
    (`DilocoSpec.training_rows`) the `copied` and `wrong-data` rows are drawn from (default: every row
    of the dataset)."""
    import torch

    from proofpool.core.diloco.shard import round_seed, shard_indices
    from proofpool.training.inner import run_inner

    honest = honest or run_inner
    kind = TrainCheat(kind)
    started = time.perf_counter()
    population = training_rows or int(job.tokens.shape[0])
    if kind in (TrainCheat.SCALED, TrainCheat.SIGN_FLIPPED, TrainCheat.RANDOM):
        result = honest(job)
        if kind is TrainCheat.RANDOM:
            delta = gaussian_like(result.pseudo_gradient, seed=round_seed(job.pool_id, job.round, job.node))
        else:
            factor = SCALE if kind is TrainCheat.SCALED else -1.0
            delta = {name: (t * factor).to(torch.float32) for name, t in result.pseudo_gradient.items()}
        return dataclasses.replace(result, pseudo_gradient=delta, seconds=time.perf_counter() - started)
    if kind is TrainCheat.LAZY:
        steps = max(1, job.inner.steps // LAZY_FRACTION)
        short = dataclasses.replace(
            job,
            inner=dataclasses.replace(job.inner, steps=steps),
            rows=job.rows[: steps * job.inner.batch_size],
        )
        result = run_inner(short)
        padded = result.losses + [result.losses[-1]] * (job.inner.steps - steps)
        claimed = job.inner.steps * job.inner.batch_size * int(job.tokens.shape[1])
        return dataclasses.replace(result, losses=padded, tokens=claimed, seconds=time.perf_counter() - started)
    if kind is TrainCheat.COPIED:
        rows = shard_indices(round_seed(job.pool_id, job.round, COPIED_FROM), len(job.rows), population)
        result = run_inner(dataclasses.replace(job, rows=rows))
    elif kind is TrainCheat.WRONG_DATA:
        seed = hashlib.sha256(WRONG_DATA_TAG + round_seed(job.pool_id, job.round, job.node)).digest()
        result = run_inner(dataclasses.replace(job, rows=shard_indices(seed, len(job.rows), population)))
    else:  # STALE
        if previous_checkpoint_dir is None:
            raise ValueError(f"a stale update of round {job.round} needs checkpoint {job.round - 1}")
        result = run_inner(dataclasses.replace(job, checkpoint_dir=Path(previous_checkpoint_dir)))
    return dataclasses.replace(result, seconds=time.perf_counter() - started)


def gaussian_like(tensors: dict[str, torch.Tensor], seed: bytes) -> dict[str, torch.Tensor]:
    """Standard normal noise per tensor (seeded, so a drill repeats), rescaled to each tensor's L2
    norm: the update's per-tensor and global norms are the honest ones."""
    import torch

    generator = torch.Generator().manual_seed(int.from_bytes(seed[:8], "big"))
    noise: dict[str, torch.Tensor] = {}
    for name in sorted(tensors):
        value = tensors[name].to(torch.float32)
        draw = torch.randn(value.shape, generator=generator, dtype=torch.float32)
        norm = float(draw.double().norm())
        noise[name] = draw * (float(value.double().norm()) / norm) if norm > 0 else draw
    return {name: noise[name] for name in tensors}


class TrainCheater:
    """A worker's train cheat: the `proofpool.worker.train.TrainStrategy` of `proofpool worker run
    --train-cheat KIND`. Stateless: a restarted cheater cheats the same way.

    `previous_checkpoint(version)` returns the local directory of checkpoint `version` (the worker
    passes one that fetches and verifies it like the current one); only `stale` calls it, with
    `job.round - 1`. In round 0 there is no older checkpoint: a `stale` cheater trains honestly then.
    """

    def __init__(
        self,
        kind: TrainCheat | str,
        *,
        previous_checkpoint: Callable[[int], Path] | None = None,
        training_rows: int | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.kind = TrainCheat(kind)
        self.previous_checkpoint = previous_checkpoint
        self.training_rows = training_rows
        self._say = say
        if self.kind is TrainCheat.STALE and previous_checkpoint is None:
            raise ValueError("the stale cheat needs a way to fetch the previous checkpoint")
        self.announce(f"this worker submits dishonest pseudo-gradients on purpose (expect {EXPECTED_REASON})")

    def announce(self, text: str, **extra: object) -> None:
        """Say `text` on the console (if the worker gave a way) and log it as a warning, both tagged."""
        if self._say is not None:
            self._say(f"[bold red]{banner(self.kind)}[/bold red] {text}")
        log.warning("%s %s", banner(self.kind), text, extra={"cheat": self.kind.value, **extra})

    def pseudo_gradient(self, job: TrainJob, honest: Callable[[TrainJob], InnerResult]) -> InnerResult:
        """The update this cheater submits for `job`; `honest` is the worker's honest inner phase."""
        previous = None
        if self.kind is TrainCheat.STALE:
            if job.round == 0:
                self.announce("round 0 has no older checkpoint: training honestly this round", round=job.round)
                return honest(job)
            assert self.previous_checkpoint is not None  # checked at construction
            previous = self.previous_checkpoint(job.round - 1)
        result = cheat_update(
            self.kind, job, previous_checkpoint_dir=previous, training_rows=self.training_rows, honest=honest
        )
        self.announce(f"round {job.round}: a {self.kind.value} pseudo-gradient, not the honest one", round=job.round)
        return result
