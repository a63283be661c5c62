"""Every failure a visitor can meet is a page that says what happened, with the right status, never
a stack trace: bad input 422, unknown things 404, a ledger refusal its own 4xx, an unreachable (or
failing) backend 503 (502). The live feed's JSON route answers the same failures as JSON
(`{"error", "detail"}`, the ledger API's shape) so its script can show them."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from proofpool.explorer.errors import BadInput, NotFound
from proofpool.explorer.render import html
from starlette.exceptions import HTTPException as StarletteHTTPException

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.http.ledger_client import LedgerRefused

log = logging.getLogger(__name__)

JSON_ROUTE_SUFFIX = "/feed"
"""Requests whose path ends so get JSON errors (the live feed's polling route)."""

_TITLES = {
    404: "Not found",
    405: "Method not allowed",
    422: "Bad request",
    502: "The ledger API failed",
    503: "The ledger API is unreachable",
}


def refusal_status(exc: LedgerRefused) -> int:
    """The status a page shows for a ledger refusal: the API's own for a 4xx; a failing backend is
    a bad gateway, an unavailable one (its database down) unavailable."""
    if 400 <= exc.status < 500:
        return exc.status
    return 503 if exc.status == 503 else 502


def _refusal_message(exc: LedgerRefused) -> str:
    if exc.error == "invalid_cursor":
        return f"The ledger refused this page's cursor (a page link that was edited or cut short?): {exc.detail}"
    return str(exc)


def error_page(request: Request, status: int, error: str, message: str) -> Response:
    if request.url.path.endswith(JSON_ROUTE_SUFFIX):
        return JSONResponse({"error": error, "detail": message}, status_code=status)
    context = {"title": _TITLES.get(status, "Error"), "status": status, "error": error, "message": message}
    return html(request, "error.html", context, status=status)


def install_error_pages(app: FastAPI) -> None:
    """Map the explorer's and the ledger client's errors, and HTTP errors, to error pages."""

    @app.exception_handler(BadInput)
    async def _bad_input(request: Request, exc: BadInput) -> Response:
        return error_page(request, 422, "invalid_request", str(exc))

    @app.exception_handler(NotFound)
    async def _not_found(request: Request, exc: NotFound) -> Response:
        return error_page(request, 404, "not_found", str(exc))

    @app.exception_handler(LedgerRefused)
    async def _refused(request: Request, exc: LedgerRefused) -> Response:
        status = refusal_status(exc)
        if status >= 500:
            log.warning("ledger API failed on %s: %s", request.url.path, exc)
        return error_page(request, status, exc.error, _refusal_message(exc))

    @app.exception_handler(ServiceUnavailable)
    async def _unavailable(request: Request, exc: ServiceUnavailable) -> Response:
        log.warning("ledger API unavailable on %s: %s", request.url.path, exc)
        return error_page(request, 503, "service_unavailable", str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in exc.errors())
        return error_page(request, 422, "invalid_request", problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        message = "No page here." if exc.status_code == 404 else str(exc.detail)
        return error_page(request, exc.status_code, "not_found" if exc.status_code == 404 else "error", message)
