"""`proofpool devnet`: the embedded devnet market (`make demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from proofpool.cli.common import needs_extra
from proofpool.devnet.market import PROVIDER_NAMES, VALIDATOR_NAMES
from rich.console import Console

from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=False, invoke_without_command=True)

CHEATS = ("other-model", "edit-tokens", "stale-version", "replay", "none")


@app.callback()
def devnet(ctx: typer.Context) -> None:
    """The embedded devnet: `proofpool devnet` alone runs the whole market (`devnet run`)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(run)


@app.command()
@needs_extra("devnet")
def run(
    steps: Annotated[int, typer.Option(min=1, help="Trainer steps (checkpoints published) before the run ends.")] = 10,
    cheat: Annotated[
        str,
        typer.Option(
            help=f"How the last worker cheats: {', '.join(CHEATS)} (none: every worker honest).",
        ),
    ] = "other-model",
    samples_per_step: Annotated[int, typer.Option(min=1, help="Accepted samples per trainer step.")] = 256,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            max=len(PROVIDER_NAMES),
            help=f"Providers running a node ({', '.join(PROVIDER_NAMES)}, in order); the last one cheats. "
            "Fewer workers leave a 2-core machine to a real model's engines.",
        ),
    ] = len(PROVIDER_NAMES),
    validators: Annotated[
        int, typer.Option(min=1, max=len(VALIDATOR_NAMES), help="Validator processes, each a Celery worker.")
    ] = len(VALIDATOR_NAMES),
    out_dir: Annotated[
        Path | None,
        typer.Option(help="Logs, state, report.json and reward.png (wiped first). Default: $PROOFPOOL_STATE_DIR/run."),
    ] = None,
    database: Annotated[str, typer.Option(help="Database created afresh for the run (dropped first).")] = (
        "proofpool_devnet"
    ),
    redis_db: Annotated[int, typer.Option(min=0, max=15, help="Redis database flushed and used by the run.")] = 14,
    step_timeout: Annotated[
        float, typer.Option(min=10, help="Seconds the trainer may wait for one step's accepted rollouts.")
    ] = 900.0,
    verdict_timeout: Annotated[
        float, typer.Option(min=10, help="Seconds, after the workers stop, for every submission to get its verdict.")
    ] = 300.0,
    verify_ledger: Annotated[
        bool, typer.Option(help="Rebuild the ledger from chain events at the end and diff it with PostgreSQL.")
    ] = True,
    heldout_problems: Annotated[
        int,
        typer.Option(
            min=0,
            help="Held-out problems the trainer evaluates every checkpoint on, greedily (0: no evaluation).",
        ),
    ] = 64,
    model: Annotated[
        Path | None,
        typer.Option(
            help="Run the pool on this Hugging Face model directory (an allowlisted architecture, e.g. one "
            "`proofpool model import-gguf` wrote) instead of the devnet's tiny Llama. Needs --env.",
            rich_help_panel="Model pool",
        ),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(
            help="With --model: the task environment (`proofpool env list`), e.g. reasoning-gym.",
            rich_help_panel="Model pool",
        ),
    ] = None,
    env_config: Annotated[
        str | None,
        typer.Option(
            help='With --env: its config, inline JSON or @FILE (reasoning-gym: {"tasks": ..., "seed": ...}).',
            rich_help_panel="Model pool",
        ),
    ] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Problems per assignment.", rich_help_panel="Model pool")] = 4,
    group_size: Annotated[
        int, typer.Option(min=1, help="Completions per problem (the GRPO group).", rich_help_panel="Model pool")
    ] = 4,
    max_tokens: Annotated[
        int, typer.Option(min=1, help="Completion budget of every sample.", rich_help_panel="Model pool")
    ] = 128,
    max_prompt_tokens: Annotated[
        int, typer.Option(min=1, help="Longest prompt a problem may render to.", rich_help_panel="Model pool")
    ] = 512,
    temperature: Annotated[
        float, typer.Option(min=0.01, help="Sampling temperature.", rich_help_panel="Model pool")
    ] = 1.0,
) -> None:
    """Run the whole market and the RL loop for N steps, with a live view and a final report.

    Starts anvil (contracts deployed, a pool created and funded), SeaweedFS, a fresh database,
    the backend, the indexer, two validators, the trainer and four workers (three honest, one
    cheater; --workers and --validators take fewer). Ends with the reward curve, a ledger table per
    provider and per validator, and exits 1 unless the cheater was slashed and ejected and no honest
    node was. Every process it started is stopped on the way out, also on Ctrl-C (then the exit
    code is 130).

    With --model DIR --env ENV the pool runs ENV's problems on that model instead: its spec is
    built here (golden vectors rendered and scored), published with the model to the object store,
    and the pool created as spec://<sha256>, the path a real pool creator takes (`pool create --spec`).
    """
    from proofpool.devnet.run import DevnetConfig, ModelPool, run_devnet, verify_ledger_of

    from proofpool.envs.tasks import read_config

    if cheat not in CHEATS:
        raise typer.BadParameter(f"--cheat must be one of {', '.join(CHEATS)}, not {cheat!r}")
    if (model is None) != (env is None):
        raise typer.BadParameter("--model and --env go together: a model pool needs both", param_hint="--model/--env")
    if env_config is not None and env is None:
        raise typer.BadParameter("--env-config needs --env", param_hint="--env-config")
    model_pool = None
    if model is not None and env is not None:
        if not (model / "config.json").is_file():
            raise typer.BadParameter(f"{model} holds no Hugging Face model (config.json missing)", param_hint="--model")
        model_pool = ModelPool(
            model.expanduser().resolve(),
            env,
            read_config(env_config),
            batch_size=batch_size,
            group_size=group_size,
            max_prompt_tokens=max_prompt_tokens,
            max_tokens=max_tokens,
            temperature=temperature,
        )
    try:
        config = DevnetConfig(
            out_dir=(out_dir or get_settings().state_dir / "run").expanduser().resolve(),
            steps=steps,
            cheat=None if cheat == "none" else cheat,
            samples_per_step=samples_per_step,
            database=database,
            redis_db=redis_db,
            step_timeout=step_timeout,
            verdict_timeout=verdict_timeout,
            model_pool=model_pool,
            heldout_problems=heldout_problems,
            workers=workers,
            validators=validators,
        )
    except ValueError as exc:  # the run's own rules, e.g. a cheater needs an honest node beside it
        raise typer.BadParameter(str(exc)) from exc
    console = Console()
    console = console if console.is_terminal else Console(width=140)
    try:
        outcome = run_devnet(config, console, verify=verify_ledger_of if verify_ledger else None)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, wherever it landed: never a finished run's 0 or 1
        console.print("[yellow]interrupted[/yellow]: every process the devnet started was stopped")
        raise typer.Exit(130) from None
    raise typer.Exit(0 if outcome.ok else 1)


@app.command("chain-loop")
@needs_extra("devnet")
def chain_loop(
    rpc_url: str = typer.Option(None, help="Use this chain instead of starting a throw-away anvil."),
) -> None:
    """Run the chain half of the market loop on anvil and print balances and events."""
    from proofpool.devnet.chain_loop import main

    console = Console()
    main(console if console.is_terminal else Console(width=140), rpc_url)
