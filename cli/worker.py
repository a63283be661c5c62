"""`proofpool worker`: run a provider node for one pool, and look into its journal.

The worker machine needs only the NODE key (never the provider's): it signs heartbeats,
uploads and `submitWork`, and pays that transaction's gas.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from proofpool.cli.common import JsonOption, RpcOption, console, needs_extra, print_json
from proofpool.cli.logs import enable_progress_logs
from proofpool.devnet.adversary import CheatMode
from proofpool.devnet.diloco.cheats import TrainCheat
from rich.table import Table

from proofpool.infra.chain.bundles import MAX_BUNDLE_FILES
from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=True)

NODE_KEY_ENV = "PROOFPOOL_NODE_KEY"
TRAIN_PROCESSES_ENV = "PROOFPOOL_WORKER_TRAIN_PROCESSES"
MAX_BUNDLE_ENV = "PROOFPOOL_WORKER_MAX_BUNDLE"
DEFAULT_MAX_BUNDLE = 32
"""`proofpool.worker.submit.DEFAULT_MAX_BUNDLE` (the worker's modules load only when a command runs)."""

NodeKeyOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        "-k",
        help=f"The NODE key: a keystore from `keys new`, 0x-hex, or env:NAME. Default: ${NODE_KEY_ENV}.",
        show_default=False,
    ),
]
StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Journal and unsubmitted files. Default: $PROOFPOOL_WORKER_STATE_DIR/<node address>.",
        show_default=False,
    ),
]


def _state_dir(state_dir: Path | None, node: str) -> Path:
    return (state_dir or get_settings().worker_state_dir / node).expanduser()


@app.command()
@needs_extra("worker")
def run(
    pool: Annotated[int, typer.Option("--pool", min=1, help="The pool to work for.")],
    key: NodeKeyOption = None,
    rpc_url: RpcOption = None,
    backend_url: Annotated[
        str | None, typer.Option("--backend-url", help="Default: $PROOFPOOL_BACKEND_URL.", show_default=False)
    ] = None,
    state_dir: StateDirOption = None,
    base_model: Annotated[
        Path | None,
        typer.Option("--base-model", help="Local directory of the pool's version-0 model (non-devnet pools)."),
    ] = None,
    wait_for_provider: Annotated[
        bool,
        typer.Option("--wait-for-provider", help="Do not join with an invite; wait until the provider joins the node."),
    ] = False,
    max_batches: Annotated[
        int | None, typer.Option("--max-batches", min=1, help="Stop after this many new submissions.")
    ] = None,
    idle_interval: Annotated[
        float | None,
        typer.Option("--idle-interval", min=0.05, help="Seconds between heartbeats with no work. Default: backend's."),
    ] = None,
    cheat: Annotated[
        CheatMode | None,
        typer.Option(
            "--cheat",
            help="Devnet drills only: submit dishonest files this way, to be caught and slashed (docs/worker.md).",
            show_default=False,
        ),
    ] = None,
    train_cheat: Annotated[
        TrainCheat | None,
        typer.Option(
            "--train-cheat",
            help="Devnet drills only, training pools: submit dishonest pseudo-gradients this way, to be caught "
            "and slashed (docs/worker.md).",
            show_default=False,
        ),
    ] = None,
    max_bundle: Annotated[
        int,
        typer.Option(
            "--max-bundle",
            min=1,
            max=MAX_BUNDLE_FILES,
            envvar=MAX_BUNDLE_ENV,
            show_envvar=True,
            help="Files already waiting for the chain together (same pool and version) are sent as one "
            "submitWorkBundle of at most this many; 1: one submitWork per file. A lone file is never held back.",
        ),
    ] = DEFAULT_MAX_BUNDLE,
    train_processes: Annotated[
        int,
        typer.Option(
            "--train-processes",
            min=1,
            envvar=TRAIN_PROCESSES_ENV,
            show_envvar=True,
            help="Training pools: run each round's inner steps under torchrun on this many processes, the model "
            "sharded with FSDP (gloo); the pool's batch size must divide by it.",
        ),
    ] = 1,
) -> None:
    """Work for a pool: heartbeat, fetch checkpoints, generate, prove, upload and submit rollouts;
    in a training pool (`diloco://`), train each round from its checkpoint and submit the update.

    Checks first that the node is registered and its provider staked enough, announces the node,
    joins the pool with an invite (or waits for the provider), then loops until SIGTERM/Ctrl-C,
    which finishes or journals the current batch and exits within 30 s (a training round still in
    its inner steps finishes them first; under --train-processes they are ended).
    """
    from proofpool.worker.console import WorkerConsole
    from proofpool.worker.engine import EngineConfig
    from proofpool.worker.node import WorkerConfig, WorkerNode

    from proofpool.infra.chain.accounts import load_account
    from proofpool.infra.chain.client import ChainClient
    from proofpool.infra.http.node_api import NodeApi
    from proofpool.infra.offdevnet import check_off_devnet
    from proofpool.infra.storage.s3 import ObjectStore

    settings = get_settings()
    account = load_account(key, env_var=NODE_KEY_ENV)
    enable_progress_logs("proofpool.worker", "proofpool.infra.checkpoint")
    config = WorkerConfig(
        pool_id=pool,
        state_dir=_state_dir(state_dir, account.address),
        checkpoint_cache_dir=settings.checkpoint_cache_dir.expanduser(),
        base_model=base_model,
        join=not wait_for_provider,
        max_batches=max_batches,
        idle_interval=idle_interval,
        specs={"cores": _cores()},
        async_window=settings.async_window,
        max_bundle=max_bundle,
        engine=EngineConfig(reload_in_place=settings.worker_reload_in_place),
    )
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        if stop.is_set():  # a second signal: stop now
            raise KeyboardInterrupt
        console.print(f"[yellow]{signal.Signals(signum).name}: finishing the current step, then stopping[/yellow]")
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    if train_processes > 1:
        if train_cheat is not None:
            raise typer.BadParameter("a drill's cheater trains in one process", param_hint="--train-processes")
        from proofpool.worker.train import HonestTraining

        config = dataclasses.replace(config, train_strategy=HonestTraining(train_processes, stop=stop))
    client = ChainClient.from_settings(account, rpc_url=rpc_url)
    check_off_devnet(settings, client.chain_id, [key or os.environ.get(NODE_KEY_ENV)])
    with NodeApi(
        backend_url or settings.backend_url, account, chain_id=client.chain_id, pool_contract=client.book.compute_pool
    ) as api:
        view = WorkerConsole(account.address, backend_url or settings.backend_url)
        view.say(f"worker for pool {pool}, node {account.address}, journal in {config.state_dir}")
        if cheat is not None:
            from proofpool.devnet.adversary import Cheater, drill_environment

            info = client.pool.get_pool(pool)
            environment = drill_environment(info.model_uri, info.spec_sha256)
            config = dataclasses.replace(config, strategy=Cheater(cheat, environment, view.say))
        if train_cheat is not None:
            from proofpool.devnet.diloco.cheats import TrainCheater
            from proofpool.worker.train import checkpoint_fetcher

            from proofpool.training.published import is_training_pool, pool_diloco_spec

            info = client.pool.get_pool(pool)
            if not is_training_pool(info.model_uri):
                raise typer.BadParameter(f"pool {pool} is not a training pool (diloco://)", param_hint="--train-cheat")
            store = ObjectStore.from_settings()
            spec = pool_diloco_spec(store, info.model_uri, info.spec_sha256)
            previous = checkpoint_fetcher(client, store, spec, pool, config.checkpoint_cache_dir)
            cheater = TrainCheater(
                train_cheat, previous_checkpoint=previous, training_rows=spec.training_rows, say=view.say
            )
            config = dataclasses.replace(config, train_strategy=cheater)
        WorkerNode(config, account, client, api, ObjectStore.from_settings, view, stop).run()


@app.command()
@needs_extra("worker")
def journal(
    pool: Annotated[int, typer.Option("--pool", min=1, help="The pool.")],
    node: Annotated[str, typer.Option("--node", help="Node address (names the default state directory).")],
    state_dir: StateDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """What the worker's journal holds: each batch, its work key, the bundle it went out in, and how far it got."""
    from proofpool.worker.journal import Journal

    path = _state_dir(state_dir, node)
    if not (path / "journal.sqlite3").is_file():
        console.print(f"no journal in {path}")
        raise typer.Exit(1)
    store = Journal(path)
    try:
        entries = store.entries(pool)
    finally:
        store.close()
    if as_json:
        print_json([{**e.__dict__, "state": e.state.value} for e in entries])
        return
    table = Table("version", "batch", "work key", "units", "samples", "state", "bundle", "tx", "error")
    for e in entries:
        table.add_row(
            str(e.version),
            str(e.batch),
            "0x" + e.work_key.hex(),
            str(e.work_units),
            str(e.samples),
            e.state.value,
            "0x" + e.submission.hex() if e.bundled and e.submission else "",
            e.tx_hash or "",
            e.error or "",
        )
    console.print(table)


def _cores() -> int:
    import os

    return os.cpu_count() or 1
