"""Database faults mapped to domain errors — in one place.

Rule of thumb (measured with PostgreSQL 15 + psycopg 3): an error on a
statement before COMMIT means "not committed"; an error while COMMIT is in
flight means "unknown", unless the server itself said why it refused.
"""

from __future__ import annotations

from django.db import DatabaseError, IntegrityError, InterfaceError, OperationalError

from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    ConcurrentModification,
    RepositoryError,
    SchemaUninitialized,
    Unavailable,
)

# Lock timeout, serialization failure, deadlock: another writer won.
CONFLICT_SQLSTATES = frozenset({"55P03", "40001", "40P01"})
UNIQUE_VIOLATION = "23505"
UNDEFINED_TABLE = "42P01"
# The server refused the COMMIT itself for a known reason: nothing was committed.
KNOWN_COMMIT_REFUSAL_CLASSES = ("40", "23")


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE the server sent, if any (psycopg keeps it on the cause)."""
    state = getattr(error.__cause__, "sqlstate", None)
    return state if isinstance(state, str) else None


def is_unique_violation(error: DatabaseError) -> bool:
    return isinstance(error, IntegrityError) and (
        sqlstate(error) == UNIQUE_VIOLATION or "UNIQUE constraint failed" in str(error)
    )


def translate(error: DatabaseError) -> RepositoryError | None:
    """The domain error for a fault raised by a statement before COMMIT.

    ``None`` means "a defect, not a fault": a check or foreign-key violation
    that validated input cannot cause. The caller re-raises the original.
    """
    state = sqlstate(error)
    message = str(error)
    if state in CONFLICT_SQLSTATES or "database is locked" in message:
        return ConcurrentModification()
    if is_unique_violation(error):
        # A uniqueness the locks should have made unreachable: a lost race.
        return ConcurrentModification()
    if state == UNDEFINED_TABLE or "no such table" in message:
        return SchemaUninitialized()
    if isinstance(error, (OperationalError, InterfaceError)):
        # Connection lost or refused, server shutting down, statement timeout.
        return Unavailable()
    return None


def translate_commit(error: DatabaseError) -> RepositoryError | None:
    """The domain error for a fault raised while COMMIT was in flight."""
    state = sqlstate(error)
    if state is not None and state.startswith(KNOWN_COMMIT_REFUSAL_CLASSES):
        return ConcurrentModification()
    if isinstance(error, (OperationalError, InterfaceError)):
        return CommitOutcomeUnknown()
    return translate(error)
