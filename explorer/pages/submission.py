"""`/submissions/{pool_id}/{work_key}`: one submission as `/v1/ledger/submissions/{pool}/{key}`
tells it: the work, a bundle's files, every verdict with its reason code and its evidence (the
document and whether it is what the verdict's transaction committed to: `/evidence`), the slash it
caused and the credits paid for it, each with its transaction.

`POST /submissions/{pool_id}/{work_key}/verify` (the page's "Verify against the chain" button, a
plain form) answers the same page with the result of `/verify`: each check of the ledger's rows
against the chain, and the block range read. The evidence and the verification need the backend
to read the chain (and the store); when it cannot, the page says so where their results would be,
and shows the rest.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from proofpool.explorer import columns
from proofpool.explorer.deps import Ledger
from proofpool.explorer.error_pages import refusal_status
from proofpool.explorer.errors import NotFound
from proofpool.explorer.evidence_view import evidence_view
from proofpool.explorer.ledger import ExplorerLedger, Row
from proofpool.explorer.ledger_checks import submission_evidence, verify_submission
from proofpool.explorer.pages.sources import record_source
from proofpool.explorer.params import parse_pool_id, parse_work_key
from proofpool.explorer.render import TableSource, render_page
from proofpool.explorer.tables import Table

from proofpool.core.errors import ServiceUnavailable
from proofpool.infra.http.ledger_client import LedgerRefused

router = APIRouter()


def _failure(exc: ServiceUnavailable | LedgerRefused) -> dict[str, Any]:
    """A failed check as the page shows it: its error code, message and the status it gives the page."""
    if isinstance(exc, LedgerRefused):
        return {"error": exc.error, "message": str(exc.detail or exc), "status": refusal_status(exc)}
    return {"error": "service_unavailable", "message": str(exc), "status": 503}


async def _evidence(ledger: ExplorerLedger, pool_id: int, work_key: str) -> dict[str, Any]:
    """The verdicts' evidence for the template, or why it could not be read."""
    try:
        body = await submission_evidence(ledger, pool_id, work_key)
    except (ServiceUnavailable, LedgerRefused) as exc:
        return {"items": [], "failure": _failure(exc)}
    return {"items": [evidence_view(item) for item in body["verdicts"]], "failure": None}


def _sources(detail: Row) -> dict[str, TableSource]:
    work = detail["submission"]

    async def files(_: str | None) -> Table:
        return Table(
            "files",
            "Files of the bundle, in bundle order",
            columns.BUNDLE_FILES,
            work["files"] or [],
            empty="A single-file submission: its file's sha256 is the work key.",
        )

    async def verdicts(_: str | None) -> Table:
        shown = columns.SUBMISSION_VERDICTS
        return Table("verdicts", "Verdicts, oldest first", shown, detail["verdicts"], empty="Not judged yet.")

    async def slashes(_: str | None) -> Table:
        return Table("slashes", "Slash", columns.SUBMISSION_SLASHES, detail["slashes"], empty="Nobody was slashed.")

    async def credits(_: str | None) -> Table:
        return Table("credits", "Credits paid for it", columns.SUBMISSION_CREDITS, detail["rewards"],
                     empty="Nothing paid for it yet.")  # fmt: skip

    return {
        "submission": record_source("submission", "Submission", columns.SUBMISSION, work),
        "files": files,
        "verdicts": verdicts,
        "slashes": slashes,
        "credits": credits,
    }


async def _page(
    request: Request, ledger: ExplorerLedger, pool_id: str, work_key: str, *, verify: bool = False
) -> Response:
    pid, key = parse_pool_id(pool_id), parse_work_key(work_key)
    detail = await ledger.submission(pid, key)
    if detail is None:
        raise NotFound(f"pool {pid} has no submission {key}")
    verification: dict[str, Any] | None = None
    evidence: dict[str, Any] = {"items": [], "failure": None}
    whole_page = request.query_params.get("format", "html") == "html"  # a table's CSV needs neither
    if whole_page and verify:
        evidence, verification = await asyncio.gather(_evidence(ledger, pid, key), _verification(ledger, pid, key))
    elif whole_page:
        evidence = await _evidence(ledger, pid, key)
    context = {
        "title": f"Submission {key}",
        "slug": f"submission-{pid}-{key}",
        "submission": detail["submission"],
        "evidence": evidence,
        "verification": verification,
    }
    response = await render_page(request, "submission.html", context, _sources(detail))
    if verification is not None and verification["failure"] is not None:
        response.status_code = verification["failure"]["status"]
    return response


async def _verification(ledger: ExplorerLedger, pool_id: int, work_key: str) -> dict[str, Any]:
    """The answer of `/verify` for the template, or why there is none."""
    try:
        return {"result": await verify_submission(ledger, pool_id, work_key), "failure": None}
    except (ServiceUnavailable, LedgerRefused) as exc:
        return {"result": None, "failure": _failure(exc)}


@router.get("/submissions/{pool_id}/{work_key}", name="submission")
async def submission_page(request: Request, pool_id: str, work_key: str, ledger: Ledger) -> Response:
    return await _page(request, ledger, pool_id, work_key)


@router.api_route("/submissions/{pool_id}/{work_key}/verify", methods=["GET", "POST"], name="verify_submission")
async def verify_page(request: Request, pool_id: str, work_key: str, ledger: Ledger) -> Response:
    """The submission page with the result of checking its ledger rows against the chain. The button
    POSTs; GET answers the same (the page's CSV links are relative to this URL, and it changes nothing)."""
    return await _page(request, ledger, pool_id, work_key, verify=True)
