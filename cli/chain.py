"""`proofpool chain`: the local devnet chain."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import typer
from proofpool.cli.common import RpcOption, StateDirOption, down_command, resolve_state_dir, wait_in_foreground
from rich.console import Console

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.anvil import (
    ANVIL_ACCOUNTS,
    ANVIL_BALANCE_ETH,
    ANVIL_KEYS,
    anvil_account,
    fund_account,
    rpc_ready,
    start_anvil,
)
from proofpool.infra.chain.networks import DEVNET_CHAIN_ID
from proofpool.infra.chain.rpc import connect
from proofpool.infra.chain.units import format_eth, parse_eth
from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=True)
console = Console()


def _pid_file(state: Path) -> Path:
    return state / "anvil.pid"


@app.command()
def up(
    port: int = typer.Option(None, help="Port to listen on (default: PROOFPOOL_ANVIL_PORT, 8545)."),
    chain_id: int = typer.Option(31337, help="Chain id of the devnet."),
    block_time: float = typer.Option(None, help="Seconds per block; default mines one block per transaction."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Leave anvil running in the background."),
    state_dir: StateDirOption = None,
) -> None:
    """Start anvil on loopback and wait until it answers JSON-RPC."""
    settings = get_settings()
    port = port or settings.anvil_port
    url = f"http://127.0.0.1:{port}"
    if rpc_ready(url):
        raise ProofpoolError(f"a chain already answers on {url}; stop it first (`proofpool chain down`)")
    state = resolve_state_dir(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    anvil = start_anvil(port, chain_id=chain_id, block_time=block_time, log_path=state / "anvil.log")
    console.print(f"anvil up at {anvil.url} (chain id {chain_id}), log {state / 'anvil.log'}")
    _print_funded_accounts(chain_id)
    if detach:
        pid_file = _pid_file(state)
        pid_file.write_text(str(anvil.process.pid))
        stop = down_command("chain", state_dir, state)
        console.print(f"pid {anvil.process.pid} recorded in {pid_file}; `{stop}` stops it", soft_wrap=True)
        return
    wait_in_foreground(anvil.process, anvil.stop)


@app.command()
def down(state_dir: StateDirOption = None) -> None:
    """Stop an anvil started with `proofpool chain up --detach` (and the same --state-dir)."""
    pid_file = _pid_file(resolve_state_dir(state_dir))
    if not pid_file.exists():
        raise ProofpoolError(f"no detached chain recorded in {pid_file}; was it started with another --state-dir?")
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
        console.print(f"stopped anvil (pid {pid})")
    except ProcessLookupError:
        console.print(f"anvil (pid {pid}) was not running")
    pid_file.unlink()


def _print_funded_accounts(chain_id: int) -> None:
    """Where a new devnet's ETH is: anvil's well-known accounts, and `chain fund` for any other."""
    console.print(
        f"funded development accounts: anvil's {ANVIL_ACCOUNTS} well-known keys ({ANVIL_BALANCE_ETH:,} ETH each); "
        f"first: {anvil_account(0).address} key {ANVIL_KEYS[0]}"
        + ("; `proofpool chain fund ADDRESS` sends ETH to any other" if chain_id == DEVNET_CHAIN_ID else ""),
        soft_wrap=True,
    )


@app.command()
def fund(
    address: str = typer.Argument(..., help="The address to give ETH for gas, e.g. a key made by `keys new`."),
    amount: str = typer.Argument("100", help="ETH to add to its balance."),
    rpc_url: RpcOption = None,
) -> None:
    """Give an address devnet ETH for gas (chain id 31337 only): AMOUNT is added to its balance."""
    settings = get_settings()
    wei = parse_eth(amount)
    balance = fund_account(connect(rpc_url or settings.rpc_url, timeout=settings.rpc_timeout), address, wei)
    console.print(f"{address} now has {format_eth(balance)} ETH")
