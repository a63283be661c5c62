"""The explorer's app factory: `create_explorer(ledger)` serves the pages over `ledger`.

Standalone, over a backend's HTTP API (`explorer_from_settings` reads its URL from the settings):

    app = create_explorer(ExplorerLedger("http://127.0.0.1:8000"))

Inside the backend's process, reading its ledger in-process, under /explorer:

    backend = create_app(settings)
    mount_explorer(backend)  # the explorer over ExplorerLedger(transport=httpx.ASGITransport(app=backend))

Nothing is built at import. The app owns its ledger client: its lifespan closes it (a mounted app's
lifespan does not run; an in-process transport holds nothing to close).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from proofpool.explorer.error_pages import install_error_pages
from proofpool.explorer.ledger import ExplorerLedger
from proofpool.explorer.pages import ROUTERS
from proofpool.explorer.render import STATIC, make_templates
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proofpool.infra.config import get_settings

MOUNT_PATH = "/explorer"
"""Where the backend's process serves the explorer."""

SECURITY_HEADERS = {
    # Everything is served from the app itself: no CDN, no inline script or style.
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class SecurityHeaders:
    """Adds `SECURITY_HEADERS` to every response (pure ASGI: no buffering of bodies)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def create_explorer(ledger: ExplorerLedger, *, root_path: str = "") -> FastAPI:
    """The explorer's pages over `ledger`. `root_path`: the path prefix a proxy serves it under
    (leave it empty when mounting: the mount sets it)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await ledger.aclose()

    app = FastAPI(
        title="proofpool explorer",
        root_path=root_path,
        lifespan=lifespan,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )
    app.state.ledger = ledger
    app.state.templates = make_templates()
    install_error_pages(app)
    app.add_middleware(SecurityHeaders)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for router in ROUTERS:
        app.include_router(router)
    return app


def explorer_from_settings() -> FastAPI:
    """The explorer over the backend at the settings' `backend_url` ($PROOFPOOL_BACKEND_URL), for
    `uvicorn --factory proofpool.explorer.app:explorer_from_settings`."""
    return create_explorer(ExplorerLedger(get_settings().backend_url))


def mount_explorer(app: FastAPI, path: str = MOUNT_PATH) -> FastAPI:
    """Serve the explorer under `path` of `app` (the backend), reading `app`'s ledger API in-process.

    `app`'s lifespan must be running when pages are asked (uvicorn and TestClient run it): the
    ledger's routes use its database pool. Returns the mounted explorer."""
    explorer = create_explorer(ExplorerLedger(transport=httpx.ASGITransport(app=app)))
    app.mount(path, explorer)
    return explorer
