"""`proofpool chain`: the local devnet chain."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import typer
from proofpool.cli.common import wait_in_foreground
from rich.console import Console

from proofpool.core.errors import ProofpoolError
from proofpool.infra.chain.anvil import rpc_ready, start_anvil
from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=True)
console = Console()


def _pid_file() -> Path:
    return Path(get_settings().state_dir) / "anvil.pid"


@app.command()
def up(
    port: int = typer.Option(None, help="Port to listen on (default: PROOFPOOL_ANVIL_PORT, 8545)."),
    chain_id: int = typer.Option(31337, help="Chain id of the devnet."),
    block_time: float = typer.Option(None, help="Seconds per block; default mines one block per transaction."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Leave anvil running in the background."),
) -> None:
    """Start anvil on loopback and wait until it answers JSON-RPC."""
    settings = get_settings()
    port = port or settings.anvil_port
    url = f"http://127.0.0.1:{port}"
    if rpc_ready(url):
        raise ProofpoolError(f"a chain already answers on {url}; stop it first (`proofpool chain down`)")
    state = Path(settings.state_dir)
    state.mkdir(parents=True, exist_ok=True)
    anvil = start_anvil(port, chain_id=chain_id, block_time=block_time, log_path=state / "anvil.log")
    console.print(f"anvil up at {anvil.url} (chain id {chain_id}), log {state / 'anvil.log'}")
    if detach:
        _pid_file().write_text(str(anvil.process.pid))
        return
    wait_in_foreground(anvil.process, anvil.stop)


@app.command()
def down() -> None:
    """Stop an anvil started with `proofpool chain up --detach`."""
    pid_file = _pid_file()
    if not pid_file.exists():
        raise ProofpoolError(f"no detached chain recorded in {pid_file}")
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
        console.print(f"stopped anvil (pid {pid})")
    except ProcessLookupError:
        console.print(f"anvil (pid {pid}) was not running")
    pid_file.unlink()
