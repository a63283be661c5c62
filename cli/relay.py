"""`proofpool relay`: serve checkpoints to workers and validators, mirrored from S3 or another relay."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from proofpool.cli.common import console, needs_extra

from proofpool.core.errors import ConfigError, ServiceUnavailable
from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=True)


@app.command()
@needs_extra("backend")
def serve(
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to bind.")] = 8790,
    host: Annotated[str, typer.Option(help="Interface to bind (0.0.0.0 to serve other machines).")] = "127.0.0.1",
    upstream: Annotated[
        str,
        typer.Option(
            help="Where versions are mirrored from: `s3` (S3_ENDPOINT_URL, PROOFPOOL_S3_BUCKET) or the base URL "
            "of another relay, e.g. http://10.0.0.5:8790."
        ),
    ] = "s3",
    cache_dir: Annotated[
        Path | None, typer.Option(help="Mirrored files. Default: $PROOFPOOL_STATE_DIR/relay-<port>.")
    ] = None,
    prefix: Annotated[
        str, typer.Option(help="Key prefix above pools/ in the bucket (upstream s3 only), ending in '/'.")
    ] = "",
    parallel: Annotated[int, typer.Option(min=1, max=64, help="Files mirrored from upstream at once.")] = 4,
    log_level: Annotated[str, typer.Option(help="uvicorn log level: debug, info, warning, error.")] = "warning",
) -> None:
    """Serve GET /checkpoints/{pool}/{version}/{file}, mirroring each version from UPSTREAM on first request.

    Clients verify every file against the manifest and the manifest against the chain: a relay spares the store's
    egress and can never make a node load other weights.
    """
    import httpx
    import uvicorn

    from proofpool.infra.checkpoint.relay import Relay, RelayUpstream, StoreUpstream, Upstream, create_relay_app
    from proofpool.infra.checkpoint.sources import check_relay_url, relay_client
    from proofpool.infra.checkpoint.store import checkpoint_prefix
    from proofpool.infra.storage import ObjectStore

    settings = get_settings()
    source: Upstream
    if upstream == "s3":
        try:
            checkpoint_prefix(0, 0, prefix)  # a malformed prefix is refused before anything starts
        except ValueError as exc:
            raise ConfigError(str(exc)) from exc
        store = ObjectStore.from_settings(settings)
        store.check()  # one line naming the endpoint and what to try, instead of failing every request
        source = StoreUpstream(store, prefix)
    else:
        base = check_relay_url(upstream)
        try:
            httpx.get(f"{base}/healthz", timeout=5.0).raise_for_status()
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(f"upstream relay {base} does not answer /healthz ({exc}); start it first") from exc
        source = RelayUpstream(base, relay_client(parallel))
    directory = cache_dir or Path(settings.state_dir) / f"relay-{port}"
    relay = Relay(directory, source, parallel=parallel, max_bytes=get_settings().checkpoint_max_bytes)
    console.print(f"relay on http://{host}:{port}, mirroring from {source.name} into {directory}")
    uvicorn.run(create_relay_app(relay), host=host, port=port, log_level=log_level, access_log=False)
