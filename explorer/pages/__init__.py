"""The explorer's pages, one module each; `ROUTERS` is what `create_explorer` mounts."""

from __future__ import annotations

from proofpool.explorer.pages import market, node, pool, provider, search, submission, validator

ROUTERS = (market.router, pool.router, provider.router, node.router, validator.router, submission.router, search.router)
