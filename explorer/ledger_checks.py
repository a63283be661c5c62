"""The explorer's two calls of the ledger API's checks of one submission (docs/ledger.md, "Checking
one submission"): `/verify` (its rows against the chain) and `/evidence` (each verdict's evidence
against its commitment). Errors are the ledger client's: `ServiceUnavailable` when the backend is
unreachable, `LedgerRefused` carrying the API's status and code (503 `service_unavailable` when the
backend cannot read the chain or the object store)."""

from __future__ import annotations

from proofpool.explorer.ledger import ExplorerLedger, Row


async def verify_submission(ledger: ExplorerLedger, pool_id: int, work_key: str) -> Row:
    """`GET /v1/ledger/submissions/{pool}/{key}/verify`: the checks, `ok`, the block range read."""
    return await ledger.get(f"submissions/{pool_id}/{work_key}/verify", {})


async def submission_evidence(ledger: ExplorerLedger, pool_id: int, work_key: str) -> Row:
    """`GET /v1/ledger/submissions/{pool}/{key}/evidence`: each verdict with its document and commitment."""
    return await ledger.get(f"submissions/{pool_id}/{work_key}/evidence", {})
