"""`/submissions/{pool_id}/{work_key}`: one submission as `/v1/ledger/submissions/{pool}/{key}`
tells it: the work, a bundle's files, every verdict with its reason code, the slash it caused and
the credits paid for it, each with its transaction."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from proofpool.explorer import columns
from proofpool.explorer.deps import Ledger
from proofpool.explorer.errors import NotFound
from proofpool.explorer.pages.sources import record_source
from proofpool.explorer.params import parse_pool_id, parse_work_key
from proofpool.explorer.render import render_page
from proofpool.explorer.tables import Table

router = APIRouter()


@router.get("/submissions/{pool_id}/{work_key}", name="submission")
async def submission_page(request: Request, pool_id: str, work_key: str, ledger: Ledger) -> Response:
    pid, key = parse_pool_id(pool_id), parse_work_key(work_key)
    detail = await ledger.submission(pid, key)
    if detail is None:
        raise NotFound(f"pool {pid} has no submission {key}")
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
        return Table(
            "verdicts",
            "Verdicts, oldest first",
            columns.SUBMISSION_VERDICTS,
            detail["verdicts"],
            empty="Not judged yet.",
            notes=("The ledger records each verdict's reason code; the checks' evidence is not in the ledger API.",),
        )

    async def slashes(_: str | None) -> Table:
        return Table("slashes", "Slash", columns.SUBMISSION_SLASHES, detail["slashes"], empty="Nobody was slashed.")

    async def credits(_: str | None) -> Table:
        return Table("credits", "Credits paid for it", columns.SUBMISSION_CREDITS, detail["rewards"],
                     empty="Nothing paid for it yet.")  # fmt: skip

    context = {"title": f"Submission {key}", "slug": f"submission-{pid}-{key}", "submission": work}
    sources = {
        "submission": record_source("submission", "Submission", columns.SUBMISSION, work),
        "files": files,
        "verdicts": verdicts,
        "slashes": slashes,
        "credits": credits,
    }
    return await render_page(request, "submission.html", context, sources)
