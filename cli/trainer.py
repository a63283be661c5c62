"""`proofpool trainer`: train a pool's model and publish its checkpoints.

Runs as the pool's MANAGER key (only the manager may `publishCheckpoint`). The pool's model URI
decides what `run` does: an RL pool is trained with GRPO on accepted rollouts (one process by
default; under `torchrun --nproc-per-node N -m proofpool.cli.main trainer run ...` the model is
sharded with FSDP over N processes, gloo, rank 0 alone talking to the chain, ledger and store); a
training pool (`diloco://`) gets its DiLoCo aggregator (`proofpool.trainer.aggregate`), one process.
"""

from __future__ import annotations

import os
import signal
import threading
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from proofpool.cli.common import KeyOption, RpcOption, console, needs_extra
from proofpool.cli.logs import enable_progress_logs

from proofpool.core.errors import ProofpoolError
from proofpool.infra.config import get_settings

if TYPE_CHECKING:
    from proofpool.trainer.train import TrainerConfig

    from proofpool.infra.chain.client import ChainClient

app = typer.Typer(no_args_is_help=True)

RL_ONLY: tuple[str, ...] = (
    "steps", "samples_per_step", "async_level", "wait_timeout", "base_model", "lr", "heldout_problems"
)  # fmt: skip
"""Options of GRPO training, refused on a training pool."""
TRAINING_ONLY: tuple[str, ...] = ("rounds", "poll_interval")
"""Options of the DiLoCo aggregator, refused on an RL pool."""

COLLECTIVE_MARGIN = timedelta(hours=1)
"""Added to `--wait-timeout` for the process group's timeout under torchrun: ranks > 0 wait in a
collective while rank 0 gathers rollouts, then while it publishes (upload and transaction) and
evaluates the new checkpoint on the held-out problems."""


@app.command()
@needs_extra("trainer")
def run(
    ctx: typer.Context,
    pool: Annotated[int, typer.Option("--pool", min=1, help="The pool whose model to train.")],
    key: KeyOption = None,
    rpc_url: RpcOption = None,
    backend_url: Annotated[str | None, typer.Option(help="Ledger API. Default: $PROOFPOOL_BACKEND_URL.")] = None,
    steps: Annotated[int, typer.Option(min=1, help="Steps to run now (the counter continues across runs).")] = 20,
    samples_per_step: Annotated[int, typer.Option(min=1, help="Rows gathered before each step.")] = 256,
    async_level: Annotated[
        int, typer.Option(min=0, help="k: train on files of versions >= step - k; keep k + 1 versions.")
    ] = 2,
    wait_timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for enough rollouts.")] = 600.0,
    shard_mb: Annotated[float, typer.Option(min=0.001, help="Shard size of published checkpoints (MB).")] = 50.0,
    state_dir: Annotated[
        Path | None, typer.Option(help="Resumable state. Default: $PROOFPOOL_STATE_DIR/trainer/<pool>.")
    ] = None,
    out_dir: Annotated[
        Path | None, typer.Option(help="metrics.csv and reward.png. Default: the state directory.")
    ] = None,
    base_model: Annotated[
        Path | None, typer.Option(help="Local directory of the pool's version-0 model (non-devnet pools).")
    ] = None,
    lr: Annotated[float | None, typer.Option(help="AdamW learning rate (default 2e-4).")] = None,
    heldout_problems: Annotated[
        int,
        typer.Option(
            min=0,
            help="Held-out problems each checkpoint (and the base model) is scored on, greedily; 0 turns it off.",
        ),
    ] = 64,
    rounds: Annotated[
        int | None,
        typer.Option(min=1, help="Training pools: rounds to close now. Default: until stopped."),
    ] = None,
    poll_interval: Annotated[
        float | None,
        typer.Option(
            min=0.05,
            help="Training pools: seconds between two looks at the open round. Default: 2.",
        ),
    ] = None,
) -> None:
    """Train the pool's model and publish each result as the next checkpoint.

    RL pools: gather accepted rollouts, take GRPO steps. Waits (with a log line saying for what)
    until enough accepted samples of recent model versions are in the ledger; Ctrl-C/SIGTERM stops
    after the current step's checkpoint is published. Under `torchrun --nproc-per-node N -m
    proofpool.cli.main trainer run ...` the step is sharded over N processes (FSDP, gloo); rank 0
    alone gathers, publishes and saves. After each publication (and once for the base model) rank
    0 prints the checkpoint's greedy accuracy on the pool's held-out problems, which metrics.csv
    and reward.png record beside the training reward.

    Training pools (model URI diloco://): the DiLoCo aggregator. Round v closes when every active
    member has an accepted file of model version v, or at the spec's round deadline with at least
    its minimum of files; the files are averaged, the outer Nesterov step applied and checkpoint
    v+1 published with its momentum and round record (`proofpool ledger verify-round` recomputes
    it). Its state is the chain and the store: a restarted aggregator publishes the same bytes.
    One line per round, and rounds.jsonl in the state directory. Only --rounds, --poll-interval,
    --shard-mb and --state-dir (and the connection options) apply; the GRPO options are refused.
    """
    from proofpool.trainer.config import GrpoConfig
    from proofpool.trainer.train import TrainerConfig, abort_followers, follow_trainer, run_trainer
    from proofpool.trainer.world import close_world, init_world

    from proofpool.infra.chain.accounts import KEY_ENV, load_account
    from proofpool.infra.chain.client import ChainClient
    from proofpool.infra.http.ledger_client import LedgerClient
    from proofpool.infra.offdevnet import check_off_devnet
    from proofpool.infra.storage.s3 import ObjectStore

    settings = get_settings()
    state = (state_dir or settings.state_dir / "trainer" / str(pool)).expanduser()
    config = TrainerConfig(
        pool_id=pool,
        steps=steps,
        samples_per_step=samples_per_step,
        async_level=async_level,
        wait_timeout=wait_timeout,
        shard_size=int(shard_mb * 1_000_000),
        state_dir=state,
        out_dir=(out_dir or state).expanduser(),
        checkpoint_cache_dir=settings.checkpoint_cache_dir.expanduser(),
        relays=settings.checkpoint_relays,
        base_model=base_model,
        heldout_problems=heldout_problems,
        grpo=GrpoConfig() if lr is None else GrpoConfig(lr=lr),
    )
    stop = threading.Event()
    world = init_world(timeout=timedelta(seconds=wait_timeout) + COLLECTIVE_MARGIN)  # one process without torchrun

    def request_stop(signum: int, _frame: object) -> None:
        if world.main:  # the other ranks stop when rank 0 tells them to
            console.print(f"[yellow]{signal.Signals(signum).name}: stopping after this step[/yellow]")
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    finished = False
    try:
        if not world.main:
            follow_trainer(world)
        else:
            enable_progress_logs("proofpool.trainer", "proofpool.infra.checkpoint")
            try:
                client = ChainClient.from_settings(load_account(key), rpc_url=rpc_url)
                check_off_devnet(settings, client.chain_id, [key or os.environ.get(KEY_ENV)])
                training = _check_options(ctx, pool, client.pool.get_pool(pool).model_uri)
                if training and world.size > 1:
                    raise ProofpoolError(f"pool {pool} is a training pool: run its aggregator without torchrun")
            except BaseException as exc:
                abort_followers(world, exc)  # they wait for rank 0's first command
                raise
            if training:
                _aggregate(config, rounds, poll_interval, client, backend_url, stop)
                finished = True
                return
            with LedgerClient(backend_url or settings.backend_url) as ledger:
                last = run_trainer(
                    config,
                    client,
                    ObjectStore.from_settings(settings),
                    ledger,
                    stop=stop,
                    say=console.print,
                    world=world,
                )
            console.print(f"trainer stopped at checkpoint {last}; metrics in {config.out_dir / 'metrics.csv'}")
        finished = True
    finally:
        close_world(world, finished=finished)


def _check_options(ctx: typer.Context, pool: int, model_uri: str) -> bool:
    """Whether `pool` is a training pool; `ProofpoolError` for an option given on the command line
    (or by environment) that does not apply to its kind."""
    from proofpool.training.published import is_training_pool

    training = is_training_pool(model_uri)
    wrong = TRAINING_ONLY if not training else RL_ONLY
    # Compared by name: typer ships its own copy of click, whose ParameterSource is another enum.
    given = [name for name in wrong if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        kind = "a training pool (DiLoCo aggregator)" if training else f"an RL pool ({model_uri})"
        raise ProofpoolError(f"{flags}: not an option for pool {pool}, {kind}")
    return training


def _aggregate(
    config: TrainerConfig,
    rounds: int | None,
    poll_interval: float | None,
    client: ChainClient,
    backend_url: str | None,
    stop: threading.Event,
) -> None:
    """Run the DiLoCo aggregator of a training pool with the paths and settings of `config`."""
    from proofpool.trainer.aggregate import AggregatorConfig, run_aggregator

    from proofpool.infra.http.ledger_client import LedgerClient
    from proofpool.infra.storage.s3 import ObjectStore

    settings = get_settings()
    aggregator = AggregatorConfig(
        pool_id=config.pool_id,
        rounds=rounds,
        **({} if poll_interval is None else {"poll_interval": poll_interval}),
        shard_size=config.shard_size,
        state_dir=config.state_dir,
        checkpoint_cache_dir=config.checkpoint_cache_dir,
        relays=config.relays,
        max_file_bytes=settings.upload_max_bytes,
        max_checkpoint_bytes=settings.checkpoint_max_bytes,
    )
    with LedgerClient(backend_url or settings.backend_url) as ledger:
        last = run_aggregator(
            aggregator, client, ObjectStore.from_settings(settings), ledger, stop=stop, say=console.print
        )
    console.print(f"aggregator stopped at checkpoint {last}; rounds in {config.state_dir / 'rounds.jsonl'}")
