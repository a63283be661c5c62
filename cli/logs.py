"""Structured progress logs on stderr for long-running commands (indexer, worker).

The CLI's default level is WARNING; a service command turns on INFO for its own loggers and
prints each record's `extra=` fields (pool, node, work_key, ...) as greppable `key=value` pairs.
"""

from __future__ import annotations

import logging
import sys

# LogRecord attributes that are not `extra=` fields.
_RECORD_FIELDS = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class KeyValueFormatter(logging.Formatter):
    """`time level logger message key=value ...`: the `extra=` fields of a record, greppable."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _RECORD_FIELDS)
        return f"{line} {fields}" if fields else line


def enable_progress_logs(*names: str) -> None:
    """INFO-level `key=value` lines on stderr for the loggers `names` (and their children)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    for name in names:
        logger = logging.getLogger(name)
        logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))
        logger.addHandler(handler)
        logger.propagate = False
