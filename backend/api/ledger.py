"""The public contribution ledger: read-only, unsigned, for auditors, trainers and dashboards.

Every list is a keyset page (`limit`, `cursor` -> `items`, `next_cursor`) in JSON or, with
`?format=csv`, CSV with the next cursor in the `X-Next-Cursor` header. Every row names the
block and transaction that produced it, so any figure can be checked against the chain.
"""

from __future__ import annotations

import csv
import io
import json
import logging
from functools import cache
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from proofpool.backend.api.deps import Conn
from proofpool.backend.api.errors import ApiError
from proofpool.backend.api.ledger_models import (
    CheckpointQuery,
    LedgerPage,
    MembershipQuery,
    NodeQuery,
    PageQuery,
    PoolId,
    PoolQuery,
    RewardQuery,
    SlashQuery,
    SubmissionQuery,
    ValidatorQuery,
    VerdictQuery,
    WorkKey,
)
from proofpool.backend.db import ledger
from proofpool.backend.db.ledger import (
    CheckpointRow,
    InvalidCursor,
    Listing,
    MembershipRow,
    NodeRow,
    PoolRow,
    ProviderRow,
    RewardRow,
    SlashRow,
    SubmissionDetail,
    SubmissionRow,
    ValidatorRow,
    VerdictRow,
)
from pydantic import TypeAdapter

log = logging.getLogger(__name__)

router = APIRouter(prefix="/ledger", tags=["ledger"])

NEXT_CURSOR_HEADER = "X-Next-Cursor"


def _csv_doc(row_type: type) -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "content": {"text/csv": {"schema": {"type": "string"}}},
            "description": f"JSON page, or with format=csv a header row ({', '.join(ledger.row_fields(row_type))}) "
            f"and one line per row; the next cursor is in the {NEXT_CURSOR_HEADER} header.",
        },
        422: {"description": "`invalid_cursor`: `cursor` is not one this listing handed out."},
    }


async def _page(conn: Conn, listing: Listing[Any], query: PageQuery) -> Any:
    """Fetch one page and render it as the query asks; a foreign cursor is a 422, not a 500."""
    try:
        page = await ledger.fetch_page(conn, listing, filters=query.filters(), cursor=query.cursor, limit=query.limit)
    except InvalidCursor as exc:
        log.info("ledger refused a cursor", extra={"listing": listing.name, "reason": str(exc)})
        raise ApiError(422, "invalid_cursor", str(exc)) from exc
    log.debug(
        "ledger page",
        extra={"listing": listing.name, "rows": len(page.items), "more": page.next_cursor is not None,
               **{k: v for k, v in query.filters().items() if v is not None}},
    )  # fmt: skip
    if query.format == "csv":
        return _csv_response(listing.row, page)
    return _json_response(listing.row, page)


@cache
def _adapter(row_type: type) -> TypeAdapter[list[Any]]:
    """Serializer of a list of rows (built once per type: building one costs milliseconds)."""
    return TypeAdapter(list[row_type])  # type: ignore[valid-type]


def _json_response(row_type: type, page: ledger.Page[Any]) -> Response:
    """The page as the `LedgerPage` JSON, serialized straight from the rows: they are typed and
    converted in `proofpool.backend.db.ledger`, so validating them again would only cost time."""
    items = _adapter(row_type).dump_json(page.items)
    body = b'{"items":' + items + b',"next_cursor":' + json.dumps(page.next_cursor).encode() + b"}"
    return Response(body, media_type="application/json")


def _csv_response(row_type: type, page: ledger.Page[Any]) -> Response:
    """The page as CSV; each cell is the JSON value as text (null -> empty, booleans true/false)."""
    names = ledger.row_fields(row_type)
    rows = _adapter(row_type).dump_python(page.items, mode="json")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for values in rows:
        writer.writerow([csv_cell(values[name]) for name in names])
    headers = {NEXT_CURSOR_HEADER: page.next_cursor} if page.next_cursor else {}
    return Response(out.getvalue(), media_type="text/csv", headers=headers)


def csv_cell(value: Any) -> str:
    """One JSON value as a CSV cell."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@router.get("/providers", response_model=LedgerPage[ProviderRow], responses=_csv_doc(ProviderRow))
async def list_providers(conn: Conn, query: Annotated[PageQuery, Query()]) -> Any:
    """Registered providers with their stake, unbonding and slashed totals, by address."""
    return await _page(conn, ledger.PROVIDERS, query)


@router.get("/nodes", response_model=LedgerPage[NodeRow], responses=_csv_doc(NodeRow))
async def list_nodes(conn: Conn, query: Annotated[NodeQuery, Query()]) -> Any:
    """Registered nodes with their provider, compute units and attestation, by address."""
    return await _page(conn, ledger.NODES, query)


@router.get("/pools", response_model=LedgerPage[PoolRow], responses=_csv_doc(PoolRow))
async def list_pools(conn: Conn, query: Annotated[PoolQuery, Query()]) -> Any:
    """Pools with their terms (rewards, fees, slash amount, dispute window) and budget, by id."""
    return await _page(conn, ledger.POOLS, query)


@router.get("/memberships", response_model=LedgerPage[MembershipRow], responses=_csv_doc(MembershipRow))
async def list_memberships(conn: Conn, query: Annotated[MembershipQuery, Query()]) -> Any:
    """Which nodes are (or were) in which pools, and in what state, by pool id and node."""
    return await _page(conn, ledger.MEMBERSHIPS, query)


@router.get("/submissions", response_model=LedgerPage[SubmissionRow], responses=_csv_doc(SubmissionRow))
async def list_submissions(conn: Conn, query: Annotated[SubmissionQuery, Query()]) -> Any:
    """Submitted work in chain order of its last change; filter by pool, provider, node, status, time."""
    return await _page(conn, ledger.SUBMISSIONS, query)


@router.get(
    "/submissions/{pool_id}/{work_key}",
    response_model=SubmissionDetail,
    responses={404: {"description": "`submission_not_found`: the chain has no such submission."}},
)
async def get_submission(
    conn: Conn,
    pool_id: Annotated[PoolId, Path(description="Pool id.")],
    work_key: Annotated[WorkKey, Path(description="sha256 of the rollout file, 0x-hex.")],
) -> Any:
    """One submission with its verdicts (and reason codes), slash and the credits paid for it."""
    detail = await ledger.fetch_submission(conn, pool_id, work_key)
    if detail is None:
        log.info("ledger lookup of unknown submission", extra={"pool_id": pool_id, "work_key": work_key})
        raise ApiError(404, "submission_not_found", f"pool {pool_id} has no submission {work_key}")
    return detail


@router.get("/verdicts", response_model=LedgerPage[VerdictRow], responses=_csv_doc(VerdictRow))
async def list_verdicts(conn: Conn, query: Annotated[VerdictQuery, Query()]) -> Any:
    """Validator verdicts in chain order; invalid ones carry the validator's reason code."""
    return await _page(conn, ledger.VERDICTS, query)


@router.get("/slashes", response_model=LedgerPage[SlashRow], responses=_csv_doc(SlashRow))
async def list_slashes(conn: Conn, query: Annotated[SlashQuery, Query()]) -> Any:
    """Stake slashed for invalid work and how it was split between validator and treasury."""
    return await _page(conn, ledger.SLASHES, query)


@router.get("/rewards", response_model=LedgerPage[RewardRow], responses=_csv_doc(RewardRow))
async def list_rewards(conn: Conn, query: Annotated[RewardQuery, Query()]) -> Any:
    """Credits (provider rewards, validator fees, slash shares) and withdrawals in chain order."""
    return await _page(conn, ledger.REWARDS, query)


@router.get("/validators", response_model=LedgerPage[ValidatorRow], responses=_csv_doc(ValidatorRow))
async def list_validators(conn: Conn, query: Annotated[ValidatorQuery, Query()]) -> Any:
    """Accounts granted (or revoked) the validator role, by address."""
    return await _page(conn, ledger.VALIDATORS, query)


@router.get("/checkpoints", response_model=LedgerPage[CheckpointRow], responses=_csv_doc(CheckpointRow))
async def list_checkpoints(conn: Conn, query: Annotated[CheckpointQuery, Query()]) -> Any:
    """Published checkpoints (version, manifest sha256, URI) in chain order."""
    return await _page(conn, ledger.CHECKPOINTS, query)
