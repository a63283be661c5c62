"""`proofpool storage`: the devnet object store (SeaweedFS) and a look into any S3 bucket."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

import typer
from proofpool.cli.common import StateDirOption, down_command, needs_extra, resolve_state_dir, wait_in_foreground
from rich.console import Console
from rich.table import Table

from proofpool.core.errors import ProofpoolError
from proofpool.infra.config import get_settings

if TYPE_CHECKING:
    from proofpool.infra.storage.seaweed import SeaweedPorts

app = typer.Typer(no_args_is_help=True)
console = Console()

DEFAULT_S3_PORT = 8333


def _pid_file(state: Path) -> Path:
    return state / "seaweed.pid"


def _read_pid(pid_file: Path) -> int:
    """The pid recorded by `up --detach`; 0 for an empty or garbled file."""
    text = pid_file.read_text().strip()
    return int(text) if text.isdigit() else 0


def _default_port() -> int:
    endpoint = urlparse(get_settings().s3_endpoint_url)
    return endpoint.port or DEFAULT_S3_PORT


@app.command()
@needs_extra("devnet")
def up(
    port: int = typer.Option(
        None, min=1, max=65535, help="S3 port on 127.0.0.1 (default: the port of S3_ENDPOINT_URL, else 8333)."
    ),
    data_dir: Path = typer.Option(
        None, "--dir", help="Data directory (default: the state directory's seaweed/); kept across restarts."
    ),
    detach: bool = typer.Option(False, "--detach", "-d", help="Leave the store running in the background."),
    startup_timeout: float = typer.Option(60.0, min=1, help="Seconds to wait for the S3 gateway and bucket."),
    state_dir: StateDirOption = None,
) -> None:
    """Start SeaweedFS (`weed mini`) on loopback with the configured bucket and credentials."""
    from proofpool.infra.storage.seaweed import is_weed_process, port_in_use, start_seaweed

    settings = get_settings()
    port = port or _default_port()
    state = resolve_state_dir(state_dir)
    pid_file = _pid_file(state)
    if pid_file.exists():
        pid = _read_pid(pid_file)
        if pid and is_weed_process(pid):
            raise ProofpoolError(f"a detached store already runs (pid {pid}); stop it with `proofpool storage down`")
        pid_file.unlink()
    if port_in_use(port):
        raise ProofpoolError(f"something already listens on 127.0.0.1:{port}; stop it or pick another --port")
    state.mkdir(parents=True, exist_ok=True)
    data_dir = data_dir or state / "seaweed"
    log_path = state / "seaweed.log"
    ports = _devnet_ports(port)
    store = start_seaweed(
        data_dir,
        access_key=settings.s3_access_key,
        secret_key=settings.s3_secret_key,
        bucket=settings.s3_bucket,
        ports=ports,
        region=settings.s3_region,
        log_path=log_path,
        startup_timeout=startup_timeout,
    )
    console.print(f"SeaweedFS S3 up at {store.endpoint_url}, bucket {store.bucket!r}, data {data_dir}, log {log_path}")
    if store.endpoint_url != settings.s3_endpoint_url.rstrip("/"):
        console.print(
            f"note: S3_ENDPOINT_URL is {settings.s3_endpoint_url}; export S3_ENDPOINT_URL={store.endpoint_url}"
        )
    if detach:
        pid_file.write_text(str(store.pid))
        stop = down_command("storage", state_dir, state)
        console.print(f"pid {store.pid} recorded in {pid_file}; `{stop}` stops it", soft_wrap=True)
        return
    wait_in_foreground(store.process, store.stop)


@app.command()
@needs_extra("devnet")
def down(
    timeout: float = typer.Option(15.0, min=1, help="Seconds to wait before killing it."),
    state_dir: StateDirOption = None,
) -> None:
    """Stop a store started with `proofpool storage up --detach` (and the same --state-dir)."""
    from proofpool.infra.storage.seaweed import stop_pid

    pid_file = _pid_file(resolve_state_dir(state_dir))
    if not pid_file.exists():
        raise ProofpoolError(f"no detached store recorded in {pid_file}; was it started with another --state-dir?")
    pid = _read_pid(pid_file)
    if pid and stop_pid(pid, timeout=timeout):
        console.print(f"stopped SeaweedFS (pid {pid})")
    else:
        console.print(f"SeaweedFS (pid {pid}) was not running")
    pid_file.unlink()


@app.command("ls")
@needs_extra("backend")
def ls(
    prefix: str = typer.Argument("", help="Key prefix, e.g. pools/1/rollouts/ (default: the whole bucket)."),
    limit: int = typer.Option(100, min=1, help="List at most this many objects."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
) -> None:
    """List objects of the configured bucket (S3_ENDPOINT_URL, PROOFPOOL_S3_BUCKET)."""
    from proofpool.infra.storage import ObjectStore

    store = ObjectStore.from_settings(get_settings())
    objects = list(store.list_objects(prefix, limit=limit))
    if as_json:
        rows = [
            {
                "key": o.key,
                "size": o.size,
                "etag": o.etag,
                "last_modified": o.last_modified.isoformat() if o.last_modified else None,
            }
            for o in objects
        ]
        typer.echo(json.dumps(rows, indent=2))
        return
    table = Table("key", "size", "last modified", title=f"s3://{store.bucket}/{prefix}")
    for o in objects:
        table.add_row(o.key, f"{o.size:,}", o.last_modified.isoformat(timespec="seconds") if o.last_modified else "")
    console.print(table)
    if len(objects) == limit:
        console.print(f"(first {limit}; raise --limit for more)")


def _devnet_ports(s3: int) -> SeaweedPorts:
    """SeaweedFS's default ports when all are free (stable across restarts), else free ones."""
    from proofpool.infra.storage.seaweed import SeaweedPorts, port_in_use

    try:
        ports = SeaweedPorts.defaults(s3)
    except ValueError:
        return SeaweedPorts.free(s3=s3)
    busy = [p for p in ports.all_ports()[1:] if port_in_use(p)]
    if busy:
        console.print(f"SeaweedFS default ports {busy} are busy; using free ports for its internal services")
        return SeaweedPorts.free(s3=s3)
    return ports
