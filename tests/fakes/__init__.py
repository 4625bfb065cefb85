"""An in-memory fake of the repository port, for the services' tests and the
contract tests (decisions 169, 230).

``FakeJobRepository`` satisfies ``UnitOfWorkFactory[UnitOfWork]`` (and so
the services' narrower ``UnitOfWorkFactory[OperatorWork]`` and
``UnitOfWorkFactory[RetentionWork]``): its unit of work implements every
Protocol of the port (``oxide_batch/repository/port.py``) —
``tests/repository/test_fake_port.py`` compares each method's signature, and mypy
checks the assignments at the end of this module. Every rule comes from the
domain (the lifecycle table, the fence, the recovery and stop rules, the flow
plan and the decision check, the partition plan and aggregate, the purge
plan's staleness), so a rule changed there changes here too — but for a
flow node's start limit (``flow.effective_start_limit``: the manifest's wins,
a request may only lower it), which the domain does not name yet; what the fake owns is
storage and the order of its checks, the adapter's. The behavioural contract
tests (``@pytest.mark.contract`` in tests/repository/) run against it and
the Django adapter alike.

The unit of work works on a copy of the tables and publishes it on
``commit()``; leaving the ``with`` block without it drops the copy. One
transaction at a time: a commit after another unit of work committed since
this one began is refused (``ConcurrentModification``) — there are no row
locks to wait on. Ids come from per-table sequences a rollback does not take
back, as PostgreSQL's.

The built-in legacy definition is stored as the migration stores it (the
first definition id). What the fake cannot hold is corrupt storage (a row
edited behind the repository's back) and SQL's own behaviour (locks,
statement counts): those tests stay ``adapter``-marked. The lost-write
marker is set as the adapter sets it, on the execution the refused unit of
work last touched.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from oxide_batch.conf import batch_settings
from oxide_batch.domain.descriptor import RepositoryDescriptor
from oxide_batch.domain.state import StateLimits
from oxide_batch.repository.adapter import DECLARED_CAPABILITIES
from oxide_batch.repository.clock import Clock
from oxide_batch.repository.schema import SUPPORTED_SCHEMA_VERSION
from tests.fakes.audit import AuditOperations
from tests.fakes.control import ControlOperations
from tests.fakes.definitions import legacy_row
from tests.fakes.executions import ExecutionOperations
from tests.fakes.flow import FlowOperations
from tests.fakes.partitions import PartitionOperations
from tests.fakes.purge import PurgeOperations
from tests.fakes.tables import StoredExecution, Tables

if TYPE_CHECKING:
    from oxide_batch.repository import port
    from oxide_batch.repository.port import UnitOfWork, UnitOfWorkFactory
    from oxide_batch.services.operator import OperatorWork
    from oxide_batch.services.retention import RetentionWork


class FakeUnitOfWork(
    ExecutionOperations,
    ControlOperations,
    FlowOperations,
    PartitionOperations,
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
        self.legacy_definition_id = self.next_id("definitions")
        self.tables.definitions[self.legacy_definition_id] = legacy_row(
            self.legacy_definition_id, clock.now()
        )

    def begin(
        self, *, runtime_user_id: int | None = None, owner_token: bytes | None = None
    ) -> FakeUnitOfWork:
        return FakeUnitOfWork(self, runtime_user_id=runtime_user_id, owner_token=owner_token)

    def descriptor(self) -> RepositoryDescriptor:
        """The adapter's claim for a migrated schema: the supported version, every capability."""
        return RepositoryDescriptor.of(SUPPORTED_SCHEMA_VERSION, DECLARED_CAPABILITIES)

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
    # mypy proves the fake satisfies the whole port, each Protocol in turn, and the
    # narrower ones the services are typed against (tests/repository/test_fake_port.py
    # checks the signatures at run time).
    def _whole_port(uow: FakeUnitOfWork) -> UnitOfWork:
        return uow

    def _transaction(uow: FakeUnitOfWork) -> port.Transaction:
        return uow

    def _executions(uow: FakeUnitOfWork) -> port.Executions:
        return uow

    def _control(uow: FakeUnitOfWork) -> port.Control:
        return uow

    def _operator_audit(uow: FakeUnitOfWork) -> port.OperatorAudit:
        return uow

    def _admin_history(uow: FakeUnitOfWork) -> port.AdminHistory:
        return uow

    def _steps(uow: FakeUnitOfWork) -> port.Steps:
        return uow

    def _definitions(uow: FakeUnitOfWork) -> port.Definitions:
        return uow

    def _flow(uow: FakeUnitOfWork) -> port.Flow:
        return uow

    def _partitions(uow: FakeUnitOfWork) -> port.Partitions:
        return uow

    def _holds(uow: FakeUnitOfWork) -> port.Holds:
        return uow

    def _purge(uow: FakeUnitOfWork) -> port.Purge:
        return uow

    def _operator_work(uow: FakeUnitOfWork) -> OperatorWork:
        return uow

    def _retention_work(uow: FakeUnitOfWork) -> RetentionWork:
        return uow

    def _factory(repo: FakeJobRepository) -> UnitOfWorkFactory[UnitOfWork]:
        return repo

    def _operator_factory(repo: FakeJobRepository) -> UnitOfWorkFactory[OperatorWork]:
        return repo

    def _retention_factory(repo: FakeJobRepository) -> UnitOfWorkFactory[RetentionWork]:
        return repo

    def _job_repository(repo: FakeJobRepository) -> port.JobRepository:
        return repo
