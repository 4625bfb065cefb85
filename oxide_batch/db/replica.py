"""Console reads on a streaming replica (docs/scale-out.md, "Console reads on
a read replica").

A database router sees a model, never the page that reads it, so the choice is
made per request and handed to the router in a context variable: the console's
middleware (:mod:`oxide_batch.db.middleware`) opens a :class:`PageReads` for
every request when ``OXIDE_BATCH_REPLICA_DATABASE`` names a replica, and sets
its ``replica`` only on a console read page (a list, a detail page, the
dashboard) that is not pinned to the primary and whose replica answered the
lag query. The router (:mod:`oxide_batch.db.router`) sends the app's reads to
``replica`` while it is set, nothing else: every other request, command, the
runtime's API and the watchdog run with no mark and read the primary.

The lag (:func:`measure_lag`) is one query on the replica per page: 0 when it
has replayed everything it received — an idle primary is not lag — else the age
of the newest transaction it replayed.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections

# Seconds a replica that failed is left alone: a page then reads the primary at
# once instead of waiting for a connection timeout on every request.
RETRY_AFTER = 30.0

# Why a read page read the primary although a replica is configured.
UNREACHABLE = "unreachable"  # the lag query failed (connection refused, timeout)
FAILED = "failed"  # a read of the page failed on the replica; the page was read again

LAG_SQL = (
    # A server out of recovery (promoted, or the primary itself) is not behind.
    "SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0"
    # Everything received is replayed: caught up, however long the primary idled.
    " WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0"
    # Else the age of the newest replayed commit (an upper bound of the lag).
    " ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()), 0) END"
)


@dataclass
class PageReads:
    """How one request reads the app's tables.

    ``replica``: the alias the router sends the app's reads to now (``None``:
    the primary); ``lag``: the replica's lag in seconds when the page began;
    ``fallback``: why a read page reads the primary instead (:data:`UNREACHABLE`,
    :data:`FAILED`), empty otherwise; ``again``: the page's view, to be called
    again on the primary when a replica read fails."""

    replica: str | None = None
    lag: float | None = None
    fallback: str = ""
    again: Callable[[], Any] | None = None

    def read_primary(self, why: str) -> None:
        self.replica, self.lag, self.fallback = None, None, why


_page: ContextVar[PageReads | None] = ContextVar("oxide_batch_page_reads", default=None)


def current() -> PageReads | None:
    """The request's :class:`PageReads`, ``None`` outside the middleware."""
    return _page.get()


def replica_for_read() -> str | None:
    """The alias the app's reads go to now, ``None``: the primary (the router's question)."""
    reads = _page.get()
    return reads.replica if reads is not None else None


@contextlib.contextmanager
def page_reads(reads: PageReads) -> Iterator[PageReads]:
    """``reads`` is the current request's while the block runs."""
    token = _page.set(reads)
    try:
        yield reads
    finally:
        _page.reset(token)


def measure_lag(alias: str) -> float:
    """How far the replica ``alias`` is behind, in seconds (one query).

    0 when it has replayed all the WAL it received (an idle primary writes no
    transactions, so the newest replayed commit ages without any lag), else
    ``now() - pg_last_xact_replay_timestamp()`` on the replica: the age of the
    newest commit replayed, an upper bound of the lag. 0 on a database that is
    not PostgreSQL (no standby to ask). Raises ``DatabaseError`` when the
    replica cannot be reached or cannot answer."""
    connection = connections[alias]
    if connection.vendor != "postgresql":
        return 0.0
    with connection.cursor() as cursor:
        cursor.execute(LAG_SQL)
        row = cursor.fetchone()
    # The replica's clock against the primary's commit times: a skew below 0 is 0.
    return max(float(row[0] if row else 0), 0.0)


# alias → time.monotonic() until which it is left alone (this process).
_down_until: dict[str, float] = {}


def is_down(alias: str) -> bool:
    """Whether ``alias`` failed less than :data:`RETRY_AFTER` seconds ago."""
    return time.monotonic() < _down_until.get(alias, 0.0)


def mark_down(alias: str) -> None:
    """Leave ``alias`` alone for :data:`RETRY_AFTER` seconds and drop its connection."""
    _down_until[alias] = time.monotonic() + RETRY_AFTER
    with contextlib.suppress(DatabaseError):
        connections[alias].close()


def forget_failures() -> None:
    """Try every replica again on the next page (the tests reset with it)."""
    _down_until.clear()
