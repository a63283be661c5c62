"""The indexer's PostgreSQL sessions: every call bounded in time, and a lost client noticed by the
server, so the indexer lock (a session advisory lock) dies with the session that took it.

Without these limits a connection lost in a way neither side notices (a crashed host, a network
partition, a proxy that drops one half of the link) leaves the server session open: it keeps the
lock, the next indexer waits for it indefinitely ("waiting for the indexer lock"), and a query sent
on the dead link blocks its caller with no end.

- client side: `connect_timeout`, TCP keepalives (a silent dead server is detected during a
  blocked read) and `tcp_user_timeout` (unacknowledged writes fail instead of hanging);
- server side, for this session only: `statement_timeout` and
  `idle_in_transaction_session_timeout`, keepalives towards the client, and on PostgreSQL 14+
  `idle_session_timeout` (a session silent longer than any pause of the indexer is ended, and
  its lock released) and `client_connection_check_interval` (a query of a vanished client is
  cancelled).
"""

from __future__ import annotations

import psycopg

CONNECT_TIMEOUT = 5
KEEPALIVE_IDLE = 10
"""Seconds of silence before the first keepalive probe (both ends)."""
KEEPALIVE_INTERVAL = 5
KEEPALIVE_COUNT = 3
"""Unanswered probes before the peer is declared gone: about 25 s in all."""
CLIENT_CHECK_INTERVAL = 5
"""PostgreSQL 14+: how often the server checks, during a query, that the client is still there."""


def connect(url: str, *, application_name: str, session_timeout: float) -> psycopg.Connection:
    """An autocommit connection with the limits above; `session_timeout` (seconds) bounds every
    statement, every idle transaction and, on PostgreSQL 14+, every idle session. It must exceed
    the longest pause of the caller between two statements (its backoff), or the server ends a
    healthy idle session (harmless: the caller reconnects, but noisy)."""
    timeout_ms = max(1, round(session_timeout * 1000))
    conn = psycopg.connect(
        url,
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT,
        application_name=application_name,
        keepalives=1,
        keepalives_idle=KEEPALIVE_IDLE,
        keepalives_interval=KEEPALIVE_INTERVAL,
        keepalives_count=KEEPALIVE_COUNT,
        tcp_user_timeout=timeout_ms,
    )
    try:
        limits = {
            "statement_timeout": timeout_ms,
            "idle_in_transaction_session_timeout": timeout_ms,
            "tcp_keepalives_idle": KEEPALIVE_IDLE,
            "tcp_keepalives_interval": KEEPALIVE_INTERVAL,
            "tcp_keepalives_count": KEEPALIVE_COUNT,
        }
        if conn.info.server_version >= 140000:  # both settings are new in PostgreSQL 14
            limits["idle_session_timeout"] = timeout_ms
            limits["client_connection_check_interval"] = CLIENT_CHECK_INTERVAL * 1000
        for name, value in limits.items():
            conn.execute("SELECT set_config(%s, %s, false)", (name, str(value)))
    except BaseException:
        conn.close()
        raise
    return conn
