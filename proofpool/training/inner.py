"""The inner phase of a DiLoCo round: H AdamW steps from a checkpoint on a node's rows.

Workers run it to make their pseudo-gradient; validators run the very same function to replay a
file and compare (`proofpool.core.diloco.compare`), so everything that could make two honest runs
differ is pinned here rather than left to the caller: the model is loaded in float32 with eager
attention (one code path on every machine) and every dropout probability at zero; the optimizer is
a fresh `AdamW(foreach=False)` (the per-parameter loop, whose arithmetic does not depend on how
tensors are grouped); the learning-rate schedule, the batches and the seed follow from the job and
the pool's `InnerSpec` alone. On one machine with one thread count two runs are bitwise equal;
across machines the replay tolerance covers what remains (kernel choice, summation order).

The pseudo-gradient is `theta_start - theta_end` per named parameter (`model.named_parameters()`,
so tied weights appear once, under the name transformers keeps).

A worker with several devices runs the same function on several processes (`run_inner(job,
world)` under `torchrun`, the model sharded with FSDP as the trainer shards it; `proofpool
training inner` is that command): every rank trains on an equal share of each step's rows, and
the result is the single process's up to summation order, which validators replaying in one
process accept. `write_job`/`read_job` and `write_result`/`read_result` carry a job to those
processes and the result back.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from proofpool.core.diloco.spec import InnerSpec
from proofpool.core.errors import ProofpoolError
from proofpool.core.spec import canonical_json
from proofpool.training.dataset import METADATA_KEY, load_dataset, write_atomic, write_dataset
from proofpool.training.distributed import SINGLE, World, full_state_dict, shard_model

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

SEED = 0
"""The torch seed of every inner run: nothing in training draws from it (no dropout), it only
keeps any architecture that would from differing between a worker and its validators."""


@dataclass(frozen=True)
class TrainJob:
    """One node's inner phase of one round: everything a worker and a replaying validator share."""

    pool_id: int
    round: int
    node: str
    checkpoint_dir: Path
    """Checkpoint `round`: a Hugging Face model directory (fp32 weights)."""
    tokens: torch.Tensor = field(repr=False)
    """The pool's whole dataset, int32 `[sequences, seq_len]`."""
    rows: list[int] = field(repr=False)
    """`proofpool.core.diloco.shard.node_rows(...)`: step i trains on rows[i*B:(i+1)*B]."""
    inner: InnerSpec


@dataclass(frozen=True)
class InnerResult:
    pseudo_gradient: dict[str, torch.Tensor] = field(repr=False)
    """float32, theta_start - theta_end, per named parameter."""
    losses: list[float]
    """The training loss of each inner step (before its update)."""
    tokens: int
    """Tokens trained on: steps * batch_size * seq_len (the submission's work units)."""
    seconds: float


class InnerFileError(ProofpoolError):
    """A job or result file of the inner phase run in other processes is unreadable; `reason`:
    `bad_job` or `bad_result`."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


JOB_KIND: Final = "diloco-inner-job"
RESULT_KIND: Final = "diloco-inner-result"
JOB_TOKENS: Final = "job-tokens.safetensors"


def write_job(job: TrainJob, directory: Path) -> Path:
    """Write `job` for `proofpool training inner --job` (run under torchrun) into `directory` and
    return the JSON file's path. Only the job's rows travel, in order, as a dataset file next to it
    (`steps * batch_size` rows, not the pool's whole dataset), so the job read back numbers them
    0, 1, ...: the same batches in the same order."""
    directory.mkdir(parents=True, exist_ok=True)
    check_job(job)
    sha256 = write_dataset(job.tokens[job.rows], directory / JOB_TOKENS)
    payload = {
        "kind": JOB_KIND,
        "pool_id": job.pool_id,
        "round": job.round,
        "node": job.node,
        "checkpoint_dir": str(Path(job.checkpoint_dir).resolve()),
        "tokens": JOB_TOKENS,
        "tokens_sha256": sha256,
        "inner": asdict(job.inner),
    }
    path = directory / "job.json"
    write_atomic(path, canonical_json(payload))
    return path


def read_job(path: Path) -> TrainJob:
    """The job `write_job` wrote at `path` (its tokens checked against their sha256)."""
    try:
        raw = json.loads(path.read_bytes())
        if raw.get("kind") != JOB_KIND:
            raise ValueError(f"kind {raw.get('kind')!r} is not {JOB_KIND!r}")
        tokens = load_dataset(path.parent / raw["tokens"], raw["tokens_sha256"])
        return TrainJob(
            pool_id=int(raw["pool_id"]),
            round=int(raw["round"]),
            node=str(raw["node"]),
            checkpoint_dir=Path(raw["checkpoint_dir"]),
            tokens=tokens,
            rows=list(range(int(tokens.shape[0]))),
            inner=InnerSpec(**raw["inner"]),
        )
    except (OSError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise InnerFileError("bad_job", f"{path}: {exc}") from exc


def write_result(result: InnerResult, path: Path) -> None:
    """`result` as a safetensors file (float32 pseudo-gradient; losses, tokens and seconds in the
    metadata, floats written exactly), atomically."""
    from safetensors.torch import save

    meta = {"kind": RESULT_KIND, "losses": result.losses, "tokens": result.tokens, "seconds": result.seconds}
    tensors = {name: tensor.detach().float().contiguous() for name, tensor in result.pseudo_gradient.items()}
    write_atomic(path, save(tensors, metadata={METADATA_KEY: json.dumps(meta)}))


def read_result(path: Path) -> InnerResult:
    """The result `write_result` wrote at `path`."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as file:
            meta = json.loads((file.metadata() or {})[METADATA_KEY])
            tensors = {name: file.get_tensor(name) for name in file.keys()}  # noqa: SIM118 - not a dict
        if meta.get("kind") != RESULT_KIND:
            raise ValueError(f"kind {meta.get('kind')!r} is not {RESULT_KIND!r}")
        return InnerResult(
            pseudo_gradient=tensors,
            losses=[float(loss) for loss in meta["losses"]],
            tokens=int(meta["tokens"]),
            seconds=float(meta["seconds"]),
        )
    except (OSError, SafetensorError, AttributeError, KeyError, TypeError, ValueError) as exc:
        raise InnerFileError("bad_result", f"{path}: {exc}") from exc


MODEL_LOCK: Final = threading.RLock()
"""Held while a model is loaded, trained or evaluated in this process. transformers patches torch
process-wide while it loads a model (init functions, a meta device), so a load in one thread can
break another thread's training step ("expected device meta but got cpu"): a validator replaying
files in threads, or the devnet's baselines beside its auditor, take turns. The inner phase is
CPU-bound and uses every intra-op thread anyway, so turns cost little."""


def load_model(checkpoint_dir: Path) -> PreTrainedModel:
    """The causal LM in `checkpoint_dir` as every role trains it: float32, eager attention, every
    dropout probability of its config at 0 (and every `Dropout` module's too), in train mode.

    Without transformers' loading progress bar: every role loads a checkpoint each round, and a bar
    per round in a worker's or validator's log says nothing."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with MODEL_LOCK:
        config = AutoConfig.from_pretrained(str(checkpoint_dir))
        for key, value in config.to_dict().items():
            if isinstance(value, float) and ("dropout" in key or key.endswith("pdrop")):
                setattr(config, key, 0.0)
        model = AutoModelForCausalLM.from_pretrained(
            str(checkpoint_dir), config=config, dtype=torch.float32, attn_implementation="eager"
        )
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        return model.train()


def parameter_shapes(model: PreTrainedModel) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every parameter a pseudo-gradient carries (tied weights once)."""
    return {name: tuple(parameter.shape) for name, parameter in model.named_parameters()}


def check_processes(inner: InnerSpec, processes: int) -> None:
    """`ValueError` unless every step's batch splits into `processes` equal shares: each process
    trains on as many rows as the others, so FSDP's average of their mean-loss gradients is the
    gradient of the whole batch's mean loss."""
    if processes < 1:
        raise ValueError(f"processes must be >= 1, not {processes}")
    if inner.batch_size % processes:
        raise ValueError(
            f"batch_size {inner.batch_size} does not divide among {processes} processes: "
            "each must train on an equal share of every step's rows"
        )


def check_job(job: TrainJob, processes: int = 1) -> None:
    """`ValueError` unless the job's rows fill exactly `steps` batches of rows of its dataset, each
    batch split evenly among `processes`."""
    inner = job.inner
    expected = inner.steps * inner.batch_size
    if len(job.rows) != expected:
        raise ValueError(f"{len(job.rows)} rows for {inner.steps} steps of {inner.batch_size}: expected {expected}")
    if job.tokens.dim() != 2:
        raise ValueError(f"tokens must be [sequences, seq_len], not {list(job.tokens.shape)}")
    population = int(job.tokens.shape[0])
    if any(not 0 <= row < population for row in job.rows):
        raise ValueError(f"a row index lies outside the dataset's {population} rows")
    check_processes(inner, processes)


def step_lr(inner: InnerSpec, step: int) -> float:
    """The learning rate of inner step `step` (0-based): linear warmup over `warmup_steps`."""
    return inner.lr * min(1.0, (step + 1) / (inner.warmup_steps + 1))


def inner_optimizer(parameters: Sequence[torch.nn.Parameter], inner: InnerSpec) -> torch.optim.AdamW:
    """A fresh inner AdamW as the spec sets it (lr replaced per step by `step_lr`); `foreach=False`,
    the per-tensor code path, the same on every CPU whatever the parameter count."""
    import torch

    return torch.optim.AdamW(
        parameters,
        lr=inner.lr,
        betas=(inner.beta1, inner.beta2),
        eps=inner.eps,
        weight_decay=inner.weight_decay,
        foreach=False,
    )


def run_inner(job: TrainJob, world: World = SINGLE) -> InnerResult:
    """Train a fresh copy of checkpoint `job.round` for `job.inner.steps` AdamW steps on the job's
    rows (labels = inputs, the model's own next-token loss) and return `theta_start - theta_end`.

    In one process (`SINGLE`) deterministic for a given machine and thread count (see the module
    docstring); the caller's thread settings are left as they are. On several (`world` from
    `proofpool.training.distributed.init_world`, every rank calling this with the same job) the
    model is sharded with FSDP and rank k trains on rows k::size of each step's batch; each rank's
    loss is the mean over its rows, so FSDP's average of the ranks' gradients is the gradient of
    the whole batch (the batch must split evenly: `check_processes`), and AdamW, the schedule and
    the clip (over the global norm) act on it as in one process. Rank 0 gets the pseudo-gradient
    and each step's loss averaged over the ranks; the other ranks get an empty pseudo-gradient.
    The result equals the single process's up to float summation order, well within the replay
    tolerance (tests/integration/test_inner_torchrun.py). Holds `MODEL_LOCK` throughout."""
    with MODEL_LOCK:
        return _train(job, world)


def _train(job: TrainJob, world: World) -> InnerResult:
    import torch

    check_job(job, world.size)
    inner = job.inner
    started = time.perf_counter()
    torch.manual_seed(SEED)
    model = load_model(job.checkpoint_dir)
    start = {name: p.detach().clone() for name, p in model.named_parameters()} if world.main else {}
    parameters = list(shard_model(model, world).parameters())  # this rank's shards under FSDP
    optimizer = inner_optimizer(parameters, inner)
    losses: list[float] = []
    batch = inner.batch_size
    for step in range(inner.steps):
        for group in optimizer.param_groups:
            group["lr"] = step_lr(inner, step)
        mine = job.rows[step * batch : (step + 1) * batch][world.rank :: world.size]
        ids = job.tokens[mine].long()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if inner.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(parameters, inner.grad_clip, foreach=False)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    losses = [total / world.size for total in world.sum(losses)]
    end = full_state_dict(model, world)  # a collective; {} on ranks > 0
    with torch.no_grad():
        delta = {name: (weights - end[name].detach()).float() for name, weights in start.items()}
    return InnerResult(
        pseudo_gradient=delta,
        losses=losses,
        tokens=inner.steps * batch * int(job.tokens.shape[1]),
        seconds=time.perf_counter() - started,
    )


def eval_loss(
    model_or_dir: PreTrainedModel | Path | str, tokens: torch.Tensor, rows: Sequence[int], batch_size: int = 16
) -> float:
    """Mean next-token loss of the model (or the model in a checkpoint directory) over `rows` of
    `tokens`, without gradients; a model passed in keeps its train/eval mode."""
    if not rows:
        raise ValueError("eval_loss needs at least one row")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size}")
    with MODEL_LOCK:
        return _mean_loss(model_or_dir, tokens, rows, batch_size)


def _mean_loss(
    model_or_dir: PreTrainedModel | Path | str, tokens: torch.Tensor, rows: Sequence[int], batch_size: int
) -> float:
    import torch

    model = load_model(Path(model_or_dir)) if isinstance(model_or_dir, Path | str) else model_or_dir
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        with torch.no_grad():
            for first in range(0, len(rows), batch_size):
                chosen = list(rows[first : first + batch_size])
                ids = tokens[chosen].long()
                total += float(model(input_ids=ids, labels=ids).loss) * len(chosen)
                count += len(chosen)
    finally:
        model.train(was_training)
    return total / count
