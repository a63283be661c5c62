"""`proofpool env`: the task environments installed here, their problems and their scoring.

A pool creator picks an environment and its config before creating a pool; a validator whose
reward disagrees with a worker's wants to see the problem and score the completion by hand. Both
get the exact code path the market runs: `show` prints the problem the worker prompts with, and
`score` the reward a validator computes. Configs are JSON, inline or as `@file.json`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from proofpool.cli.env_filter import filter_command

app = typer.Typer(help="Task environments: list them, show a problem, score a completion.", no_args_is_help=True)
app.command("filter")(filter_command)

ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        help='The environment config as JSON, or @FILE holding it (e.g. \'{"tasks": "gcd", "seed": 1}\'). Default: {}.',
    ),
]


def _echo(value: dict[str, Any]) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


@app.command("list")
def list_() -> None:
    """List the installed task environments: id, version, and size with the default config."""
    from proofpool.envs.tasks import TaskEnvironmentError, installed_task_environments, load_task_environment

    found = installed_task_environments()
    if not found:
        typer.echo("no task environment installed (e.g. `pip install -e environments/math`)", err=True)
        raise typer.Exit(1)
    typer.echo(f"{'id':<16}{'version':<10}{'size':>10}  package")
    for entry in found:
        try:
            size = str(len(load_task_environment(entry.id, {})))
        except TaskEnvironmentError:
            size = "config"  # no default: `show`/`score` need --config
        typer.echo(f"{entry.id:<16}{entry.version or '?':<10}{size:>10}  {entry.distribution or entry.target}")


@app.command()
def show(
    env: Annotated[str, typer.Argument(help="Environment id, as `proofpool env list` prints it.")],
    index: Annotated[int, typer.Option("--index", "-i", help="Problem index, 0..size-1.")],
    config: ConfigOption = None,
) -> None:
    """Print problem INDEX of ENV as JSON: its source id, chat turns, reference answer and metadata."""
    from proofpool.envs.tasks import load_task_environment, read_config

    problem = load_task_environment(env, read_config(config)).problem(index)
    _echo(dataclasses.asdict(problem) | {"metadata": dict(problem.metadata)})


@app.command()
def score(
    env: Annotated[str, typer.Argument(help="Environment id, as `proofpool env list` prints it.")],
    index: Annotated[int, typer.Option("--index", "-i", help="Problem index, 0..size-1.")],
    completion_file: Annotated[
        Path, typer.Option("--completion-file", "-f", help="The completion's text (`-` reads standard input).")
    ],
    config: ConfigOption = None,
) -> None:
    """Score a completion of problem INDEX of ENV as validators do; prints reward, status and detail."""
    import sys

    from proofpool.envs.tasks import load_task_environment, read_config

    completion = sys.stdin.read() if str(completion_file) == "-" else completion_file.read_text()
    verdict = load_task_environment(env, read_config(config)).score(index, completion)
    _echo({"reward": verdict.reward, "status": verdict.status, "detail": verdict.detail})


@app.command()
def describe(
    env: Annotated[str, typer.Argument(help="Environment id, as `proofpool env list` prints it.")],
    config: ConfigOption = None,
) -> None:
    """Print what a pool spec pins of ENV with this config: normalized config, package versions, data digest."""
    from proofpool.envs.tasks import load_task_environment, read_config

    environment = load_task_environment(env, read_config(config))
    _echo({"id": environment.id, "version": environment.version, "size": len(environment), **environment.describe()})


@app.command()
def spec(
    env: Annotated[str, typer.Argument(help="Environment id, as `proofpool env list` prints it.")],
    model: Annotated[Path, typer.Option("--model", "-m", help="The base model's Hugging Face directory.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where to write the spec (canonical JSON).")],
    config: ConfigOption = None,
    batch_size: Annotated[int, typer.Option(help="Problems per assigned batch.")] = 8,
    group_size: Annotated[int, typer.Option(help="Samples per problem (a GRPO group).")] = 8,
    max_prompt_tokens: Annotated[int, typer.Option(help="Longest prompt a problem may render to.")] = 2048,
    max_tokens: Annotated[int, typer.Option(help="Completion budget (up to 131,072).")] = 1024,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0.05..10).")] = 1.0,
    stop_id: Annotated[
        list[int] | None, typer.Option("--stop-id", help="A stop token id (repeat); default: the model's own.")
    ] = None,
    indices: Annotated[
        Path | None,
        typer.Option(
            help="The problems the pool draws: `proofpool env filter`'s report (its band is pinned too) or a JSON list."
        ),
    ] = None,
    golden: Annotated[int, typer.Option(help="Golden vectors: problems rendered and scored here.")] = 3,
) -> None:
    """Write the pool spec of ENV with this config on the model in --model; prints its sha256.

    The spec pins the environment (config, package versions, data digest), the model's architecture
    and vocabulary, prompting and generation settings, and golden vectors: every worker and
    validator rebuilds it and refuses to work on the pool if anything differs."""
    from proofpool.core.spec import canonical_json
    from proofpool.envs.spec import build_spec
    from proofpool.envs.tasks import read_config

    chosen, band = read_index_list(indices)
    built = build_spec(
        env,
        read_config(config),
        model,
        batch_size=batch_size,
        group_size=group_size,
        max_prompt_tokens=max_prompt_tokens,
        max_tokens=max_tokens,
        temperature=temperature,
        stop_ids=stop_id or None,
        indices=chosen,
        band=band,
        golden=golden,
    )
    out.write_bytes(canonical_json(built.to_json()))
    typer.echo(built.sha256())


@app.command("check-spec")
def check_spec(
    spec_file: Annotated[Path, typer.Argument(help="A pool spec (JSON).")],
    model: Annotated[Path, typer.Option("--model", "-m", help="The base model's Hugging Face directory.")],
    indices: Annotated[
        Path | None, typer.Option(help="The pool's index list (or the filter's report), when the spec names one.")
    ] = None,
) -> None:
    """Check that this machine builds SPEC_FILE's environment exactly (packages, data, model, golden
    vectors) as a worker or validator does before joining the pool; prints the spec's sha256."""
    from proofpool.core.spec import parse_spec
    from proofpool.envs.spec import spec_environment

    parsed = parse_spec(spec_file.read_bytes())
    chosen, _band = read_index_list(indices)
    pool = spec_environment(parsed, model, chosen)
    typer.echo(f"{parsed.sha256()}  {pool.name}: {len(pool.taskset.indices)} problems, golden vectors agree")


def read_index_list(path: Path | None) -> tuple[list[int] | None, tuple[float, float] | None]:
    """The index list in `path` (a JSON list, or `proofpool env filter`'s report holding one and its
    band); None without a path. `env spec`, `env check-spec` and `pool create --spec` read it so."""
    if path is None:
        return None, None
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        band = data.get("band")
        return data.get("indices"), (float(band[0]), float(band[1])) if band else None
    return data, None
