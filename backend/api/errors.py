"""Every error the API returns is JSON `{"error": code, "detail": ...}` with a 4xx status;
a 500 is a bug, and even then the body is JSON without internals."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from proofpool.auth.signed_request import AuthError
from proofpool.errors import ServiceUnavailable

log = logging.getLogger(__name__)


class ApiError(Exception):
    """A refusal with an HTTP status and a stable error code."""

    def __init__(self, status: int, error: str, detail: Any = None) -> None:
        self.status, self.error, self.detail = status, error, detail
        super().__init__(f"{status} {error}: {detail}")


def error_response(status: int, error: str, detail: Any = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": error, "detail": detail})


def install_error_handlers(app: FastAPI) -> None:
    """Map our exceptions, validation errors and HTTP errors to the JSON error shape."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.error, exc.detail)

    @app.exception_handler(AuthError)
    async def _auth_error(_: Request, exc: AuthError) -> JSONResponse:
        return error_response(401, exc.reason, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        return error_response(422, "invalid_request", details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, _code_for(exc.status_code), exc.detail)

    @app.exception_handler(ServiceUnavailable)
    async def _unavailable(_: Request, exc: ServiceUnavailable) -> JSONResponse:
        return error_response(503, "service_unavailable", str(exc))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "unexpected server error")


def _code_for(status: int) -> str:
    return {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(status, "http_error")
