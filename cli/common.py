"""Options and rendering shared by the chain-facing commands."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from web3.types import TxReceipt

from proofpool.infra.chain.accounts import load_account
from proofpool.infra.chain.client import ChainClient

console = Console()

KeyOption = Annotated[
    str | None,
    typer.Option(
        "--key",
        "-k",
        help="Signing key: 0x-hex, a key file from `keys new`, or env:NAME. Default: $PROOFPOOL_PRIVATE_KEY.",
        show_default=False,
    ),
]
RpcOption = Annotated[
    str | None,
    typer.Option("--rpc-url", help="JSON-RPC endpoint. Default: $PROOFPOOL_RPC_URL or http://127.0.0.1:8545."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def signer_client(key: str | None, rpc_url: str | None) -> ChainClient:
    """A client that sends as the given key."""
    return ChainClient.from_settings(load_account(key), rpc_url=rpc_url)


def reader_client(rpc_url: str | None) -> ChainClient:
    """A read-only client."""
    return ChainClient.from_settings(None, rpc_url=rpc_url)


def report_tx(client: ChainClient, what: str, receipt: TxReceipt) -> None:
    """One line per transaction: what happened, its hash, block and the events it emitted."""
    names = ", ".join(event.name for event in client.decoder().decode_receipt(receipt))
    console.print(
        f"{what}: tx 0x{receipt['transactionHash'].hex()} in block {receipt['blockNumber']}"
        f" (gas {receipt['gasUsed']:,}){' — ' + names if names else ''}"
    )


def print_json(data: Any) -> None:
    """JSON to stdout; bytes as 0x-hex, big ints kept exact."""

    def default(value: Any) -> Any:
        if isinstance(value, bytes):
            return "0x" + value.hex()
        return str(value)

    typer.echo(json.dumps(data, indent=2, default=default))


def wait_in_foreground(process: subprocess.Popen, stop: Callable[[], None]) -> None:
    """Keep a service started by `... up` running until it exits, Ctrl-C or SIGTERM, then stop it
    (so a supervisor's SIGTERM does not orphan the child)."""

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    console.print("Ctrl-C stops it.")
    try:
        while process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
