"""`proofpool-arithmetic`: build, warm up and locate the devnet environment's model.

No model can be downloaded on the devnet, so these commands make one: `init` draws a seeded
tiny Llama into a directory, `warmup` trains it briefly on the arithmetic task, and without a
directory both work on the shared cache (`$PROOFPOOL_MODEL_CACHE`, default
~/.cache/proofpool/models) that workers, validators and the trainer read through `path`.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from proofpool_arithmetic.build import ModelSpec
from proofpool_arithmetic.warmup import WarmupSpec

app = typer.Typer(help="Build and warm up the local devnet model.", no_args_is_help=True)
console = Console()
err_console = Console(stderr=True)
_MODEL = ModelSpec()
_WARMUP = WarmupSpec()

SeedOption = Annotated[int, typer.Option(help="Seed of the weight initialization (another seed, another model).")]
HiddenOption = Annotated[int, typer.Option(help="Hidden size (width of the TOPLOC activations).")]
LayersOption = Annotated[int, typer.Option(help="Number of decoder layers.")]
HeadsOption = Annotated[int, typer.Option(help="Attention heads; hidden / heads must be >= 32 for vLLM on CPU.")]
StepsOption = Annotated[int, typer.Option(help="Warm-up optimizer steps (fewer leave more room for RL).")]
BatchOption = Annotated[int, typer.Option(help="Problems per warm-up step.")]
LrOption = Annotated[float, typer.Option(help="Warm-up AdamW learning rate.")]
DataSeedOption = Annotated[int, typer.Option(help="Seed of the warm-up training problems.")]
CacheOption = Annotated[
    Path | None,
    typer.Option(help="Model cache directory (default: $PROOFPOOL_MODEL_CACHE or ~/.cache/proofpool/models)."),
]


@app.command()
def init(
    path: Annotated[Path, typer.Argument(help="Directory to write the untrained model into.")],
    seed: SeedOption = _MODEL.seed,
    hidden: HiddenOption = _MODEL.hidden,
    layers: LayersOption = _MODEL.layers,
    heads: HeadsOption = _MODEL.heads,
) -> None:
    """Write a seeded, untrained devnet model (weights, config, tokenizer) into PATH."""
    from proofpool_arithmetic.build import init_model

    init_model(path, seed=seed, hidden=hidden, layers=layers, heads=heads)
    console.print(f"initialized model (seed {seed}, hidden {hidden}, {layers} layers) in {path}")


@app.command()
def warmup(
    path: Annotated[
        Path | None,
        typer.Argument(help="Model directory made by `init`; omit to build the cached devnet model."),
    ] = None,
    steps: StepsOption = _WARMUP.steps,
    batch_size: BatchOption = _WARMUP.batch_size,
    lr: LrOption = _WARMUP.lr,
    data_seed: DataSeedOption = _WARMUP.data_seed,
    seed: SeedOption = _MODEL.seed,
    hidden: HiddenOption = _MODEL.hidden,
    layers: LayersOption = _MODEL.layers,
    heads: HeadsOption = _MODEL.heads,
    cache_dir: CacheOption = None,
) -> None:
    """Warm up a model on the arithmetic task (a no-op if already warmed with these settings).

    With PATH, the model spec comes from PATH's manifest and the model options are ignored.
    """
    from proofpool_arithmetic.cache import ensure_devnet_model
    from proofpool_arithmetic.warmup import warmup as run_warmup

    spec = WarmupSpec(steps=steps, batch_size=batch_size, lr=lr, data_seed=data_seed)
    if path is None:
        model_spec = ModelSpec(seed=seed, hidden=hidden, layers=layers, heads=heads)
        path = ensure_devnet_model(model_spec, spec, cache_dir, progress=console.print)
        console.print(f"devnet model ready in {path}")
        return
    manifest = run_warmup(path, spec, progress=console.print)
    console.print(f"warmed model in {path}: {json.dumps(manifest.metrics)}")


@app.command()
def path(
    seed: SeedOption = _MODEL.seed,
    hidden: HiddenOption = _MODEL.hidden,
    layers: LayersOption = _MODEL.layers,
    heads: HeadsOption = _MODEL.heads,
    steps: StepsOption = _WARMUP.steps,
    batch_size: BatchOption = _WARMUP.batch_size,
    lr: LrOption = _WARMUP.lr,
    data_seed: DataSeedOption = _WARMUP.data_seed,
    cache_dir: CacheOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print path, readiness and settings as JSON.")] = False,
) -> None:
    """Print where the devnet model for these settings lives (build it with `warmup`)."""
    from proofpool_arithmetic.build import read_manifest
    from proofpool_arithmetic.cache import devnet_model_path, is_complete

    model_spec = ModelSpec(seed=seed, hidden=hidden, layers=layers, heads=heads)
    spec = WarmupSpec(steps=steps, batch_size=batch_size, lr=lr, data_seed=data_seed)
    where = devnet_model_path(model_spec, spec, cache_dir)
    ready = is_complete(where, model_spec, spec)
    if as_json:
        manifest = read_manifest(where) if ready else None
        payload = {
            "path": str(where),
            "ready": ready,
            "model": asdict(model_spec),
            "warmup": asdict(spec),
            "metrics": manifest.metrics if manifest else None,
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    typer.echo(str(where))
    if not ready:
        err_console.print("[yellow]not built yet[/yellow]: run `proofpool-arithmetic warmup`")


def run() -> None:
    """Console-script entry point (`proofpool-arithmetic`)."""
    app()
