"""Django's PostgreSQL backend with a health check that costs no round trip.

With ``CONN_HEALTH_CHECKS`` Django checks a persistent connection before the
first query of each request by running ``SELECT 1`` (``is_usable``): a whole
round trip on every request, about a fifth of a hot runtime request's
statements. Here ``is_usable`` first looks at the socket without waiting: an
idle connection whose server is alive has nothing to read, so it is usable as
it is. A server that shut down or restarted sent a FATAL message and closed
the socket (``pg_ctl stop``, a killed backend): the socket is readable, and
then Django's own ``SELECT 1`` decides (it fails, and Django reconnects before
the request's first query, as before). A connection in any state but idle,
or one whose socket cannot be polled, gets Django's check unchanged.

What this cannot see — a peer that vanished without a word (a host lost, a
cable cut) — ``SELECT 1`` could not see either without waiting out a timeout:
the request's first statement fails instead, the request answers 503
``unavailable`` (nothing reached the database), and the connection is
replaced for the next one (decision 100, docs/performance.md).
"""

from __future__ import annotations

import select

from django.db.backends.postgresql import base
from psycopg import pq


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed:
            return False
        try:
            idle = connection.info.transaction_status == pq.TransactionStatus.IDLE
            readable, _, _ = (
                select.select([connection.fileno()], [], [], 0) if idle else ([1], [], [])
            )
        except (OSError, ValueError):
            readable = [1]
        if not readable:
            return True
        return bool(super().is_usable())
