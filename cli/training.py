"""`proofpool training`: what a training pool's creator prepares before `pool create --spec`.

A training pool (DiLoCo, `proofpool.core.diloco.spec`) commits to a base model and a tokenized
dataset by hash. `dataset` turns text files into that dataset with the model's own tokenizer, once,
so no member ever tokenizes (tokenizer versions drift; token ids do not). `spec` writes the pool's
spec for the model and the dataset: every number members, validators and the aggregator must agree
on, with defaults sized for the devnet; `pool create --spec FILE --model DIR --dataset FILE` then
publishes it and creates the pool as `diloco://<sha256>`. `inner` is what a member's worker runs
under torchrun when it trains on several processes (`worker run --train-processes N`).
"""

from __future__ import annotations

import glob
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from proofpool.cli.common import console, needs_extra

from proofpool.core.errors import ProofpoolError

app = typer.Typer(no_args_is_help=True)

PROGRESS_STEPS = 10
"""`dataset` reports its progress this many times over the files (and once at the end)."""
INNER_COLLECTIVE_TIMEOUT = timedelta(minutes=10)
"""Bound on any one collective of `inner` under torchrun: the ranks run the same steps in lockstep,
so a rank waiting this long means a peer died or hangs (torchrun ends the others when one fails)."""


@app.command()
@needs_extra("trainer")
def dataset(
    model: Annotated[Path, typer.Option("--model", "-m", help="The base model's directory (its tokenizer is used).")],
    files: Annotated[
        list[str],
        typer.Option(
            "--files",
            help="Text files to pack: a path or a quoted glob (`**` recurses), e.g. 'corpus/**/*.py'; repeat for more.",
        ),
    ],
    seq_len: Annotated[int, typer.Option("--seq-len", min=2, help="Tokens per row (the model's context in training).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the dataset (safetensors).")],
    name: Annotated[str, typer.Option(help="A name for people, kept in the file (e.g. python-stdlib-3.13).")] = "",
) -> None:
    """Tokenize text files with the model's tokenizer into a training pool's dataset; prints its row
    count and sha256.

    Files are read in sorted path order, each as UTF-8 text followed by the tokenizer's end-of-sequence
    token, all concatenated and cut into rows of --seq-len tokens (the last partial row is dropped).
    Same files, tokenizer and --seq-len: same bytes, same sha256."""
    from transformers import AutoTokenizer

    from proofpool.training.dataset import pack_texts, write_dataset

    paths = _expand(files)
    total = sum(path.stat().st_size for path in paths)
    console.print(f"tokenizing {len(paths):,} files ({total:,} bytes) with the tokenizer of {model}")
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    tokens = pack_texts(_texts(paths), tokenizer, seq_len)
    sha256 = write_dataset(tokens, out, name)
    rows = int(tokens.shape[0])
    console.print(f"wrote {out}: {rows:,} rows of {seq_len} tokens ({rows * seq_len:,} tokens); sha256:")
    typer.echo(sha256)


def _expand(patterns: Sequence[str]) -> list[Path]:
    """The files the patterns name, sorted and once each; a pattern that names no file is refused
    (a typo would otherwise leave silently out what the creator meant to train on)."""
    found: set[Path] = set()
    for pattern in patterns:
        matched = [Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file()]
        if not matched:
            raise ProofpoolError(f"--files {pattern!r} names no file")
        found.update(matched)
    return sorted(found)


def _texts(paths: Sequence[Path]) -> Iterator[str]:
    """Each file's text, in order, with a progress line every tenth of the files."""
    every = max(1, len(paths) // PROGRESS_STEPS)
    for index, path in enumerate(paths, 1):
        try:
            yield path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ProofpoolError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
        except OSError as exc:
            raise ProofpoolError(f"cannot read {path}: {exc.strerror or exc}") from exc
        if index % every == 0 or index == len(paths):
            console.print(f"  {index:,}/{len(paths):,} files tokenized")


@app.command()
@needs_extra("trainer")
def spec(
    model: Annotated[Path, typer.Option("--model", "-m", help="The base model's Hugging Face directory.")],
    dataset_file: Annotated[Path, typer.Option("--dataset", help="The dataset (`proofpool training dataset`).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the spec (canonical JSON).")],
    steps: Annotated[int, typer.Option(min=1, help="H: inner AdamW steps each member runs per round.")] = 20,
    batch_size: Annotated[int, typer.Option(min=1, help="Rows per inner step.")] = 8,
    inner_lr: Annotated[float, typer.Option(help="Inner AdamW learning rate.")] = 1e-3,
    warmup: Annotated[int, typer.Option(min=0, help="Inner linear warmup steps (restarted every round).")] = 0,
    weight_decay: Annotated[float, typer.Option(help="Inner AdamW weight decay.")] = 0.0,
    grad_clip: Annotated[float, typer.Option(help="Inner gradient norm clip (0: none).")] = 0.0,
    outer_lr: Annotated[float, typer.Option(help="Outer SGD learning rate (DiLoCo: 0.7).")] = 0.7,
    momentum: Annotated[float, typer.Option(help="Outer Nesterov momentum (DiLoCo: 0.9).")] = 0.9,
    no_nesterov: Annotated[bool, typer.Option("--no-nesterov", help="Plain momentum for the outer step.")] = False,
    clip_norm: Annotated[float, typer.Option(help="Clip the averaged pseudo-gradient's norm to this (0: none).")] = 0.0,
    codec: Annotated[str, typer.Option(help="Update file codec: int8 (quantized) or fp32.")] = "int8",
    block_size: Annotated[int, typer.Option(min=0, help="int8: elements per lookup table (0: one per tensor).")] = 0,
    deadline: Annotated[
        int, typer.Option(min=1, help="Seconds after a checkpoint a round may close with --min-contributors files.")
    ] = 600,
    min_contributors: Annotated[int, typer.Option(min=1, help="Accepted files a round needs at its deadline.")] = 1,
    sample_rate: Annotated[float, typer.Option(help="Share of update files validators replay (0..1).")] = 1.0,
    tolerance: Annotated[float, typer.Option(help="Largest relative L2 between a file and its replay.")] = 0.05,
    eval_sequences: Annotated[
        int | None,
        typer.Option(min=0, help="Rows held out at the dataset's end for evaluation. Default: 5%, 1 to 256."),
    ] = None,
) -> None:
    """Write a training pool's spec for the model and dataset; prints its sha256.

    The defaults suit the devnet (a tiny model, rounds of minutes): 20 inner steps of 8 rows at lr
    1e-3, DiLoCo's outer Nesterov SGD (lr 0.7, momentum 0.9), int8 updates, rounds that close when
    every member has an accepted file or 600 s after the checkpoint with one, every file replayed
    within a relative L2 of 0.05. INTELLECT-1 ran H=100 inner steps; raise --steps and --batch-size
    for a real model. The sha256 printed is the unpublished spec's: `pool create` fills in where the
    model and dataset are stored, and the pool commits to that spec's hash."""
    from proofpool.core.diloco.spec import (
        CodecSpec,
        DilocoModel,
        DilocoSpec,
        InnerSpec,
        OuterSpec,
        ReplaySpec,
        RoundSpec,
        parse_diloco_spec,
    )
    from proofpool.inference.model import check_architecture, model_config
    from proofpool.training.dataset import dataset_spec, load_dataset

    architecture = check_architecture(model)
    vocab_size = model_config(model).get("vocab_size")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise ProofpoolError(f"{model}/config.json has no integer vocab_size")
    tokens = load_dataset(dataset_file, vocab_size=vocab_size)  # every id is one the model embeds
    rows = int(tokens.shape[0])
    held_out = eval_sequences if eval_sequences is not None else default_eval_sequences(rows)
    built = DilocoSpec(
        model=DilocoModel(architecture=architecture, vocab_size=vocab_size),
        dataset=dataset_spec(dataset_file, held_out),
        inner=InnerSpec(
            steps=steps,
            batch_size=batch_size,
            lr=inner_lr,
            warmup_steps=warmup,
            weight_decay=weight_decay,
            grad_clip=grad_clip,
        ),
        outer=OuterSpec(lr=outer_lr, momentum=momentum, nesterov=not no_nesterov, clip_norm=clip_norm),
        codec=CodecSpec(name=codec, block_size=block_size),
        round=RoundSpec(deadline_seconds=deadline, min_contributors=min_contributors),
        validation=ReplaySpec(sample_rate=sample_rate, tolerance=tolerance),
    )
    checked = parse_diloco_spec(built.to_json())  # every bound a member or validator will hold it to
    out.write_bytes(checked.canonical())
    console.print(
        f"wrote {out}: {architecture}, {checked.training_rows:,} training rows + {held_out:,} held out, "
        f"{checked.work_units:,} tokens per member per round"
    )
    typer.echo(checked.sha256())


def default_eval_sequences(rows: int) -> int:
    """The rows held out by default: 5% of the dataset, at least 1 and at most 256 (none of a
    single row, which is all there is to train on)."""
    return min(256, max(1, rows // 20)) if rows > 1 else 0


@app.command()
@needs_extra("worker")
def inner(
    job: Annotated[Path, typer.Option("--job", help="The job file the worker wrote (JSON, its tokens beside it).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where rank 0 writes the result (safetensors).")],
) -> None:
    """Run a training pool's inner phase from a job file and write the pseudo-gradient and losses.

    What `proofpool worker run --train-processes N` starts as `torchrun --nproc-per-node N -m
    proofpool.cli.main training inner --job JOB --out OUT`: every rank loads the round's checkpoint,
    shards it with FSDP (per decoder layer, then the model) and trains on its equal share of each
    step's rows (gloo); rank 0 writes theta_start - theta_end and each step's loss, averaged over
    the ranks, to --out. Without torchrun it is the one-process inner phase validators replay."""
    from proofpool.training.distributed import close_world, init_world
    from proofpool.training.inner import check_job, read_job, run_inner, write_result

    train_job = read_job(job)
    world = init_world(timeout=INNER_COLLECTIVE_TIMEOUT)
    finished = False
    try:
        try:
            check_job(train_job, world.size)  # every rank refuses alike, before any collective
        except ValueError as exc:
            raise ProofpoolError(f"{job}: {exc}") from exc
        result = run_inner(train_job, world)
        if world.main:
            write_result(result, out)
            ranks = f" on {world.size} processes" if world.size > 1 else ""
            console.print(
                f"round {train_job.round}: {train_job.inner.steps} inner steps{ranks} in {result.seconds:.1f} s, "
                f"loss {result.losses[0]:.4f} -> {result.losses[-1]:.4f}; wrote {out}"
            )
        finished = True
    finally:
        close_world(world, finished=finished)
