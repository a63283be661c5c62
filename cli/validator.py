"""`proofpool validator`: run a validator (two Celery workers on one key) and see what it earned.

`run` starts, as child processes of one supervisor, a worker on the `validate` queue and the
key's own `reviews.<address>` queue (validations and reviews of other validators' rejections, in
parallel threads) and a worker on the `verdicts` queue (one slot: the key's only transaction
sender). SIGTERM/Ctrl-C stops both; if either dies, the other is stopped too and the exit code
says which failed, so a process supervisor restarts the pair. `stake` puts up the stake every
verdict needs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Annotated, Any

import typer
from proofpool.cli.common import JsonOption, KeyOption, RpcOption, console, needs_extra, print_json

from proofpool.core.errors import ConfigError
from proofpool.infra.chain.client import ChainClient
from proofpool.infra.chain.units import format_eth, format_pool
from proofpool.infra.config import FROM_CHECKOUT, REPO_ROOT, Settings, get_settings

app = typer.Typer(no_args_is_help=True)


@app.command()
@needs_extra("validator")
def run(
    key: KeyOption = None,
    rpc_url: RpcOption = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="Validation tasks at once. Default: $PROOFPOOL_VALIDATOR_CONCURRENCY (1).")
    ] = None,
    sample_rate: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Fraction of submissions recomputed in full, drawn from the submission block's hash; the rest "
            "get every other check. Default: $PROOFPOOL_VALIDATOR_SAMPLE_RATE (1.0).",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None, typer.Option(min=0, max=65534, help="Prometheus port (verdict sender: +1); 0 = off.")
    ] = None,
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
) -> None:
    """Validate submissions and send verdicts on-chain with the validator key (needs VALIDATOR_ROLE)."""
    from proofpool.cli.backend import check_services
    from proofpool.validator.celery_app import ROLE_ENV
    from proofpool.validator.resources import VALIDATOR_KEY_ENV

    from proofpool.infra.broker import reviews_queue, verdicts_queue
    from proofpool.infra.chain.accounts import KEY_ENV, load_account
    from proofpool.infra.offdevnet import check_off_devnet
    from proofpool.infra.served import ServedPools

    settings = get_settings()
    account = load_account(key)
    client = ChainClient.from_settings(None, rpc_url=rpc_url)
    if not client.pool.has_role("VALIDATOR_ROLE", account.address):
        raise ConfigError(
            f"{account.address} has no VALIDATOR_ROLE on the ComputePool; the admin grants it "
            "(proofpool.infra.chain.deploy.grant_validator)"
        )
    minimum, _ = client.pool.validator_stake_params()
    active = client.stake_manager.active_stake(account.address)
    if active < minimum:
        raise ConfigError(
            f"{account.address} has {format_pool(active)} POOL staked; a verdict needs {format_pool(minimum)} POOL: "
            f"stake the rest with `proofpool validator stake {format_pool(minimum - active)}`"
        )
    _check_gas(client, settings, account.address)
    served = ServedPools.configure(settings.served_pools, settings.served_managers, client.book.chain_id)
    check_off_devnet(settings, client.book.chain_id, [key or os.environ.get(KEY_ENV)])
    check_services(settings)
    env = {
        **os.environ,
        VALIDATOR_KEY_ENV: account.key.hex(),  # children have no terminal to ask for a keystore password
        "PROOFPOOL_RPC_URL": rpc_url or settings.rpc_url,
    }
    if concurrency is not None:
        env["PROOFPOOL_VALIDATOR_CONCURRENCY"] = str(concurrency)
    if sample_rate is not None:
        env["PROOFPOOL_VALIDATOR_SAMPLE_RATE"] = repr(sample_rate)
    if metrics_port is not None:
        env["PROOFPOOL_VALIDATOR_METRICS_PORT"] = str(metrics_port)
    slots = concurrency or settings.validator_concurrency
    name = account.address[2:10].lower()
    children = {
        "validate": _celery(
            [
                "-Q",
                f"validate,{reviews_queue(account.address)}",
                "--pool",
                "threads",
                "-c",
                str(slots),
                "-n",
                f"validate-{name}@%h",
                "--loglevel",
                loglevel,
            ],
            {**env, ROLE_ENV: "validate"},
        ),
        "verdicts": _celery(
            [
                *("-Q", verdicts_queue(account.address), "--pool", "solo", "-c", "1"),
                *("-n", f"verdicts-{name}@%h", "--loglevel", loglevel),
            ],
            {**env, ROLE_ENV: "verdicts"},
        ),
    }
    console.print(
        f"validator {account.address}: {slots} validation slot(s), sample rate "
        f"{sample_rate if sample_rate is not None else settings.validator_sample_rate}, one verdict sender; "
        f"serving {served.describe()}"
    )
    sys.exit(_supervise(children))


def _check_gas(client: ChainClient, settings: Settings, address: str) -> None:
    """Refuse a key under `PROOFPOOL_VALIDATOR_MIN_GAS_ETH` (one line); warn loudly when it runs low."""
    from proofpool.validator.status import require_validator_gas

    balance, warning = require_validator_gas(client, settings, address)
    if warning is not None:
        text = f"warning: {address} has {format_eth(balance)} ETH for gas: {warning}"
        console.print(f"[bold yellow]{text}[/bold yellow]", soft_wrap=True)  # one line in a log


def _celery(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "proofpool.validator.celery_app",
        "worker",
        "--without-gossip",
        *args,
    ]
    return subprocess.Popen(command, cwd=REPO_ROOT if FROM_CHECKOUT else None, env=env)


def _supervise(children: dict[str, subprocess.Popen[bytes]]) -> int:
    """Wait until a signal or a child's exit, then stop all; the exit code of the first to fail."""
    stopping = False

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    failed = 0
    while all(child.poll() is None for child in children.values()) and not stopping:
        time.sleep(0.2)
    for name, child in children.items():
        if child.poll() is not None and child.returncode and not stopping:
            console.print(f"[red]the {name} worker exited with {child.returncode}; stopping the other[/red]")
            failed = failed or child.returncode
    for child in children.values():
        if child.poll() is None:
            child.terminate()
    for child in children.values():
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
    return failed


@app.command()
def stake(
    amount: Annotated[str, typer.Argument(help="POOL tokens, e.g. 100")],
    key: KeyOption = None,
    rpc_url: RpcOption = None,
) -> None:
    """Stake tokens so the key may give verdicts (the ComputePool's minimum validator stake); an
    overturned verdict costs the pool-independent validator slash. Unbond and withdraw with
    `proofpool provider unbond` / `withdraw`: the StakeManager holds validators' and providers'
    stake alike."""
    from proofpool.cli.common import signer_client
    from proofpool.cli.provider import stake_tokens

    client = signer_client(key, rpc_url)
    stake_tokens(client, amount)
    minimum, slash = client.pool.validator_stake_params()
    active = client.stake_manager.active_stake(client.address)
    console.print(
        f"active stake {format_pool(active)} POOL; a verdict needs {format_pool(minimum)} POOL, "
        f"an overturned verdict costs {format_pool(slash)} POOL"
    )


@app.command()
@needs_extra("validator")
def status(
    address: Annotated[str | None, typer.Argument(help="Validator address (default: the --key's).")] = None,
    key: KeyOption = None,
    rpc_url: RpcOption = None,
    as_json: JsonOption = False,
) -> None:
    """Verdicts decided and sent, fees earned, slashes reported and queue depth of a validator."""
    from proofpool.validator.status import validator_status

    from proofpool.infra.chain.accounts import account_address

    who = address or account_address(key)
    data = validator_status(ChainClient.from_settings(None, rpc_url=rpc_url), get_settings(), who)
    if as_json:
        print_json(data)
        return
    for name, value in data.items():
        console.print(f"{name:24} {_show_field(name, value)}")


_POOL_FIELDS = {"withdrawable_rewards", "fees_earned", "slash_shares_earned"}


def _show_field(name: str, value: Any) -> str:
    """A status figure for people: amounts in POOL and ETH (the JSON keeps base units and wei)."""
    if name in _POOL_FIELDS and isinstance(value, int):
        return f"{format_pool(value)} POOL"
    if name == "eth_balance":
        return f"{format_eth(value)} ETH"
    return _show(value)


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return str(value)
