"""The market explorer: read-only web pages over the public ledger API, for auditors, providers and
pool creators (docs/explorer.md).

It is a service of its own that knows the backend only through HTTP (`/v1/ledger/...`): a page
shows only numbers the API returned, sorted and formatted, never summed. `create_explorer` builds
the app; `ExplorerLedger` is its client, over a base URL or an httpx transport (so the backend's
process can mount the explorer and serve its ledger to it in-process).
"""
