"""`proofpool keys`: local key material. Keys are written to files, never echoed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer
from eth_account import Account
from rich.console import Console

from proofpool.errors import ProofpoolError

app = typer.Typer(no_args_is_help=True)
console = Console()


@app.command()
def new(
    out: Path = typer.Argument(..., help="File to write the new key to (JSON: address + private key)."),
    force: bool = typer.Option(False, help="Overwrite an existing file."),
) -> None:
    """Create a new secp256k1 key and store it with owner-only permissions."""
    if out.exists() and not force:
        raise ProofpoolError(f"{out} exists; pass --force to overwrite it")
    account = Account.create()
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"address": account.address, "private_key": account.key.hex()}, handle)
    console.print(f"new key {account.address} written to {out} (mode 600)")


@app.command()
def show(path: Path = typer.Argument(..., help="Key file written by `keys new`.")) -> None:
    """Print the address of a key file (never the key)."""
    from proofpool.chain.accounts import load_account

    console.print(load_account(str(path)).address)
