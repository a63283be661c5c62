"""What can go wrong on a page that is not a bug: a URL naming something in the wrong form, or
naming something the ledger does not hold. Each becomes an error page (`error_pages`); the
ledger client's own failures (`ServiceUnavailable`, `LedgerRefused`) too."""

from __future__ import annotations

from proofpool.core.errors import ProofpoolError


class BadInput(ProofpoolError):
    """A URL names something in a form the ledger cannot hold (a 422 page)."""


class NotFound(ProofpoolError):
    """The ledger holds no such pool, account or submission (a 404 page)."""
