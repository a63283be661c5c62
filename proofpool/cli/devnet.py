"""`proofpool devnet`: the embedded devnet market."""

from __future__ import annotations

import typer
from rich.console import Console

app = typer.Typer(no_args_is_help=True)


@app.command("chain-loop")
def chain_loop(
    rpc_url: str = typer.Option(None, help="Use this chain instead of starting a throw-away anvil."),
) -> None:
    """Run the chain half of the market loop on anvil and print balances and events."""
    from proofpool.devnet.chain_loop import main

    console = Console()
    main(console if console.is_terminal else Console(width=140), rpc_url)
