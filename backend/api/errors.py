"""Every error the API returns is JSON `{"error": code, "detail": ...}` (`ErrorBody`) with a
4xx status, or 503 when a service it needs is down; a 500 is a bug, and even then the body is
JSON without internals."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg import OperationalError
from pydantic import BaseModel, Field
from redis.exceptions import RedisError
from starlette.exceptions import HTTPException as StarletteHTTPException

from proofpool.core.auth.signed_request import AuthError
from proofpool.core.errors import ServiceUnavailable

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    """The body of every refusal (the OpenAPI document lists the codes per operation and status)."""

    error: str = Field(description="Stable code, e.g. `replayed_nonce` or `invalid_request`.")
    detail: Any = Field(
        description="What went wrong, for people: text, or for `invalid_request` a list of `{loc, msg}`."
    )


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
        response = error_response(401, exc.reason, str(exc))
        if exc.retry_after is not None:
            response.headers["Retry-After"] = str(exc.retry_after)
        return response

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

    @app.exception_handler(OperationalError)  # PostgreSQL down or the pool exhausted (PoolTimeout)
    async def _database_down(request: Request, exc: OperationalError) -> JSONResponse:
        log.warning("database unavailable on %s %s: %s", request.method, request.url.path, exc.__class__.__name__)
        return error_response(503, "service_unavailable", "the database is unreachable; retry later")

    @app.exception_handler(RedisError)
    async def _redis_down(request: Request, exc: RedisError) -> JSONResponse:
        log.warning("Redis unavailable on %s %s: %s", request.method, request.url.path, exc.__class__.__name__)
        return error_response(503, "service_unavailable", "Redis is unreachable; retry later")

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "unexpected server error")


def _code_for(status: int) -> str:
    return {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}.get(status, "http_error")
