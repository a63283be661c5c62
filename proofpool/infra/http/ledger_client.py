"""The public ledger API (`/v1/ledger/`, see docs/ledger.md) as seen by its clients: the auditors'
`proofpool ledger` commands and the provider's `proofpool provider status`. Unsigned reads.

A `resource` is a listing's name (`proofpool.core.ledger_listings.LISTINGS`), its filters are the
listing's filters; the client passes them on as they are and the API checks them.

An unreachable backend is a `ServiceUnavailable` naming the URL; a 4xx/5xx answer is a
`LedgerRefused` carrying the API's error code, so callers branch on data, not on messages.

```python
with LedgerClient(settings.backend_url) as ledger:
    nodes = ledger.items("nodes", {"provider": address})        # every page, in ledger order
    first = ledger.get("submissions", {"status": "pending", "limit": 10}).json()
```
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

from proofpool.core.errors import ProofpoolError, ServiceUnavailable
from proofpool.core.ledger_listings import MAX_PAGE_ROWS


class LedgerRefused(ProofpoolError):
    """The backend refused the query (bad filter, bad cursor, unknown submission)."""

    def __init__(self, status: int, error: str, detail: Any) -> None:
        self.status, self.error, self.detail = status, error, detail
        super().__init__(f"ledger refused the query ({status} {error}): {_readable(detail)}")


def _readable(detail: Any) -> str:
    if isinstance(detail, list):  # validation errors: [{"loc": [...], "msg": ...}]
        return "; ".join(f"{(e.get('loc') or ['?'])[-1]}: {e.get('msg')}" for e in detail if isinstance(e, dict))
    return str(detail)


class LedgerClient:
    """Pages of the ledger API at `base_url`, as JSON or CSV."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get(self, path: str, params: dict[str, Any]) -> httpx.Response:
        """GET /v1/ledger/<path>; unreachable backend and refusals become ProofpoolErrors."""
        query = {key: value for key, value in params.items() if value is not None}
        try:
            reply = self._http.get(f"/v1/ledger/{path}", params=query)
        except httpx.TransportError as exc:
            raise ServiceUnavailable(
                f"backend not reachable at {self.base_url} ({exc.__class__.__name__}); is it running?"
            ) from exc
        if reply.status_code >= 400:
            try:
                body = reply.json()
                error, detail = body.get("error", "error"), body.get("detail")
            except ValueError:
                error, detail = "error", reply.text[:200]
            raise LedgerRefused(reply.status_code, error, detail)
        return reply

    def pages(self, resource: str, params: dict[str, Any], follow: bool) -> Iterator[dict[str, Any]]:
        """JSON pages from `params["cursor"]` on; only the first unless `follow`."""
        while True:
            reply = self.get(resource, params)
            try:
                page = reply.json()
            except ValueError:
                raise ServiceUnavailable(
                    f"{self.base_url} answered /v1/ledger/{resource} with something that is not JSON; "
                    "is it a proofpool backend?"
                ) from None
            yield page
            if not follow or page["next_cursor"] is None:
                return
            params = {**params, "cursor": page["next_cursor"]}

    def items(self, resource: str, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """Every row of `resource` matching `filters`, following cursors in the largest pages."""
        rows: list[dict[str, Any]] = []
        for page in self.pages(resource, {**filters, "limit": MAX_PAGE_ROWS}, follow=True):
            rows += page["items"]
        return rows

    def csv_pages(self, resource: str, params: dict[str, Any], follow: bool) -> Iterator[tuple[str, str | None]]:
        """(CSV text, next cursor) pages; only the first unless `follow`."""
        params = {**params, "format": "csv"}
        while True:
            reply = self.get(resource, params)
            cursor = reply.headers.get("x-next-cursor")
            yield reply.text, cursor
            if not follow or cursor is None:
                return
            params = {**params, "cursor": cursor}

    def close(self) -> None:
        self._http.close()
