"""Instances, job executions and recovery decisions in the Django adapter."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from django.db.models import F, Subquery

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.conf import batch_settings
from oxide_batch.domain import events
from oxide_batch.domain.errors import (
    ExecutionAlreadyActive,
    IncompatibleDefinition,
    JobExecutionNotFound,
    JobInstanceNotFound,
)
from oxide_batch.domain.evidence import already_active, validate_owner_token
from oxide_batch.domain.execution import (
    FailureSummary,
    JobExecution,
    JobInstance,
    JobInstanceSelection,
    Launch,
    StepExecution,
)
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.fused import (
    fenced_transition_with_exit,
    started_on_creation,
    with_exit_code,
)
from oxide_batch.domain.launch import plan_new_attempt
from oxide_batch.domain.lifecycle import (
    LifecycleTransition,
    compare_and_transition,
)
from oxide_batch.domain.names import IdentifierKind
from oxide_batch.domain.parameters import JobInstanceKey
from oxide_batch.domain.recovery import (
    RecoveryDecision,
    RecoveryRequest,
    RecoveryResult,
    fenced_enrich,
    recovered_execution,
    resolved_step,
)
from oxide_batch.domain.status import UNRESOLVED_STATUSES, BatchStatus
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.facts import newest_step_write
from oxide_batch.repository.control import RECOVERY_EXECUTION_COLUMNS, execution_view_from_row
from oxide_batch.repository.definitions import DefinitionOperations
from oxide_batch.repository.failure_details import detail_to_keep, read_failure_detail
from oxide_batch.repository.records import (
    CONTROL_COLUMNS,
    DECISION_COLUMNS,
    INSTANCE_COLUMNS,
    JOB_EXECUTION_COLUMNS,
    STEP_EXECUTION_COLUMNS,
    decision_from_row,
    execution_columns,
    instance_from_row,
    job_execution_from_row,
    metadata_columns,
    parameters_to_json,
    step_execution_from_row,
)
from oxide_batch.repository.unit_of_work import operation

JOB_INSTANCE = IdentifierKind.JOB_INSTANCE
JOB_EXECUTION = IdentifierKind.JOB_EXECUTION
STEP_EXECUTION = IdentifierKind.STEP_EXECUTION
UNRESOLVED_STATUS_VALUES = [status.value for status in sorted(UNRESOLVED_STATUSES)]


class ExecutionOperations(DefinitionOperations):
    """Launch, restart, lifecycle CAS and recovery of job executions."""

    @operation
    def select_or_create_job_instance(self, key: JobInstanceKey) -> JobInstanceSelection:
        """The unique instance of ``key``; race-free (insert-on-conflict, then read).

        Of concurrent callers with one key exactly one sees ``created=True``.
        A name with an invisible character → ``NameContainsInvisible`` (decision 201).
        """
        key.validate_new()
        created_at = self.now()
        new_id = self._insert_unless_conflict(
            models.JobInstance,
            {
                "job_name": key.job_name,
                "key_digest": key.digest,
                "identifying_parameters": parameters_to_json(key),
                "created_at": created_at,
            },
            ("job_name", "key_digest"),
        )
        if new_id is not None:
            instance = JobInstance(new_id, key, created_at)
            self._record(events.InstanceCreated(instance=instance, actor=self._actor))
            return JobInstanceSelection(instance, created=True)
        existing = self.find_job_instance(key)
        assert existing is not None, "a conflicting instance row must be visible"
        return JobInstanceSelection(existing, created=False)

    @operation
    def find_job_instance(self, key: JobInstanceKey) -> JobInstance | None:
        row = (
            models.JobInstance.objects.using(self._using)
            .filter(job_name=key.job_name, key_digest=key.digest)
            .values(*INSTANCE_COLUMNS)
            .first()
        )
        return None if row is None else instance_from_row(row)

    @operation
    def get_job_instance(self, job_instance_id: int) -> JobInstance:
        pk = self._id(JOB_INSTANCE, job_instance_id)
        row = self._read_row(models.JobInstance, pk, INSTANCE_COLUMNS)
        if row is None:
            raise JobInstanceNotFound(id=pk)
        return instance_from_row(row)

    @operation
    def create_job_execution(
        self, job_instance_id: int, *, definition_digest: str | None = None
    ) -> JobExecution:
        """A new attempt of the instance, under a lock on the instance row.

        Raises ``CompletedInstance``, ``AbandonedInstance`` or
        ``ExecutionAlreadyActive`` from the latest attempt's status. Without a
        digest the attempt keeps the latest attempt's definition (the legacy
        definition for a first attempt); a different definition needs an upgrade
        edge from the latest attempt's (``IncompatibleDefinition``), and the
        attempt records the edge it used.
        """
        return self._new_attempt(self._id(JOB_INSTANCE, job_instance_id), definition_digest)

    @operation
    def launch_job_execution(
        self,
        key: JobInstanceKey,
        owner_token: bytes,
        *,
        definition_digest: str | None = None,
        worker: WorkerIdentity | None = None,
    ) -> Launch:
        """contract §4.2 "Fewer round trips": select or create the instance of
        ``key``, create its next attempt, claim it for ``owner_token`` and this
        unit of work's runtime user, and start it — one transaction, the new
        execution row written once.

        The attempt follows :meth:`create_job_execution`'s rules and refusals
        (``CompletedInstance``, ``AbandonedInstance``, ``ExecutionAlreadyActive``,
        the definition errors), under the same instance lock; it is then moved
        STARTING → STARTED by the lifecycle table (the claim checks and keeps
        the version) and inserted as that row: STARTED, version 1, the owner
        recorded, ``created_at`` = ``started_at`` = ``last_activity_at`` = now —
        where create, claim and start leave it. A refusal raises before
        anything is written but the instance, which the caller's rollback takes
        back too. Statements: the instance's insert-on-conflict (plus its read
        when it exists), the instance lock, the latest attempt, the built-in
        definition's id for a first attempt without a digest, the insert: 5.
        ``worker`` (decision 310) is stored with the owner, by the same insert.
        """
        token = validate_owner_token(owner_token)
        selection = self.select_or_create_job_instance(key)
        launched = self._new_attempt(
            selection.instance.id, definition_digest, owner_token=token, worker=worker
        )
        # Created, claimed and started: what the separate requests record (the
        # claim says nothing of its own), the attempt as inserted STARTING.
        self._record(
            events.ExecutionTransitioned(
                execution=launched, prior=BatchStatus.STARTING, actor=self._actor
            )
        )
        return Launch(selection=selection, execution=launched)

    def _new_attempt(
        self,
        pk: int,
        definition_digest: str | None,
        *,
        owner_token: bytes | None = None,
        worker: WorkerIdentity | None = None,
    ) -> JobExecution:
        """Insert the instance's next attempt (STARTING, version 0); with
        ``owner_token`` already claimed and STARTED (version 1), the worker's
        identity recorded with the owner."""
        instance = self._lock_row(models.JobInstance, pk, ("id", "job_name"))
        if instance is None:
            raise JobInstanceNotFound(id=pk)
        attempts = models.JobExecution.objects.using(self._using).filter(job_instance_id=pk)
        latest_row = (
            attempts.order_by("-attempt")
            # In the same read: an attempt whose lost write no operator resolved.
            .annotate(
                lost_write_of=Subquery(
                    attempts.filter(models.UNRESOLVED_LOST_WRITE).order_by("id").values("id")[:1]
                )
            )
            .values(*JOB_EXECUTION_COLUMNS, "lost_write_of")
            .first()
        )
        latest = None if latest_row is None else job_execution_from_row(latest_row)
        now = self.now()
        lost_write_of = None if latest_row is None else latest_row["lost_write_of"]
        try:
            attempt = plan_new_attempt(pk, latest, now, lost_write_of=lost_write_of)
        except ExecutionAlreadyActive as refusal:
            raise self._already_active(refusal, now) from None
        definition_id, upgrade_id = self._bind_definition(
            pk, instance["job_name"], latest, definition_digest
        )
        metadata, version = attempt.metadata, 0
        claim: dict[str, Any] = {}
        if owner_token is not None:
            metadata, version = started_on_creation(metadata, now)
            claim = {
                "owner_token": owner_token,
                "owner_user_id": self._runtime_user_id,
                # The lease granted (contract §2.5.3): one fact for every process.
                "lease_ttl": batch_settings.LEASE_TTL,
                **(worker or WorkerIdentity()).columns(),
            }
        row = models.JobExecution.objects.using(self._using).create(
            job_instance_id=pk,
            job_name=instance["job_name"],
            attempt=attempt.attempt,
            restart_of_id=attempt.restart_of_id,
            definition_id=definition_id,
            upgrade_id=upgrade_id,
            last_activity_at=now,
            **claim,
            **metadata_columns(metadata, version, now),
        )
        self._remember_control(row.pk, owner_token, None, None)
        execution = JobExecution(
            id=row.pk,
            metadata=metadata,
            version=version,
            updated_at=now,
            job_instance_id=pk,
            job_name=instance["job_name"],
            attempt=attempt.attempt,
            definition_id=definition_id,
            restart_of_id=attempt.restart_of_id,
            upgrade_id=upgrade_id,
        )
        self._record(events.ExecutionLaunched(execution=execution, actor=self._actor))
        return execution

    def _already_active(
        self, refusal: ExecutionAlreadyActive, now: datetime
    ) -> ExecutionAlreadyActive:
        """The refusal with the active attempt's activity, lease and the next
        step (one more read, on the refusal's path only)."""
        row = (
            models.JobExecution.objects.using(self._using)
            .filter(pk=refusal.execution_id)
            .annotate(newest_step_write_at=newest_step_write(self._using))
            .values(*CONTROL_COLUMNS, "newest_step_write_at")
            .first()
        )
        if row is None:  # pragma: no cover - the instance lock keeps the attempt
            return refusal
        return already_active(
            refusal,
            execution_view_from_row(row),
            now=now,
            lease_ttl=batch_settings.LEASE_TTL,
            stale_after=batch_settings.RECOVERY_STALE_AFTER,
        )

    def _bind_definition(
        self,
        instance_id: int,
        job_name: str,
        latest: JobExecution | None,
        digest: str | None,
    ) -> tuple[int, int | None]:
        """(definition id, upgrade edge id) of a new attempt."""
        if digest is None:
            if latest is None:
                return self._legacy_definition_id(), None
            return latest.definition_id, None
        proposed = self.get_definition(digest, job_name=job_name).id
        if latest is None or latest.definition_id == proposed:
            return proposed, None
        edge = (
            models.DefinitionUpgrade.objects.using(self._using)
            .filter(from_definition=latest.definition_id, to_definition=proposed)
            .values_list("id", flat=True)
            .first()
        )
        if edge is None:
            raise IncompatibleDefinition(instance_id=instance_id)
        return proposed, edge

    @operation
    def get_job_execution(self, job_execution_id: int) -> JobExecution:
        pk = self._id(JOB_EXECUTION, job_execution_id)
        row = self._read_row(models.JobExecution, pk, JOB_EXECUTION_COLUMNS)
        if row is None:
            raise JobExecutionNotFound(id=pk)
        return job_execution_from_row(row)

    @operation
    def failure_detail(
        self, job_execution_id: int, *, step_execution_id: int | None = None
    ) -> FailureDetail | None:
        """The newest detail kept of the execution's own failure (or of its step
        ``step_execution_id``'s); ``None`` when none was kept. One statement."""
        return read_failure_detail(
            self._using,
            self._id(JOB_EXECUTION, job_execution_id),
            None if step_execution_id is None else self._id(STEP_EXECUTION, step_execution_id),
        )

    @operation
    def job_executions(self, job_instance_id: int) -> list[JobExecution]:
        """The instance's attempts in creation (attempt) order."""
        pk = self._id(JOB_INSTANCE, job_instance_id)
        rows = (
            models.JobExecution.objects.using(self._using)
            .filter(job_instance_id=pk)
            .order_by("attempt")
            .values(*JOB_EXECUTION_COLUMNS)
        )
        return [job_execution_from_row(row) for row in rows]

    @operation
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
        """CAS transition: lock the row, check version and rule, write, bump the version.

        ``exit_code`` (a runtime's, contract §4.2) is stored by the same write, after
        every rule of the transition: still one version step.

        ``by_runtime`` (the runtime API) applies the runtime's restriction
        (contract §2.1), under the same row lock and in the pair check's place of
        ``compare_and_transition``: ABANDONED and leaving UNKNOWN are operator
        decisions → ``IllegalTransition``. ``by_operator`` (an operator's
        abandon): not the runtime's activity, so ``last_activity_at`` stays (contract §2.5.3).
        """
        return self._compare_and_swap(
            models.JobExecution,
            self._id(JOB_EXECUTION, job_execution_id),
            CONTROL_COLUMNS,
            job_execution_from_row,
            lambda pk: JobExecutionNotFound(id=pk),
            lambda current, now: (
                with_exit_code(
                    compare_and_transition(
                        current.metadata, current.version, expected_version, transition.stamped(now)
                    ),
                    exit_code,
                )
                if not by_runtime
                else fenced_transition_with_exit(
                    current, expected_version, transition.stamped(now), exit_code
                )
            ),
            facts=lambda prior, written: (
                events.ExecutionTransitioned(
                    execution=written,
                    prior=prior.status,
                    actor=events.Actor("operator") if by_operator else self._actor,
                ),
            ),
            activity=not by_operator,
            execution=True,
            # Read only for a failure that carries a detail: a transition
            # without one never reaches the detail's module (the hot path).
            failure_detail=detail_to_keep(transition.failure) if transition.sends_detail else None,
        )

    @operation
    def enrich_job_exit_status(
        self, job_execution_id: int, expected_version: int, exit_code: str
    ) -> JobExecution:
        """CAS exit-code enrichment; the status never changes."""
        return self._compare_and_swap(
            models.JobExecution,
            self._id(JOB_EXECUTION, job_execution_id),
            CONTROL_COLUMNS,
            job_execution_from_row,
            lambda pk: JobExecutionNotFound(id=pk),
            lambda current, now: fenced_enrich(current, expected_version, exit_code),
            facts=lambda _, written: (
                events.ExecutionExitCodeRecorded(execution=written, actor=self._actor),
            ),
            activity=True,
            execution=True,
        )

    @operation
    def recover_job_execution(
        self,
        job_execution_id: int,
        request: RecoveryRequest,
        *,
        operator_user_id: int | None = None,
    ) -> RecoveryResult:
        """Resolve an orphaned or ambiguous execution and append its decision row.

        Locks the execution; raises ``StaleVersion`` then ``RecoveryNotAllowed``.
        Then, in the same transaction (contract §2.5.6), every step of the execution
        that is not finished (STARTING, STARTED, STOPPING, UNKNOWN) is locked
        (step rows in id order, the global order) and resolved: FAILED with
        ``request.steps_failure``, ended at the decision time, version + 1 — so
        a worker wrongly presumed dead is fenced (its next chunk commit or step
        transition is refused). The decision, which lists the resolved step
        ids, is inserted first so the execution and the steps it resolved can
        reference it (``recovery_decision_id``: the fence every later runtime
        write checks); all of it commits together, and a second decision for
        the same observed version is impossible (unique row). 5 statements with
        unfinished steps (lock the execution, lock the unfinished steps, insert
        the decision, write the execution, write the steps), 4 without — 3 and 2
        after ``recovery_evidence(lock=True)`` in the same unit of work, whose
        locked rows it takes instead of locking them again.
        """
        pk = self._id(JOB_EXECUTION, job_execution_id)
        # After ``recovery_evidence(lock=True)`` in this work the rows are held
        # already (nothing wrote them since): each is locked once.
        held = self._held_for_recovery(pk)
        row = (
            held[0]
            if held is not None
            else self._lock_row(models.JobExecution, pk, RECOVERY_EXECUTION_COLUMNS)
        )
        if row is None:
            raise JobExecutionNotFound(id=pk)
        prior = job_execution_from_row(row)
        now = self.now()
        recovered = recovered_execution(prior, request, now)
        assert request.steps_failure is not None
        resolved = (
            [
                resolved_step(step_execution_from_row(step), request.steps_failure, now)
                for step in held[1]
                if step["status"] in UNRESOLVED_STATUS_VALUES
            ]
            if held is not None
            else self._lock_unfinished_steps(pk, request.steps_failure, now)
        )
        resolved_ids = tuple(step.id for step in resolved)
        decision = models.RecoveryDecision.objects.using(self._using).create(
            job_instance_id=prior.job_instance_id,
            job_execution_id=pk,
            execution_version=prior.version,
            prior_status=prior.status.value,
            resulting_status=recovered.status.value,
            reason_code=request.reason_code,
            operator_reference=request.operator_reference,
            operator_user_id=operator_user_id,
            evidence_digest=request.evidence_digest.hex(),
            decided_at=now,
            resolved_step_ids=list(resolved_ids),
            eligibility=request.eligibility,
            override_note=request.override_note,
            evidence=None if request.evidence is None else dict(request.evidence),
        )
        written = {
            **execution_columns(row, recovered.metadata, recovered.version, now),
            "recovery_decision_id": decision.pk,
        }
        self._update(models.JobExecution, pk, written)
        if resolved_ids:
            failure = request.steps_failure
            # One set-based write: the resolved columns are the same for every
            # step but the version (each step's own + 1, as the domain computed).
            models.StepExecution.objects.using(self._using).filter(id__in=resolved_ids).update(
                status=BatchStatus.FAILED.value,
                ended_at=now,
                failure_category=failure.category.value,
                failure_id=failure.failure_id,
                updated_at=now,
                version=F("version") + 1,
                recovery_decision_id=decision.pk,
            )
        result = RecoveryResult(
            execution=dataclasses.replace(recovered, recovery_decision_id=decision.pk),
            decision=RecoveryDecision.of(
                decision.pk,
                request,
                prior,
                recovered,
                decided_at=now,
                resolved_step_ids=resolved_ids,
            ),
        )
        actor = events.Actor("operator", operator_user_id)
        self._record(
            events.ExecutionTransitioned(
                execution=result.execution, prior=prior.status, actor=actor
            ),
            events.RecoveryApplied(
                execution=result.execution, decision=result.decision, actor=actor
            ),
        )
        return result

    def _lock_unfinished_steps(
        self, job_execution_id: int, failure: FailureSummary, now: datetime
    ) -> list[StepExecution]:
        """Lock the execution's unfinished steps in id order (the global order)
        and resolve each through the domain rule (one locking read)."""
        rows = (
            models.StepExecution.objects.using(self._using)
            .select_for_update(no_key=True)
            .filter(job_execution_id=job_execution_id, status__in=UNRESOLVED_STATUS_VALUES)
            .order_by("id")
            .values(*STEP_EXECUTION_COLUMNS)
        )
        return [resolved_step(step_execution_from_row(row), failure, now) for row in rows]

    @operation
    def recovery_decision(self, job_execution_id: int) -> RecoveryDecision | None:
        """The newest recovery decision of the execution, if any."""
        pk = self._id(JOB_EXECUTION, job_execution_id)
        row = (
            models.RecoveryDecision.objects.using(self._using)
            .filter(job_execution_id=pk)
            .order_by("-id")
            .values(*DECISION_COLUMNS)
            .first()
        )
        return None if row is None else decision_from_row(row)
