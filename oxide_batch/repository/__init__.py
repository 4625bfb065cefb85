"""The repository port and its Django adapter."""

from oxide_batch.repository.adapter import DjangoJobRepository, DjangoUnitOfWork
from oxide_batch.repository.clock import Clock, FixedClock, SystemClock
from oxide_batch.repository.port import JobRepository, UnitOfWork, UnitOfWorkFactory

__all__ = [
    "Clock",
    "DjangoJobRepository",
    "DjangoUnitOfWork",
    "FixedClock",
    "JobRepository",
    "SystemClock",
    "UnitOfWork",
    "UnitOfWorkFactory",
]
