"""The Django adapter of the repository port."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db import DatabaseError

from oxide_batch.conf import batch_settings
from oxide_batch.domain.descriptor import RepositoryCapability, RepositoryDescriptor
from oxide_batch.domain.state import StateLimits
from oxide_batch.repository.audit import AuditOperations
from oxide_batch.repository.claims import WorkerRecoveryOperations
from oxide_batch.repository.clock import Clock, SystemClock
from oxide_batch.repository.control import ControlOperations
from oxide_batch.repository.executions import ExecutionOperations
from oxide_batch.repository.faults import translate
from oxide_batch.repository.flow import FlowOperations
from oxide_batch.repository.lost_write import LostWriteOperations
from oxide_batch.repository.partitions import PartitionOperations
from oxide_batch.repository.port import JobRepository
from oxide_batch.repository.retention import RetentionOperations
from oxide_batch.repository.schema import check_schema_version, read_schema_version
from oxide_batch.repository.steps import StepOperations

# Declared only once implemented and tested; an undeclared capability is
# treated as unavailable by runtimes (failing closed).
DECLARED_CAPABILITIES: frozenset[RepositoryCapability] = frozenset(RepositoryCapability)


class DjangoUnitOfWork(
    ExecutionOperations,
    FlowOperations,
    WorkerRecoveryOperations,
    StepOperations,
    PartitionOperations,
    AuditOperations,
    ControlOperations,
    LostWriteOperations,
    RetentionOperations,
):
    """One repository transaction. Use as ``with repo.begin() as uow: … uow.commit()``."""


class DjangoJobRepository:
    """The job repository on Django's ORM (PostgreSQL or SQLite)."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        using: str = "default",
        state_limits: StateLimits | None = None,
    ) -> None:
        """``state_limits`` bound checkpoints and contexts (default: the
        ``OXIDE_BATCH_STATE_MAX_BYTES`` / ``OXIDE_BATCH_STATE_MAX_DEPTH`` settings)."""
        self.clock: Clock = clock or SystemClock()
        self.using = using
        self.state_limits = state_limits or StateLimits(
            batch_settings.STATE_MAX_BYTES,
            batch_settings.STATE_MAX_DEPTH,
            bytes_set_by="OXIDE_BATCH_STATE_MAX_BYTES",
            depth_set_by="OXIDE_BATCH_STATE_MAX_DEPTH",
        )

    def begin(
        self, *, runtime_user_id: int | None = None, owner_token: bytes | None = None
    ) -> DjangoUnitOfWork:
        """A new unit of work; it opens its transaction when entered.

        ``runtime_user_id``: the runtime user it writes for (the API's runtime
        endpoints pass the authenticated user): a claim records that user, and
        runtime writes to an execution another user claimed are refused
        (``ExecutionOwned``, contract §2.5.2). ``None`` binds nothing (in-process callers).
        ``owner_token``: the token the runtime's writes carry — a write to an
        execution that recorded another token is ``ExecutionOwned``, and
        ``write_control`` compares it with the recorded one.
        """
        return DjangoUnitOfWork(
            clock=self.clock,
            using=self.using,
            state_limits=self.state_limits,
            runtime_user_id=runtime_user_id,
            owner_token=owner_token,
        )

    def descriptor(self) -> RepositoryDescriptor:
        """The capability descriptor of the connected schema.

        Raises ``SchemaUninitialized``, ``MigrationRequired``, ``NewerSchema``
        or ``Unavailable``.
        """
        try:
            found = read_schema_version(self.using)
        except DatabaseError as error:
            mapped = translate(error)
            if mapped is None:
                raise
            raise mapped from error
        return RepositoryDescriptor.of(check_schema_version(found), DECLARED_CAPABILITIES)


if TYPE_CHECKING:
    # mypy proves the adapter satisfies the port it documents.
    def _satisfies_port(repository: DjangoJobRepository) -> JobRepository:
        return repository
