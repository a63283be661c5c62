"""The chain indexer: follows the proofpool contracts into PostgreSQL and dispatches validations.

`follow` (the loop), `source` (reading ranges from the chain), `projections` (event -> rows),
`reorg` (detection and rollback), `rebuild` (projections from raw events), `outbox` (Celery
dispatch). Run it with `proofpool indexer run`; see docs/indexer.md.
"""
