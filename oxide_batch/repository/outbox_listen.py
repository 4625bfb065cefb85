"""Told when an outbox event commits (issue 41; PostgreSQL only).

Migration 0029 has every INSERT into ``ob_notification_event`` call
``pg_notify(CHANNEL, '')`` from a statement-level trigger: PostgreSQL
delivers the notification when the inserting transaction commits — never
for one that rolls back — and folds repeats within one transaction into one.
No payload: a notification only says "read the outbox".

A listener holds a session connection of its own (a LISTEN lives as long as
its server session, so it needs one that is not handed to other clients
between transactions — not a transaction-mode pooler: docs/deployment.md),
opened with the database's own connection parameters, in autocommit.
psycopg is imported only here, when a listener connects: an SQLite-only
install has none (the ``postgresql`` extra).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from django.db import connections

from oxide_batch.domain.errors import Unavailable

if TYPE_CHECKING:
    import psycopg

CHANNEL = "oxide_batch_outbox"


def available(using: str = "default") -> bool:
    """Whether the database can tell (PostgreSQL); SQLite is only polled."""
    return connections[using].vendor == "postgresql"


class OutboxListener:
    """One LISTEN session. Every method raises ``Unavailable`` when the
    server or the connection fails; the caller opens a new listener."""

    def __init__(self, using: str = "default") -> None:
        self.using = using
        self._connection: psycopg.Connection[Any] | None = None

    def connect(self) -> None:
        import psycopg

        params = connections[self.using].get_connection_params()
        # Django's adapters and cursor class: nothing this session reads needs them.
        params.pop("cursor_factory", None)
        params.pop("context", None)
        try:
            self._connection = psycopg.connect(**params, autocommit=True)
            self._connection.execute(f"LISTEN {CHANNEL}")
        except (psycopg.Error, OSError) as error:
            self.close()
            raise Unavailable() from error

    def wait(self, timeout: float) -> bool:
        """Whether an event committed within ``timeout`` seconds (returns at
        its first notification)."""
        assert self._connection is not None, "connect() first"
        import psycopg

        try:
            told = self._connection.notifies(timeout=timeout, stop_after=1)
            return any(True for _ in told)
        except (psycopg.Error, OSError) as error:
            self.close()
            raise Unavailable() from error

    def close(self) -> None:
        if self._connection is not None:
            import psycopg

            # Closing a broken session: nothing more to do.
            with contextlib.suppress(psycopg.Error, OSError):
                self._connection.close()
            self._connection = None
