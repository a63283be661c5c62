"""The OpenAPI document lists what each operation really answers, refusals included.

A route declares its own refusals (`responses={403: {"description": "`code`: why"}}`, next to
the code that raises them). The refusals that come from the machinery around a route are
added here, derived from what the route depends on, so the document cannot forget them when a
route gains a dependency: 413 from the body cap (every route), 422 from validation (routes with
parameters or a body), 400 for an unparsable body, 404 for a path that matches no route, 401
and 503 from the signed-request check, 503 from PostgreSQL or Redis being down. Every 4xx/5xx answer without a
schema of its own gets `ErrorBody`, which is what `proofpool.backend.api.errors` sends.
`tests/integration/test_api_schemathesis.py` fuzzes every operation with signed requests and
fails on any status or body the document does not list.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import get_flat_dependant
from fastapi.routing import APIRoute
from proofpool.backend.api.deps import get_conn, get_nonce_store, get_redis, signed_caller
from proofpool.backend.api.errors import ErrorBody

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
"""FastAPI's default 422 body; ours is `ErrorBody`, so these go unless something else uses them."""

BODY_TOO_LARGE = (
    "`body_too_large`: the request body is over PROOFPOOL_REQUEST_MAX_BYTES, declared or counted as it "
    "arrives (chunked); the connection is closed without reading the rest."
)
INVALID = "`invalid_request`: a path, query or body value is malformed; `detail` lists each `{loc, msg}`."
UNPARSABLE = "`http_error`: the body cannot be parsed at all (e.g. JSON nested thousands deep)."
NO_ROUTE = "`not_found`: the path matches no route (a path parameter that is empty or holds `/`)."
UNSIGNED = (
    "The signed-request check refused it: `missing_header`, `bad_address`, `bad_timestamp`, `bad_nonce`, "
    "`bad_signature`, `address_mismatch` (not signed by X-Address for this method, path, body, deployment and "
    "host), `wrong_host` (sent to a host this backend is not), `stale_timestamp`, `future_timestamp`, "
    "`replayed_nonce`, `predates_nonce_store` (the nonce store started empty after it was signed: sign "
    "again after Retry-After seconds)."
)
SIGNING_UNAVAILABLE = (
    "`chain_unknown`: the backend does not know its deployment yet (the indexer has not run), so it cannot "
    "check signatures."
)
DATABASE_UNAVAILABLE = "`service_unavailable`: PostgreSQL is unreachable."
REDIS_UNAVAILABLE = "`service_unavailable`: Redis is unreachable."


def install_error_docs(app: FastAPI) -> None:
    """Make `app.openapi()` add the refusals of `route_errors` to every operation (once, cached)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document_errors(build(), app.routes)  # `build` caches the document in app.openapi_schema
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


def route_errors(route: APIRoute) -> dict[int, list[str]]:
    """Status -> descriptions of the refusals `route` gets from what it depends on."""
    flat = get_flat_dependant(route.dependant)
    calls = set(_calls(route.dependant))
    errors: dict[int, list[str]] = {413: [BODY_TOO_LARGE]}
    if flat.path_params or flat.query_params or flat.header_params or flat.cookie_params or flat.body_params:
        errors[422] = [INVALID]
    if flat.body_params:
        errors[400] = [UNPARSABLE]
    if flat.path_params:
        errors[404] = [NO_ROUTE]
    if signed_caller in calls:
        errors[401] = [UNSIGNED]
        errors.setdefault(503, []).append(SIGNING_UNAVAILABLE)
    if get_conn in calls:
        errors.setdefault(503, []).append(DATABASE_UNAVAILABLE)
    if calls & {get_redis, get_nonce_store}:
        errors.setdefault(503, []).append(REDIS_UNAVAILABLE)
    return errors


def document_errors(schema: dict[str, Any], routes: list[Any]) -> None:
    """Add each API route's `route_errors` to its operations in `schema`, and `ErrorBody` as the
    body of every refusal that has no schema of its own."""
    for route in routes:
        if not isinstance(route, APIRoute) or not route.include_in_schema:
            continue
        extra = route_errors(route)
        for method in route.methods:
            operation = schema["paths"][route.path_format][method.lower()]
            _merge(operation["responses"], extra)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    components["ErrorBody"] = ErrorBody.model_json_schema()
    text = json.dumps(schema["paths"])
    for name in FASTAPI_VALIDATION_SCHEMAS:
        if f'"#/components/schemas/{name}"' not in text:
            components.pop(name, None)


def _merge(responses: dict[str, Any], extra: dict[int, list[str]]) -> None:
    for status, descriptions in extra.items():
        entry = responses.setdefault(str(status), {})
        declared = entry.get("description", "")
        if status == 422 and declared == "Validation Error":  # FastAPI's default: ours replaces it
            declared, entry["content"] = "", {"application/json": {"schema": ERROR_REF}}
        entry["description"] = " ".join(part for part in (declared, *descriptions) if part)
    for status, entry in responses.items():
        if status[0] in "45" and "content" not in entry:
            entry["content"] = {"application/json": {"schema": ERROR_REF}}


def _calls(dependant: Dependant) -> Iterator[Callable[..., Any]]:
    """Every callable `dependant` depends on, at any depth."""
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)
