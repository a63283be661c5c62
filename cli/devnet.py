"""`proofpool devnet`: the embedded devnet market (`make demo`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from proofpool.cli.common import needs_extra
from proofpool.devnet.market import PROVIDER_NAMES, VALIDATOR_NAMES
from rich.console import Console

from proofpool.infra.config import get_settings

if TYPE_CHECKING:
    from proofpool.devnet.report import Outcome

app = typer.Typer(no_args_is_help=False, invoke_without_command=True)

CHEATS = ("other-model", "edit-tokens", "stale-version", "replay", "none")
"""--cheat of an RL run (`proofpool worker run --cheat`), "none" for every worker honest."""
KINDS = ("rl", "diloco")
DEFAULT_CHEAT = {"rl": "other-model", "diloco": "scaled"}
RL_ONLY = ("steps", "samples_per_step", "step_timeout", "heldout_problems", "model", "env", "env_config")
RL_ONLY += ("batch_size", "group_size", "max_tokens", "max_prompt_tokens", "temperature", "serve")
"""Options of an RL run, refused with --kind diloco."""
DILOCO_ONLY = ("rounds", "round_deadline", "drills", "baselines")
"""Options of a training pool run, refused with --kind rl."""
TRAINING_PANEL = "Training pool (--kind diloco)"


@app.callback()
def devnet(ctx: typer.Context) -> None:
    """The embedded devnet: `proofpool devnet` alone runs the whole market (`devnet run`)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(run, ctx=ctx)


@app.command()
@needs_extra("devnet")
def run(
    ctx: typer.Context,
    kind: Annotated[
        str,
        typer.Option(
            help="rl: an RL pool (rollouts, GRPO trainer); diloco: a training pool (DiLoCo pretraining, the "
            "aggregator), see the training pool options.",
        ),
    ] = "rl",
    steps: Annotated[int, typer.Option(min=1, help="Trainer steps (checkpoints published) before the run ends.")] = 10,
    cheat: Annotated[
        str | None,
        typer.Option(
            help=f"How the last worker cheats. rl: {', '.join(CHEATS)} (default other-model); diloco: a "
            "--train-cheat of `proofpool worker run` (default scaled); none: every worker honest.",
            show_default=False,
        ),
    ] = None,
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
    serve: Annotated[
        bool,
        typer.Option(
            help="After the report, keep the backend and its explorer (with the indexer, anvil and the object "
            "store) up until Ctrl-C, and print the explorer's URL; the exit code stays the run's.",
        ),
    ] = False,
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
    rounds: Annotated[
        int,
        typer.Option(min=1, help="Rounds (checkpoints published) before the run ends.", rich_help_panel=TRAINING_PANEL),
    ] = 12,
    round_deadline: Annotated[
        int,
        typer.Option(
            min=1,
            help="Seconds after its checkpoint a round missing a member's file closes with the others' "
            "(the spec's round deadline).",
            rich_help_panel=TRAINING_PANEL,
        ),
    ] = 20,
    drills: Annotated[
        bool,
        typer.Option(
            help="Elasticity drills: SIGKILL a worker (back two rounds later) and the aggregator (restarted at "
            "once); needs 9 rounds or more.",
            rich_help_panel=TRAINING_PANEL,
        ),
    ] = False,
    baselines: Annotated[
        bool,
        typer.Option(
            help="Simulate the same training without the market beside it (int8 and fp32 DiLoCo, a single "
            "node, data parallel): the report's baselines and loss plot.",
            rich_help_panel=TRAINING_PANEL,
        ),
    ] = True,
) -> None:
    """Run the whole market: the RL loop for N steps, or (--kind diloco) a training pool for N rounds.

    Starts anvil (contracts deployed, a pool created and funded), SeaweedFS, a fresh database,
    the backend, the indexer, two validators, the trainer and four workers (three honest, one
    cheater; --workers and --validators take fewer). Ends with the reward curve, a ledger table per
    provider and per validator, and exits 1 unless the cheater was slashed and ejected and no honest
    node was. Every process it started is stopped on the way out, also on Ctrl-C (then the exit
    code is 130).

    With --model DIR --env ENV the pool runs ENV's problems on that model instead: its spec is
    built here (golden vectors rendered and scored), published with the model to the object store,
    and the pool created as spec://<sha256>, the path a real pool creator takes (`pool create --spec`).

    With --kind diloco the pool is a training pool instead: DiLoCo pretraining of a tiny Llama on the
    Python standard library's sources (built offline, cached), the aggregator in place of the trainer,
    a worker cheating with --train-cheat. One line per round (contributors, held-out and inner loss,
    verdicts, slashes); after --rounds checkpoints every one is audited (`ledger verify-round`) and
    the report plots the loss against the same training simulated without the market (single node,
    data parallel); it exits 1 unless the cheater was slashed at its first verdict, the honest nodes
    were paid and the loss matches the baselines.
    """
    from proofpool.devnet.run import DevnetConfig, ModelPool, run_devnet, verify_ledger_of

    from proofpool.envs.tasks import read_config

    if kind not in KINDS:
        raise typer.BadParameter(f"--kind must be one of {', '.join(KINDS)}, not {kind!r}")
    _refuse_other_kind(ctx, kind)
    cheat = cheat or DEFAULT_CHEAT[kind]
    if kind == "diloco":
        _run_diloco(
            out_dir=out_dir,
            rounds=rounds,
            cheat=cheat,
            workers=workers,
            validators=validators,
            database=database,
            redis_db=redis_db,
            verdict_timeout=verdict_timeout,
            verify_ledger=verify_ledger,
            round_deadline=round_deadline,
            drills=drills,
            baselines=baselines,
        )
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
            serve=serve,
        )
    except ValueError as exc:  # the run's own rules, e.g. a cheater needs an honest node beside it
        raise typer.BadParameter(str(exc)) from exc
    _finish(lambda console: run_devnet(config, console, verify=verify_ledger_of if verify_ledger else None))


def _finish(run: Callable[[Console], Outcome]) -> NoReturn:
    """Run the devnet on a console and exit: 0 when the market did its job, 1 when not, 130 interrupted."""
    console = Console()
    console = console if console.is_terminal else Console(width=140)
    try:
        outcome = run(console)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM, wherever it landed: never a finished run's 0 or 1
        console.print("[yellow]interrupted[/yellow]: every process the devnet started was stopped")
        raise typer.Exit(130) from None
    raise typer.Exit(0 if outcome.ok else 1)


def _refuse_other_kind(ctx: typer.Context, kind: str) -> None:
    """BadParameter for an option given on the command line that the other kind of run takes."""
    wrong = RL_ONLY if kind == "diloco" else DILOCO_ONLY
    # By name: typer vendors click, so its ParameterSource is not `click.core`'s.
    given = [name for name in wrong if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise typer.BadParameter(f"{flags}: not an option of --kind {kind}")


def _run_diloco(
    *,
    out_dir: Path | None,
    rounds: int,
    cheat: str,
    workers: int,
    validators: int,
    database: str,
    redis_db: int,
    verdict_timeout: float,
    verify_ledger: bool,
    round_deadline: int,
    drills: bool,
    baselines: bool,
) -> NoReturn:
    """`devnet run --kind diloco`: the training pool's market (`proofpool.devnet.diloco.run`)."""
    from proofpool.devnet.diloco.cheats import TrainCheat
    from proofpool.devnet.diloco.run import DilocoConfig, run_diloco_devnet
    from proofpool.devnet.run import verify_ledger_of

    choices = [c.value for c in TrainCheat]
    if cheat != "none" and cheat not in choices:
        raise typer.BadParameter(f"--cheat of --kind diloco must be one of {', '.join(choices)} or none, not {cheat!r}")
    try:
        config = DilocoConfig(
            out_dir=(out_dir or get_settings().state_dir / "run").expanduser().resolve(),
            rounds=rounds,
            cheat=None if cheat == "none" else cheat,
            database=database,
            redis_db=redis_db,
            workers=workers,
            validators=validators,
            deadline_seconds=round_deadline,
            verdict_timeout=verdict_timeout,
            drills=drills,
            baselines=baselines,
        )
    except ValueError as exc:  # the run's own rules (a cheater beside an honest node, room for the drills)
        raise typer.BadParameter(str(exc)) from exc
    _finish(lambda console: run_diloco_devnet(config, console, verify=verify_ledger_of if verify_ledger else None))


@app.command("chain-loop")
@needs_extra("devnet")
def chain_loop(
    rpc_url: str = typer.Option(None, help="Use this chain instead of starting a throw-away anvil."),
) -> None:
    """Run the chain half of the market loop on anvil and print balances and events."""
    from proofpool.devnet.chain_loop import main

    console = Console()
    main(console if console.is_terminal else Console(width=140), rpc_url)
