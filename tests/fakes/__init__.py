"""An in-memory fake of the repository port, for the services' tests (decision 169).

``FakeJobRepository`` satisfies ``UnitOfWorkFactory[OperatorWork]`` and
``UnitOfWorkFactory[RetentionWork]``: its unit of work implements the port's
``Transaction``, ``Executions``, ``Control``, ``OperatorAudit``,
``AdminHistory``, ``Steps``, ``Holds`` and ``Purge`` Protocols. Every rule comes from the
domain (the lifecycle table, the fence, the recovery and stop rules, the purge
plan's staleness), so a rule changed there changes here too; what the fake
owns is storage. The behavioural contract tests (``@pytest.mark.contract`` in
tests/repository/) run against it and the Django adapter alike.

The unit of work works on a copy of the tables and publishes it on
``commit()``; leaving the ``with`` block without it drops the copy. One
transaction at a time: a commit after another unit of work committed since
this one began is refused (``ConcurrentModification``) — there are no row
locks to wait on. Ids come from per-table sequences a rollback does not take
back, as PostgreSQL's.

Not covered (a ``NotImplementedError`` says so): job definitions (a digest;
every attempt runs the built-in definition, id 1), flow steps and decisions,
partitions — ``Definitions``, ``Flow`` and ``Partitions`` are the adapter's
alone. So the evidence's partition and flow markers are always false and the
purge counts none of either. The lost-write marker is set as the adapter sets
it, on the execution the refused unit of work last touched.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from oxide_batch.conf import batch_settings
from oxide_batch.domain.state import StateLimits
from oxide_batch.repository.clock import Clock
from tests.fakes.audit import AuditOperations
from tests.fakes.control import ControlOperations
from tests.fakes.executions import ExecutionOperations
from tests.fakes.purge import PurgeOperations
from tests.fakes.steps import StepOperations
from tests.fakes.tables import StoredExecution, Tables

if TYPE_CHECKING:
    from oxide_batch.repository.port import Steps, UnitOfWorkFactory
    from oxide_batch.services.operator import OperatorWork
    from oxide_batch.services.retention import RetentionWork


class FakeUnitOfWork(
    ExecutionOperations,
    ControlOperations,
    StepOperations,
    AuditOperations,
    PurgeOperations,
):
    """One transaction over a copy of the tables (see the module's docstring)."""


class FakeJobRepository:
    """The in-memory repository: ``begin()`` a unit of work, as the adapter's."""

    def __init__(self, clock: Clock, *, state_limits: StateLimits | None = None) -> None:
        self.clock = clock
        self.state_limits = state_limits or StateLimits(
            batch_settings.STATE_MAX_BYTES, batch_settings.STATE_MAX_DEPTH
        )
        self.tables = Tables()
        self.commits = 0
        self._sequences: dict[str, Iterator[int]] = {}

    def begin(
        self, *, runtime_user_id: int | None = None, owner_token: bytes | None = None
    ) -> FakeUnitOfWork:
        return FakeUnitOfWork(self, runtime_user_id=runtime_user_id, owner_token=owner_token)

    def next_id(self, table: str) -> int:
        return next(self._sequences.setdefault(table, itertools.count(1)))

    def stored_execution(self, job_execution_id: int) -> StoredExecution:
        """The committed row of an execution, as the adapter's tests read a model row."""
        row = self.tables.executions[job_execution_id]
        return StoredExecution(
            status=row.execution.status.value,
            version=row.execution.version,
            updated_at=row.execution.updated_at,
            stop_requested_at=row.stop_requested_at,
            stop_requested_by=row.stop_requested_by,
            owner_token=row.owner_token,
            last_activity_at=row.last_activity_at,
            last_observed_at=row.last_observed_at,
        )

    def mark_lost_write(self, job_execution_id: int) -> None:
        """The adapter's marker of a ``version_ahead`` refusal, in a transaction
        of its own (the first detection is kept)."""
        row = self.tables.executions.get(job_execution_id)
        if row is not None and not row.lost_write:
            self.tables.executions[job_execution_id] = dataclasses.replace(row, lost_write=True)


if TYPE_CHECKING:
    # mypy proves the fake satisfies the Protocols the services are typed against.
    def _operator_work(uow: FakeUnitOfWork) -> OperatorWork:
        return uow

    def _retention_work(uow: FakeUnitOfWork) -> RetentionWork:
        return uow

    def _operator_factory(repo: FakeJobRepository) -> UnitOfWorkFactory[OperatorWork]:
        return repo

    def _retention_factory(repo: FakeJobRepository) -> UnitOfWorkFactory[RetentionWork]:
        return repo

    def _steps(uow: FakeUnitOfWork) -> Steps:
        return uow
