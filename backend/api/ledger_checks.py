"""Checks of one ledger submission against the chain, for auditors and the explorer's submission page:
its rows against the chain's logs (`/verify`, `proofpool ledger verify` for one submission, in a
request's time) and each verdict's evidence document against the commitment its transaction carries
(`/evidence`). Public and read-only like the rest of the ledger; the work is in `proofpool.backend.audit`."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from proofpool.backend.api.deps import Conn, StoreDep
from proofpool.backend.api.errors import ApiError
from proofpool.backend.api.ledger_models import Bigint, WorkKey
from proofpool.backend.audit.chain_view import ChainViews
from proofpool.backend.audit.verdict_evidence import SubmissionEvidence, verdict_evidence
from proofpool.backend.audit.verify_submission import SubmissionVerification, verify_submission

from proofpool.infra.config import Settings

log = logging.getLogger(__name__)

router = APIRouter(prefix="/ledger", tags=["ledger"])


def get_chain_views(request: Request) -> ChainViews:
    """The app's readers of the chain the ledger indexes, built on first use and kept on `app.state`
    (a sync dependency: building one may read an address book from disk)."""
    views: ChainViews | None = getattr(request.app.state, "chain_views", None)
    if views is None:
        settings: Settings = request.app.state.settings
        views = ChainViews(settings.rpc_url, settings.deployments_dir, settings.rpc_timeout)
        request.app.state.chain_views = views
    return views


ChainViewsDep = Annotated[ChainViews, Depends(get_chain_views)]
PoolIdPath = Annotated[Bigint, Path(description="Pool id.")]
WorkKeyPath = Annotated[WorkKey, Path(description="sha256 of the rollout file, or a bundle's key, 0x-hex.")]

NOT_FOUND = {404: {"description": "`submission_not_found`: the ledger has no such submission."}}
CHAIN_DOWN = (
    "`service_unavailable`: the JSON-RPC node cannot be read, serves another chain, or has no address book here."
)


def _not_found(pool_id: int, work_key: str) -> ApiError:
    log.info("ledger check of unknown submission", extra={"pool_id": pool_id, "work_key": work_key})
    return ApiError(404, "submission_not_found", f"pool {pool_id} has no submission {work_key}")


@router.get(
    "/submissions/{pool_id}/{work_key}/verify",
    name="verify_submission",
    response_model=SubmissionVerification,
    responses={**NOT_FOUND, 503: {"description": CHAIN_DOWN}},
)
async def verify_route(conn: Conn, views: ChainViewsDep, pool_id: PoolIdPath, work_key: WorkKeyPath) -> Any:
    """`ledger verify` for one submission: its ledger rows (the submission, its status, verdicts,
    slashes and credits) against the chain's logs up to the block the ledger has indexed, and its
    status against the contract's `getWork`. `ok` is false, and the failed checks say why, when the
    ledger differs from the chain."""
    result = await verify_submission(conn, views, pool_id, work_key)
    if result is None:
        raise _not_found(pool_id, work_key)
    return result


@router.get(
    "/submissions/{pool_id}/{work_key}/evidence",
    name="submission_evidence",
    response_model=SubmissionEvidence,
    responses={**NOT_FOUND, 503: {"description": f"{CHAIN_DOWN} Or the object store cannot be read."}},
)
async def evidence_route(
    conn: Conn, views: ChainViewsDep, store: StoreDep, pool_id: PoolIdPath, work_key: WorkKeyPath
) -> Any:
    """Each verdict on the submission (the ledger's, plus rejections still in their challenge window or
    overturned, and contests) with its evidence document from the object store and the commitment its
    transaction's calldata carries: `status` says whether the document matches it, is missing or
    unreadable, or the transaction commits to none."""
    result = await verdict_evidence(conn, views, store, pool_id, work_key)
    if result is None:
        raise _not_found(pool_id, work_key)
    return result
