"""DiLoCo in one process, without the market: the reference curve and its baselines.

The market run (`proofpool devnet run --kind diloco`) shows that workers, validators and the
aggregator reach a training result through the chain; this module says what that result should be.
`simulate` runs the same rounds with the same functions the market's roles run — `node_rows` for the
shards, `run_inner` for the inner phase, `encode_update`/`read_update` for the files, `compare_update`
against a replay for the validators' verdict, `outer_round` and `write_round_checkpoint` for the
aggregator — so the devnet report, `bench/diloco.py` and the convergence test compare the market's
curve against it and against two baselines trained on the same rows with the same inner recipe:

- `single_node_baseline`: one node training alone, H inner steps per round on its own shard with one
  AdamW kept across rounds (warmup once): the DiLoCo paper's single-worker baseline, as many
  sequential steps as each DiLoCo worker (the same wall-clock time) and a 1/k share of the compute.
  `same_compute=True` trains on the rows of all k nodes in turn instead, k*H steps per round: DiLoCo's
  compute, k times its wall-clock time (on a small model early in training, k times the sequential
  steps beat any k-way parallel scheme; it is reported, not the bar).
- `data_parallel_baseline`: the same compute as DiLoCo with synchronous training: each of the H steps
  of a round averages the gradients of the k nodes' batches of that step (a batch of k*B rows, AdamW),
  as k workers all-reducing every step would (k*H forward/backward passes of B rows per round, like
  DiLoCo's, and H/1 times its communication).

Every curve holds the held-out eval loss (the spec's last `eval_sequences` rows) of the starting
checkpoint and after each round: `rounds + 1` values.

The simulation replays each node's job once and uses that one result both as the honest worker's
update and as the validators' replay: on one machine and thread count `run_inner` is bitwise
deterministic, so an honest file's comparison is the bitwise fast path, as a validator sharing the
worker's CPU sees it. Replays on another code path (`ATEN_CPU_CAPABILITY`) and every cheat are tested
against independent replays in `tests/unit/test_diloco_cheats.py`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from proofpool.devnet.diloco.cheats import TrainCheat, TrainCheater

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

    from proofpool.core.diloco.spec import DilocoSpec
    from proofpool.training.inner import InnerResult, TrainJob

SIM_POOL_ID: Final = 1
EVAL_BATCH: Final = 16


def sim_nodes(count: int) -> list[str]:
    """`count` node addresses (checksummed) for a simulation: the same on every run."""
    from eth_utils import to_checksum_address

    digests = (hashlib.sha256(f"proofpool/devnet/sim-node/{i}".encode()).hexdigest() for i in range(count))
    return [to_checksum_address(digest[:40]) for digest in digests]


@dataclass(frozen=True)
class FileResult:
    """One submitted file of a simulated round and what the validators' replay made of it."""

    round: int
    node: str
    work_key: str
    bytes: int
    cheat: str | None
    relative_l2: float
    bitwise: bool
    within: bool
    included: bool
    """Averaged into the round's outer step (always without replay filtering)."""


@dataclass(frozen=True)
class Curve:
    """A training run's held-out eval loss before training and after each round."""

    label: str
    eval_losses: list[float]
    inner_steps: int
    """Sequential optimizer steps per round (what a round's wall-clock time is made of)."""
    tokens_per_round: int
    """Tokens trained on per round by everyone (the compute)."""
    seconds: float

    @property
    def final(self) -> float:
        return self.eval_losses[-1]


@dataclass(frozen=True)
class SimResult(Curve):
    """A simulated DiLoCo run: its curve, every file's replay comparison, and what each round averaged."""

    files: list[FileResult] = field(default_factory=list)
    delta_norms: list[float] = field(default_factory=list)
    """The averaged pseudo-gradient's global norm per round (before clipping)."""
    inner_losses: list[float] = field(default_factory=list)
    """Mean over the round's included files of their last inner loss."""

    def included(self, round: int) -> list[str]:
        return [f.node for f in self.files if f.round == round and f.included]


def simulate(
    model_dir: Path,
    tokens: torch.Tensor,
    spec: DilocoSpec,
    *,
    workers: int | Sequence[str] = 4,
    rounds: int = 12,
    codec: str | None = None,
    cheaters: Mapping[str, TrainCheat | str] | None = None,
    replay_filter: bool = False,
    pool_id: int = SIM_POOL_ID,
    work_dir: Path | None = None,
    label: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> SimResult:
    """`rounds` DiLoCo rounds of `workers` nodes (a count, named by `sim_nodes`, or the addresses)
    from the checkpoint in `model_dir` on `tokens` (the pool's dataset), with the spec's recipe.

    `codec` overrides the spec's codec name ("int8" or "fp32"). `cheaters` maps node addresses to a
    `TrainCheat`: those nodes submit cheat updates. With `replay_filter` a file outside the replay
    tolerance is left out of the average (the validators invalidated it); without it every file is
    averaged (the trusting DiLoCo of PRIME and the other open engines); a round whose every file is
    rejected raises `RoundError` (the market's round would not close). Checkpoints are written to
    `work_dir` (new or empty; a temporary directory by default), which keeps the last two versions."""
    from proofpool.core.diloco.compare import compare_update
    from proofpool.core.diloco.shard import node_rows
    from proofpool.core.diloco.spec import CodecSpec
    from proofpool.core.diloco.update_file import UpdateMeta, encode_update, read_update
    from proofpool.training.inner import TrainJob, load_model, parameter_shapes, run_inner
    from proofpool.training.rounds import outer_round, write_round_checkpoint

    if codec is not None and codec != spec.codec.name:
        block_size = 0 if codec == "fp32" else spec.codec.block_size
        spec = dataclasses.replace(spec, codec=CodecSpec(name=codec, block_size=block_size))
    nodes = sim_nodes(workers) if isinstance(workers, int) else list(workers)
    cheating = {_address(node, nodes): TrainCheat(kind) for node, kind in (cheaters or {}).items()}
    spec_sha256 = spec.sha256()
    started = time.perf_counter()
    eval_model = load_model(Path(model_dir))
    shapes = parameter_shapes(eval_model)
    eval_rows = spec.eval_rows
    losses = [_eval(eval_model, tokens, eval_rows)]
    files: list[FileResult] = []
    norms: list[float] = []
    inner_losses: list[float] = []
    checkpoints = {0: Path(model_dir)}
    strategies = {
        node: TrainCheater(kind, previous_checkpoint=checkpoints.__getitem__, training_rows=spec.training_rows)
        for node, kind in cheating.items()
    }
    with _work_dir(work_dir) as root:
        for r in range(rounds):
            checkpoint = checkpoints[r]
            manifest = _manifest_sha256(pool_id, r, checkpoint)
            updates = []
            last_losses = []
            for node in nodes:
                job = TrainJob(pool_id, r, node, checkpoint, tokens, node_rows(spec, pool_id, r, node), spec.inner)
                replay = run_inner(job)
                result = replay
                if node in strategies:
                    result = strategies[node].pseudo_gradient(job, _returning(replay))
                meta = UpdateMeta(
                    pool_id=pool_id,
                    node=node,
                    round=r,
                    base_manifest_sha256=manifest,
                    spec_sha256=spec_sha256,
                    codec=spec.codec.name,
                    block_size=spec.codec.block_size,
                    inner_steps=spec.inner.steps,
                    tokens=spec.work_units,
                    losses=tuple(result.losses),
                )
                data = encode_update(result.pseudo_gradient, meta)
                update = read_update(data, shapes, codec=spec.codec.name, block_size=spec.codec.block_size)
                comparison = compare_update(update, replay.pseudo_gradient, spec.validation.tolerance)
                included = comparison.within or not replay_filter
                key = hashlib.sha256(data).hexdigest()
                files.append(
                    FileResult(
                        round=r,
                        node=node,
                        work_key=key,
                        bytes=len(data),
                        cheat=cheating[node].value if node in cheating else None,
                        relative_l2=comparison.relative_l2,
                        bitwise=comparison.bitwise,
                        within=comparison.within,
                        included=included,
                    )
                )
                if included:
                    updates.append((key, update))
                    last_losses.append(result.losses[-1])
            weights, momentum, record = outer_round(checkpoint, updates, spec, pool_id, r, manifest)
            following = root / f"v{r + 1}"
            write_round_checkpoint(checkpoint, weights, momentum, record, following)
            checkpoints[r + 1] = following
            if r - 1 >= 1:  # the stale cheat reads version r - 1 next round at most
                shutil.rmtree(checkpoints.pop(r - 1), ignore_errors=True)
            _load_weights(eval_model, weights)
            losses.append(_eval(eval_model, tokens, eval_rows))
            norms.append(record.delta_norm)
            inner_losses.append(sum(last_losses) / len(last_losses))
            if progress is not None:
                progress(f"round {r}: eval loss {losses[-1]:.4f}, {len(updates)}/{len(nodes)} files averaged")
    return SimResult(
        label=label or f"diloco-{spec.codec.name}" + (("-filtered" if replay_filter else "-naive") if cheating else ""),
        eval_losses=losses,
        inner_steps=spec.inner.steps,
        tokens_per_round=len(nodes) * spec.work_units,
        seconds=time.perf_counter() - started,
        files=files,
        delta_norms=norms,
        inner_losses=inner_losses,
    )


def single_node_baseline(
    model_dir: Path,
    tokens: torch.Tensor,
    spec: DilocoSpec,
    *,
    rounds: int = 12,
    workers: int | Sequence[str] = 4,
    same_compute: bool = False,
    pool_id: int = SIM_POOL_ID,
    label: str | None = None,
) -> Curve:
    """One node training alone with one AdamW across rounds (the spec's inner recipe, warmup once).

    `workers` are the DiLoCo run's nodes (a count or the addresses). By default the first of them
    trains alone on its own shard, H steps per round: the DiLoCo paper's single-worker baseline, the
    same wall-clock time as DiLoCo with 1/workers of its compute. With `same_compute` it trains on
    every node's shard in turn, workers*H steps per round: DiLoCo's compute, workers times its time."""
    from proofpool.core.diloco.shard import node_rows

    nodes = sim_nodes(workers) if isinstance(workers, int) else list(workers)
    if not same_compute:
        nodes = nodes[:1]
    batch = spec.inner.batch_size

    def batches(r: int) -> list[list[list[int]]]:
        rows = [row for node in nodes for row in node_rows(spec, pool_id, r, node)]
        return [[rows[i : i + batch]] for i in range(0, len(rows), batch)]

    curve = _baseline(model_dir, tokens, spec, rounds, batches)
    return dataclasses.replace(
        curve,
        label=label or ("single-node-same-compute" if same_compute else "single-node"),
        inner_steps=len(nodes) * spec.inner.steps,
        tokens_per_round=len(nodes) * spec.work_units,
    )


def data_parallel_baseline(
    model_dir: Path,
    tokens: torch.Tensor,
    spec: DilocoSpec,
    *,
    rounds: int = 12,
    workers: int | Sequence[str] = 4,
    pool_id: int = SIM_POOL_ID,
    label: str | None = None,
) -> Curve:
    """Synchronous data parallel with DiLoCo's compute: H AdamW steps per round, step i averaging the
    gradients of every node's i-th batch (a batch of workers*B rows; see the module docstring)."""
    from proofpool.core.diloco.shard import node_rows

    nodes = sim_nodes(workers) if isinstance(workers, int) else list(workers)
    batch = spec.inner.batch_size

    def batches(r: int) -> list[list[list[int]]]:
        shards = [node_rows(spec, pool_id, r, node) for node in nodes]
        return [[rows[i * batch : (i + 1) * batch] for rows in shards] for i in range(spec.inner.steps)]

    curve = _baseline(model_dir, tokens, spec, rounds, batches)
    return dataclasses.replace(
        curve,
        label=label or "data-parallel",
        inner_steps=spec.inner.steps,
        tokens_per_round=len(nodes) * spec.work_units,
    )


def _baseline(
    model_dir: Path,
    tokens: torch.Tensor,
    spec: DilocoSpec,
    rounds: int,
    batches: Callable[[int], list[list[list[int]]]],
) -> Curve:
    """Train one model with one AdamW (the spec's inner settings and lr schedule over the global step
    count): round r makes one optimizer step per entry of `batches(r)`, whose gradient is the mean of
    its micro-batches' losses (equal-size batches of full rows, so the mean over all its tokens)."""
    import torch

    from proofpool.training.inner import SEED, inner_optimizer, load_model, step_lr

    started = time.perf_counter()
    inner = spec.inner
    torch.manual_seed(SEED)
    model = load_model(Path(model_dir))
    parameters = [p for _, p in model.named_parameters()]
    optimizer = inner_optimizer(parameters, inner)
    eval_rows = spec.eval_rows
    losses = [_eval(model, tokens, eval_rows)]
    step = 0
    for r in range(rounds):
        for micro in batches(r):
            for group in optimizer.param_groups:
                group["lr"] = step_lr(inner, step)
            for rows in micro:
                ids = tokens[rows].long()
                (model(input_ids=ids, labels=ids).loss / len(micro)).backward()
            if inner.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(parameters, inner.grad_clip, foreach=False)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
        losses.append(_eval(model, tokens, eval_rows))
    return Curve(label="", eval_losses=losses, inner_steps=0, tokens_per_round=0, seconds=time.perf_counter() - started)


def _eval(model: PreTrainedModel, tokens: torch.Tensor, rows: Sequence[int]) -> float:
    from proofpool.training.inner import eval_loss

    return eval_loss(model, tokens, rows, batch_size=EVAL_BATCH)


def _load_weights(model: PreTrainedModel, weights: Mapping[str, torch.Tensor]) -> None:
    import torch

    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.copy_(weights[name])


def _manifest_sha256(pool_id: int, version: int, directory: Path) -> str:
    """The sha256 of a manifest listing the checkpoint directory's files (what its round's files name
    as their base; the market's is the published manifest of the sharded checkpoint)."""
    from proofpool.infra.checkpoint.manifest import manifest_of_files

    files = sorted(p for p in Path(directory).iterdir() if p.is_file() and not p.name.startswith("."))
    return manifest_of_files(pool_id, version, files).sha256_hex()


def _returning(result: InnerResult) -> Callable[[TrainJob], InnerResult]:
    """An honest inner phase that was already run."""
    return lambda _job: result


def _address(node: str, nodes: Sequence[str]) -> str:
    """`node` as spelled in `nodes` (addresses compare in any case)."""
    for known in nodes:
        if known.lower() == node.lower():
            return known
    raise ValueError(f"cheater {node} is not one of the simulated nodes")


@contextmanager
def _work_dir(path: Path | None) -> Iterator[Path]:
    """`path` (created if missing), or a temporary directory removed afterwards."""
    if path is not None:
        Path(path).mkdir(parents=True, exist_ok=True)
        yield Path(path)
        return
    with tempfile.TemporaryDirectory(prefix="proofpool-diloco-sim-") as temporary:
        yield Path(temporary)
