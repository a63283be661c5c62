"""The public contribution ledger: read-only, unsigned, for auditors, trainers and dashboards.

Every list is a keyset page (`limit`, `cursor` -> `items`, `next_cursor`), oldest first or with
`?order=desc` newest first, in JSON or, with `?format=csv`, CSV with the next cursor in the
`X-Next-Cursor` header. Every row of a chain list names the block and transaction that produced
it, so any figure can be checked against the chain; the statistics lists (pool_stats,
contributors, validator_stats) sum those rows.

One route per listing of `proofpool.core.ledger_listings`, made below from its declaration; the
one hand-written route looks up a single submission with its verdicts, slash and credits.
"""

from __future__ import annotations

import csv
import inspect
import io
import json
import logging
from functools import cache
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from proofpool.backend.api.deps import Conn
from proofpool.backend.api.errors import ApiError
from proofpool.backend.api.ledger_models import QUERIES, Bigint, LedgerPage, PageQuery, WorkKey
from proofpool.backend.db import ledger
from proofpool.backend.db.ledger import InvalidCursor, SubmissionDetail
from pydantic import TypeAdapter

from proofpool.core.ledger_listings import LISTINGS, Listing, csv_cell

log = logging.getLogger(__name__)

router = APIRouter(prefix="/ledger", tags=["ledger"])

NEXT_CURSOR_HEADER = "X-Next-Cursor"


def _csv_doc(listing: Listing) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "content": {"text/csv": {"schema": {"type": "string"}}},
            "description": f"JSON page, or with format=csv a header row ({', '.join(_header(listing))}) "
            f"and one line per row; the next cursor is in the {NEXT_CURSOR_HEADER} header.",
        },
        422: {
            "description": "`invalid_cursor`: `cursor` is not one this listing handed out in this `order`; "
            "`invalid_request`: a malformed parameter."
        },
    }


def _header(listing: Listing) -> list[str]:
    return [column.name for column in listing.columns]


async def _page(conn: Conn, listing: Listing, query: PageQuery) -> Any:
    """Fetch one page and render it as the query asks; a foreign cursor is a 422, not a 500."""
    try:
        page = await ledger.fetch_page(
            conn, listing, filters=query.filters(), cursor=query.cursor, limit=query.limit, order=query.order
        )
    except InvalidCursor as exc:
        log.info("ledger refused a cursor", extra={"listing": listing.name, "reason": str(exc)})
        raise ApiError(422, "invalid_cursor", str(exc)) from exc
    log.debug(
        "ledger page",
        extra={"listing": listing.name, "rows": len(page.items), "more": page.next_cursor is not None,
               "order": query.order.value, **{k: v for k, v in query.filters().items() if v is not None}},
    )  # fmt: skip
    if query.format == "csv":
        return _csv_response(listing, page)
    return _json_response(listing, page)


@cache
def _adapter(row: type) -> TypeAdapter[list[Any]]:
    """Serializer of a list of rows (built once per type: building one costs milliseconds)."""
    return TypeAdapter(list[row])  # type: ignore[valid-type]


def _json_response(listing: Listing, page: ledger.Page[Any]) -> Response:
    """The page as the `LedgerPage` JSON, serialized straight from the rows: they are typed and
    converted in `proofpool.backend.db.ledger`, so validating them again would only cost time."""
    items = _adapter(ledger.row_type(listing)).dump_json(page.items)
    body = b'{"items":' + items + b',"next_cursor":' + json.dumps(page.next_cursor).encode() + b"}"
    return Response(body, media_type="application/json")


def _csv_response(listing: Listing, page: ledger.Page[Any]) -> Response:
    """The page as CSV; each cell is the JSON value as text (null -> empty, booleans true/false)."""
    names = _header(listing)
    rows = _adapter(ledger.row_type(listing)).dump_python(page.items, mode="json")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for values in rows:
        writer.writerow([csv_cell(values[name]) for name in names])
    headers = {NEXT_CURSOR_HEADER: page.next_cursor} if page.next_cursor else {}
    return Response(out.getvalue(), media_type="text/csv", headers=headers)


def _add_list_route(listing: Listing) -> None:
    """`GET /ledger/<name>`: its query model read from the query string, its rows as `LedgerPage`."""

    async def list_rows(conn: Conn, query: PageQuery) -> Any:
        return await _page(conn, listing, query)

    # FastAPI reads the parameters from the signature; the query model is this listing's own.
    list_rows.__signature__ = inspect.Signature(
        [
            inspect.Parameter("conn", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Conn),
            inspect.Parameter(
                "query",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=Annotated[QUERIES[listing.name], Query()],
            ),
        ]
    )
    router.add_api_route(
        f"/{listing.name}",
        list_rows,
        methods=["GET"],
        name=f"list_{listing.name}",
        description=listing.doc,
        response_model=LedgerPage[ledger.row_type(listing)],
        responses=_csv_doc(listing),
    )


for _listing in LISTINGS.values():
    _add_list_route(_listing)


@router.get(
    "/submissions/{pool_id}/{work_key}",
    response_model=SubmissionDetail,
    responses={404: {"description": "`submission_not_found`: the chain has no such submission."}},
)
async def get_submission(
    conn: Conn,
    pool_id: Annotated[Bigint, Path(description="Pool id.")],
    work_key: Annotated[WorkKey, Path(description="sha256 of the rollout file, or a bundle's key, 0x-hex.")],
) -> Any:
    """One submission with its verdicts (and reason codes), slash and the credits paid for it; a
    bundle's files are in `submission.files`."""
    detail = await ledger.fetch_submission(conn, pool_id, work_key)
    if detail is None:
        log.info("ledger lookup of unknown submission", extra={"pool_id": pool_id, "work_key": work_key})
        raise ApiError(404, "submission_not_found", f"pool {pool_id} has no submission {work_key}")
    return detail
