"""The repository port: what services rely on, whatever the adapter.

Every mutation is a compare-and-swap: it names the version it observed and
raises ``StaleVersion`` (expected, actual) when the row moved. Operations
return immutable domain values, never model instances, and are provisional
until ``commit()`` succeeds.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from oxide_batch.domain.descriptor import RepositoryDescriptor
from oxide_batch.domain.execution import (
    JobExecution,
    JobInstance,
    JobInstanceSelection,
    StepExecution,
)
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.parameters import JobInstanceKey
from oxide_batch.domain.recovery import RecoveryDecision, RecoveryRequest, RecoveryResult


class UnitOfWork(AbstractContextManager["UnitOfWork"], Protocol):
    """One transaction; leaving the ``with`` block without ``commit()`` rolls back."""

    def commit(self) -> None: ...
    def rollback(self) -> None: ...

    def select_or_create_job_instance(self, key: JobInstanceKey) -> JobInstanceSelection: ...
    def find_job_instance(self, key: JobInstanceKey) -> JobInstance | None: ...
    def get_job_instance(self, job_instance_id: int) -> JobInstance: ...
    def create_job_execution(self, job_instance_id: int) -> JobExecution: ...
    def get_job_execution(self, job_execution_id: int) -> JobExecution: ...
    def job_executions(self, job_instance_id: int) -> list[JobExecution]: ...
    def transition_job_execution(
        self, job_execution_id: int, expected_version: int, transition: LifecycleTransition
    ) -> JobExecution: ...
    def enrich_job_exit_status(
        self, job_execution_id: int, expected_version: int, exit_code: str
    ) -> JobExecution: ...
    def recover_job_execution(
        self, job_execution_id: int, request: RecoveryRequest
    ) -> RecoveryResult: ...
    def recovery_decision(self, job_execution_id: int) -> RecoveryDecision | None: ...

    def create_step_execution(
        self, job_execution_id: int, step_name: str, *, node_id: str | None = None
    ) -> StepExecution: ...
    def get_step_execution(self, step_execution_id: int) -> StepExecution: ...
    def step_executions(self, job_execution_id: int) -> list[StepExecution]: ...
    def transition_step_execution(
        self, step_execution_id: int, expected_version: int, transition: LifecycleTransition
    ) -> StepExecution: ...
    def enrich_step_exit_status(
        self, step_execution_id: int, expected_version: int, exit_code: str
    ) -> StepExecution: ...


class JobRepository(Protocol):
    def begin(self) -> UnitOfWork: ...
    def descriptor(self) -> RepositoryDescriptor: ...
