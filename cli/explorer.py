"""`proofpool explorer`: the market explorer's pages on their own, over a backend's ledger API.

`proofpool backend serve` already serves them under /explorer; this command serves them apart from
the backend (another host, another port), reading the ledger API of $PROOFPOOL_BACKEND_URL (or
--backend-url) over HTTP. Read-only: it signs nothing and needs no database.
"""

from __future__ import annotations

from typing import Annotated

import typer
from proofpool.cli.common import console, needs_extra

from proofpool.infra.config import get_settings

app = typer.Typer(no_args_is_help=True)


@app.command()
@needs_extra("explorer")
def serve(
    backend_url: Annotated[
        str | None, typer.Option(help="Backend whose ledger API the pages read. Default: $PROOFPOOL_BACKEND_URL.")
    ] = None,
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to bind.")] = 8090,
    log_level: Annotated[str, typer.Option(help="uvicorn log level: debug, info, warning, error.")] = "info",
) -> None:
    """Serve the explorer (market, pools, providers, nodes, validators, submissions, search) at
    http://HOST:PORT/, every number read from the backend's public ledger API."""
    import uvicorn
    from proofpool.explorer.app import create_explorer
    from proofpool.explorer.ledger import ExplorerLedger

    url = (backend_url or get_settings().backend_url).rstrip("/")
    console.print(f"explorer on http://{host}:{port}/ over the ledger API of {url}")
    uvicorn.run(create_explorer(ExplorerLedger(url)), host=host, port=port, log_level=log_level)
