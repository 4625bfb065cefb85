"""Observers of repository operations (metrics, structured events).

The unit of work calls :func:`notify` once per operation with its name, outcome
(``ok`` or the error's ``code``), duration, arguments and result. Observers run
synchronously and must be cheap; anything they want to say only once the work
is durable they schedule with ``transaction.on_commit(…, using=using)``. An
observer that raises is logged and ignored: it can never change an outcome.
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
