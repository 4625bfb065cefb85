"""Job instances and their attempts in the fake (the port's ``Executions``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import ExecutionAlreadyActive
from oxide_batch.domain.evidence import already_active, validate_owner_token
from oxide_batch.domain.execution import (
    ExecutionMetadata,
    JobExecution,
    JobInstance,
    JobInstanceSelection,
    Launch,
)
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.fused import (
    WriteControl,
    fenced_transition_with_exit,
    started_on_creation,
    with_exit_code,
)
from oxide_batch.domain.launch import plan_new_attempt
from oxide_batch.domain.lifecycle import LifecycleTransition, compare_and_transition
from oxide_batch.domain.names import IdentifierKind, validate_identifier
from oxide_batch.domain.parameters import JobInstanceKey
from oxide_batch.domain.recovery import fenced_enrich
from oxide_batch.domain.worker import WorkerIdentity
from tests.fakes.base import JOB_EXECUTION
from tests.fakes.definitions import DefinitionOperations
from tests.fakes.tables import ExecutionRow, InstanceRow


class ExecutionOperations(DefinitionOperations):
    """Job instances and their attempts in the fake (the port's ``Executions``)."""

    # -- Executions -----------------------------------------------------------------

    def write_control(self, job_execution_id: int | None = None) -> WriteControl | None:
        # Without an id: the execution this work last wrote under (a partition's).
        pk = self._in_hand if job_execution_id is None else job_execution_id
        return None if pk is None else self._control.get(pk)

    def select_or_create_job_instance(self, key: JobInstanceKey) -> JobInstanceSelection:
        existing = self.find_job_instance(key)
        if existing is not None:
            return JobInstanceSelection(existing, created=False)
        instance = JobInstance(self._repository.next_id("instances"), key, self.now())
        self._open().instances[instance.id] = InstanceRow(instance)
        return JobInstanceSelection(instance, created=True)

    def find_job_instance(self, key: JobInstanceKey) -> JobInstance | None:
        for row in self._open().instances.values():
            if row.instance.job_name == key.job_name and row.instance.key.digest == key.digest:
                return row.instance
        return None

    def get_job_instance(self, job_instance_id: int) -> JobInstance:
        return self._instance(job_instance_id).instance

    def create_job_execution(
        self, job_instance_id: int, *, definition_digest: str | None = None
    ) -> JobExecution:
        return self._new_attempt(job_instance_id, definition_digest)

    def launch_job_execution(
        self,
        key: JobInstanceKey,
        owner_token: bytes,
        *,
        definition_digest: str | None = None,
        worker: WorkerIdentity | None = None,
    ) -> Launch:
        token = validate_owner_token(owner_token)
        selection = self.select_or_create_job_instance(key)
        execution = self._new_attempt(selection.instance.id, definition_digest, token, worker)
        return Launch(selection=selection, execution=execution)

    def _new_attempt(
        self,
        job_instance_id: int,
        digest: str | None,
        owner_token: bytes | None = None,
        worker: WorkerIdentity | None = None,
    ) -> JobExecution:
        instance = self._instance(job_instance_id).instance
        attempts = self._executions_of(instance.id)
        latest = attempts[-1].execution if attempts else None
        now = self.now()
        try:
            attempt = plan_new_attempt(instance.id, latest, now)
        except ExecutionAlreadyActive as refusal:
            active = attempts[-1]
            newest = max(
                (
                    s.last_activity_at
                    for s in self._steps_of(active.execution.id)
                    if s.last_activity_at
                ),
                default=None,
            )
            raise already_active(
                refusal,
                active.view(newest),
                now=now,
                lease_ttl=batch_settings.LEASE_TTL,
                stale_after=batch_settings.RECOVERY_STALE_AFTER,
            ) from None
        definition_id, upgrade_id = self._bind_definition(
            instance.id, instance.job_name, latest, digest
        )
        metadata, version = attempt.metadata, 0
        if owner_token is not None:
            metadata, version = started_on_creation(metadata, now)
        execution = JobExecution(
            id=self._repository.next_id("executions"),
            metadata=metadata,
            version=version,
            updated_at=now,
            job_instance_id=instance.id,
            job_name=instance.job_name,
            attempt=attempt.attempt,
            definition_id=definition_id,
            restart_of_id=attempt.restart_of_id,
            upgrade_id=upgrade_id,
        )
        owner_user = self._runtime_user_id if owner_token is not None else None
        known = worker if owner_token is not None and worker is not None and worker.known else None
        self._put(
            ExecutionRow(
                execution, now, owner_token=owner_token, owner_user_id=owner_user, worker=known
            )
        )
        return execution

    def get_job_execution(self, job_execution_id: int) -> JobExecution:
        # A read: not the row a write works on (nothing in hand or remembered).
        return self._found(self._open().executions, JOB_EXECUTION, job_execution_id).execution

    def job_executions(self, job_instance_id: int) -> list[JobExecution]:
        pk = validate_identifier(IdentifierKind.JOB_INSTANCE, job_instance_id)
        return [row.execution for row in self._executions_of(pk)]

    def transition_job_execution(
        self,
        job_execution_id: int,
        expected_version: int,
        transition: LifecycleTransition,
        *,
        by_runtime: bool = False,
        by_operator: bool = False,
        exit_code: str | None = None,
    ) -> JobExecution:
        row = self._execution(job_execution_id)
        self._check_claimant(row)
        current, now = row.execution, self.now()
        if by_runtime:
            metadata, version = fenced_transition_with_exit(
                current, expected_version, transition.stamped(now), exit_code
            )
        else:
            metadata, version = with_exit_code(
                compare_and_transition(
                    current.metadata, current.version, expected_version, transition.stamped(now)
                ),
                exit_code,
            )
        written = self._write_execution(row, metadata, version, now, activity=not by_operator)
        self._keep_failure_detail(written.job_instance_id, written.id, None, transition, now)
        return written

    def failure_detail(
        self, job_execution_id: int, *, step_execution_id: int | None = None
    ) -> FailureDetail | None:
        validate_identifier(IdentifierKind.JOB_EXECUTION, job_execution_id)
        if step_execution_id is not None:
            validate_identifier(IdentifierKind.STEP_EXECUTION, step_execution_id)
        found = [
            row
            for row in self._open().failure_details.values()
            if row.job_execution_id == job_execution_id
            and row.step_execution_id == step_execution_id
        ]
        return max(found, key=lambda row: row.id).detail if found else None

    def enrich_job_exit_status(
        self, job_execution_id: int, expected_version: int, exit_code: str
    ) -> JobExecution:
        row = self._execution(job_execution_id)
        self._check_claimant(row)
        now = self.now()
        metadata, version = fenced_enrich(row.execution, expected_version, exit_code)
        return self._write_execution(row, metadata, version, now, activity=True)

    def _write_execution(
        self,
        row: ExecutionRow,
        metadata: ExecutionMetadata,
        version: int,
        now: datetime,
        *,
        activity: bool,
    ) -> JobExecution:
        changed = row.execution.with_state(metadata, version, now)
        written = row.with_execution(changed, now)
        if activity:
            written = dataclasses.replace(written, last_activity_at=now)
        self._put(written)
        return changed

    def execution_image(self, job_execution_id: int) -> Mapping[str, Any] | None:
        """The adapter's row image is its own (the API's reads of extras); the
        fake keeps none."""
        return None
