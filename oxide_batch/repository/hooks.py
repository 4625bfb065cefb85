"""Observers of repository operations (metrics, structured events).

The unit of work calls :func:`notify` once per operation with its name, outcome
(``ok`` or the error's ``code``), duration, the id it worked on, and the typed
facts it made true (``domain/events.py``, recorded from the rows it locked and
wrote; none for a refused operation). Observers run synchronously and must be
cheap; anything they want to say only once the work is durable they schedule
with ``transaction.on_commit(…, using=using)``. An observer that raises is
logged and ignored: it can never change an outcome.

The services report what no write makes true (a proposal, a replayed answer)
with :func:`report`, as facts of the same kinds: observers that define
``reported`` hear them at once.

When the COMMIT of a unit of work fails (``commit_outcome_unknown``, or a
refusal the server reports at COMMIT), its on-commit callbacks never run, so
the unit of work also calls :func:`notify_commit_failed` with the error's code
and the operations it had observed: observers that define ``commit_failed``
hear it (at once — nothing commits to make it true).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final, Protocol

from oxide_batch.domain.events import Event

log = logging.getLogger(__name__)

# The ids an operation's first argument can be: the row a refusal names.
TARGET_IDS: Final = frozenset(
    {"job_instance_id", "job_execution_id", "step_execution_id", "partition_id"}
)


@dataclass(frozen=True)
class OperationEvent:
    """One operation: ``target`` is ``(id name, value)`` when its first argument
    is an id; ``events`` what it made true, in order."""

    operation: str
    outcome: str
    seconds: float
    using: str
    target: tuple[str, int] | None = None
    events: tuple[Event, ...] = ()
    error: BaseException | None = None


@dataclass(frozen=True)
class CommitFailure:
    """A unit of work whose COMMIT failed: ``outcome`` is the error's ``code``
    (``commit_outcome_unknown``, ``concurrent_modification``, ``unavailable``, …;
    ``database_error`` for an unmapped error), ``operations`` the events of its
    operations that succeeded, in order. Whether the work is durable is unknown for
    ``commit_outcome_unknown`` and false otherwise."""

    outcome: str
    using: str
    operations: tuple[OperationEvent, ...]
    error: BaseException


class OperationObserver(Protocol):
    def __call__(self, event: OperationEvent) -> None: ...


_observers: list[OperationObserver] = []


def register(observer: OperationObserver) -> None:
    if observer not in _observers:
        _observers.append(observer)


def unregister(observer: OperationObserver) -> None:
    if observer in _observers:
        _observers.remove(observer)


def notify(event: OperationEvent) -> None:
    for observer in tuple(_observers):
        try:
            observer(event)
        except Exception:  # an observer never changes an outcome
            log.exception("repository observer %r failed", observer)


def report(event: Event) -> None:
    """A service's own report: tell every observer that has ``reported(event)``."""
    _tell("reported", event)


def notify_commit_failed(failure: CommitFailure) -> None:
    """Tell every observer that has a ``commit_failed(failure)`` method."""
    _tell("commit_failed", failure)


def _tell(method: str, what: object) -> None:
    for observer in tuple(_observers):
        hear = getattr(observer, method, None)
        if hear is None:
            continue
        try:
            hear(what)
        except Exception:  # an observer never changes an outcome
            log.exception("repository observer %r failed", observer)
