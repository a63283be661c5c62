"""Options and rendering shared by the chain-facing commands, and `needs_extra`, the one place a
command of a role whose extra is not installed turns the missing import into a one-line error."""

from __future__ import annotations

import functools
import json
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, ParamSpec, TypeVar

import typer
from rich.console import Console

from proofpool.core.errors import ProofpoolError
from proofpool.infra.config import get_settings

if TYPE_CHECKING:  # web3 takes most of a second to import: only the commands that talk to a chain pay it
    from web3.types import TxReceipt

    from proofpool.infra.chain.client import ChainClient

console = Console()

P = ParamSpec("P")
R = TypeVar("R")

OPTIONAL_MODULES: Final = frozenset(
    {
        "accelerate", "alembic", "boto3", "botocore", "celery", "fastapi", "gguf", "hiredis", "jinja2", "kombu",
        "matplotlib",
        "numba", "numpy", "prometheus_client", "psycopg", "psycopg_pool", "pyarrow", "redis", "safetensors",
        "sqlalchemy", "starlette", "tokenizers", "torch", "transformers", "uvicorn", "vllm",
    }
)  # fmt: skip
"""Top-level modules that come with a role's extra (pyproject.toml), not with `pip install proofpool`."""
INSTALL_HINTS: Final = {
    "worker": "pip install 'proofpool[worker,cpu]' (vLLM for CPUs) or 'proofpool[worker,gpu]'",
    "validator": "pip install 'proofpool[validator]'",
    "trainer": "pip install 'proofpool[trainer]'",
    "backend": "pip install 'proofpool[backend]'",
    "devnet": "pip install 'proofpool[devnet,cpu]' (or `make setup` in a checkout)",
    "gguf": "pip install 'proofpool[gguf]'",
    "explorer": "pip install 'proofpool[explorer]'",
}
"""What to install for each extra a command may need."""


class MissingExtra(ProofpoolError):
    """A command needs a library of a role's extra that is not installed."""


def needs_extra(extra: str, command: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Mark a command as needing `extra` (worker, validator, trainer, backend, devnet): when a module
    of an extra is missing while it runs, it fails with "proofpool worker run needs the worker extra:
    pip install ..." (exit 1) instead of a traceback. Other import errors (a bug, a broken install)
    pass through. `command` defaults to `proofpool <group> <function name>`.

        @app.command()
        @needs_extra("worker")
        def run(...) -> None: ...
    """
    if extra not in INSTALL_HINTS:
        raise ValueError(f"unknown extra {extra!r}")

    def decorate(func: Callable[P, R]) -> Callable[P, R]:
        name = command or f"proofpool {func.__module__.rsplit('.', 1)[-1]} {func.__name__.replace('_', '-')}"

        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return func(*args, **kwargs)
            except ModuleNotFoundError as exc:
                missing = (exc.name or "").partition(".")[0]
                if missing not in OPTIONAL_MODULES:
                    raise
                raise MissingExtra(
                    f"{name} needs the {extra} extra: {INSTALL_HINTS[extra]} (missing: {missing})"
                ) from exc

        return wrapper

    return decorate


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
StateDirOption = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        help="Pid file, log and data of what `up` starts; `down` needs the same. "
        "Default: $PROOFPOOL_STATE_DIR, else ~/.local/share/proofpool/state.",
        show_default=False,
    ),
]


def resolve_state_dir(option: Path | None) -> Path:
    """`--state-dir` when given, else the `state_dir` setting: the one place `up` and `down` of the
    devnet services agree on where a detached service is recorded."""
    return (option or get_settings().state_dir).expanduser()


def down_command(group: str, option: Path | None, state: Path) -> str:
    """The command that stops what `proofpool GROUP up --detach` started: with the --state-dir it was given."""
    return f"proofpool {group} down" + (f" --state-dir {state}" if option is not None else "")


def signer_client(key: str | None, rpc_url: str | None) -> ChainClient:
    """A client that sends as the given key."""
    from proofpool.infra.chain.accounts import load_account
    from proofpool.infra.chain.client import ChainClient

    return ChainClient.from_settings(load_account(key), rpc_url=rpc_url)


def reader_client(rpc_url: str | None) -> ChainClient:
    """A read-only client."""
    from proofpool.infra.chain.client import ChainClient

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
