"""What a page handler is given: the app's ledger client, as an `Annotated` dependency."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from proofpool.explorer.ledger import ExplorerLedger


def ledger_of(request: Request) -> ExplorerLedger:
    """The client `create_explorer` was given (the app serving the request, even when mounted)."""
    return request.app.state.ledger


Ledger = Annotated[ExplorerLedger, Depends(ledger_of)]
