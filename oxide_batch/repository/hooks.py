"""Observers of repository operations (metrics, structured events).

The unit of work calls :func:`notify` once per operation with its name, outcome
(``ok`` or the error's ``code``), duration, arguments and result. Observers run
synchronously and must be cheap; anything they want to say only once the work
is durable they schedule with ``transaction.on_commit(…, using=using)``. An
observer that raises is logged and ignored: it can never change an outcome.

When the COMMIT of a unit of work fails (``commit_outcome_unknown``, or a
refusal the server reports at COMMIT), its on-commit callbacks never run, so
the unit of work also calls :func:`notify_commit_failed` with the error's code
and the operations it had observed: observers that define ``commit_failed``
hear it (at once — nothing commits to make it true).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperationEvent:
    operation: str
    outcome: str
    seconds: float
    using: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    result: Any = None
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


def notify_commit_failed(failure: CommitFailure) -> None:
    """Tell every observer that has a ``commit_failed(failure)`` method."""
    for observer in tuple(_observers):
        hear = getattr(observer, "commit_failed", None)
        if hear is None:
            continue
        try:
            hear(failure)
        except Exception:  # an observer never changes an outcome
            log.exception("repository observer %r failed", observer)
