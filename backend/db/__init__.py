"""SQL of the backend, one module per aggregate (`chain`, `projections`, `outbox`, ...).

Functions take the connection first and never open or commit transactions: callers own them,
so the indexer can move its cursor, raw events, projections and outbox in one transaction.
SQL lives in module constants with `%(name)s` parameters; Python <-> SQL type conversion
(bytes, uint256 as NUMERIC, timestamps) happens only in these modules.
"""
