"""Holds, the retention audit, the two-phase purge and audit pruning in the Django adapter.

The purge deletes whole instances, set-based and child before parent, one
statement per table whatever the batch size — never through Django's
per-object deletion collector. Audit rows reference ids without foreign keys,
so they outlive what they describe; only :meth:`prune_audit` deletes them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import models as django_models
from django.db.models import Exists, OuterRef, Q

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain import events
from oxide_batch.domain.errors import JobInstanceNotFound, RetentionPlanStale
from oxide_batch.domain.names import IdentifierKind, OperatorStringKind, validate_operator_string
from oxide_batch.domain.operator import RecordOutcome
from oxide_batch.domain.retention import (
    AuditedActor,
    InstanceState,
    ObservedExecution,
    PurgeCandidate,
    PurgeCounts,
    PurgeCriteria,
    PurgePlan,
    RetentionAction,
    RetentionHold,
    RetentionRecord,
    RetentionRecordDraft,
    stale_candidates,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository import outbox
from oxide_batch.repository.unit_of_work import UnitOfWorkBase, operation

JOB_INSTANCE = IdentifierKind.JOB_INSTANCE
HOLD_COLUMNS = ("id", "hold_actor", "hold_user_id", "hold_reason_code", "hold_placed_at")
RECORD_COLUMNS = (
    *models.REQUEST_COLUMNS,
    "request_digest",
    "job_instance_id",
    "plan_digest",
    "batch_bound",
    *(f"deleted_{kind}" for kind in models.PURGE_KINDS),
    "changed",
    "outcome",
    "rejection_code",
    "rejection_details",
    "applied_at",
)
# Audit tables and the instant each row is aged by (oldest pruned first).
AUDIT_TABLES: tuple[tuple[str, type[models.AuditModel], str], ...] = (
    ("recovery_decisions", models.RecoveryDecision, "decided_at"),
    ("operator_requests", models.OperatorRequest, "requested_at"),
    ("retention_records", models.RetentionRecord, "applied_at"),
)
# Child before parent: each table only references tables deleted after it.
PURGE_ORDER: tuple[tuple[str, type[django_models.Model]], ...] = (
    ("flow_decisions", models.FlowDecision),
    ("step_partitions", models.StepPartition),
    ("step_executions", models.StepExecution),
    ("job_executions", models.JobExecution),
    ("job_instances", models.JobInstance),
)


def _hold_from_row(row: Mapping[str, Any]) -> RetentionHold | None:
    if row["hold_placed_at"] is None:
        return None
    return RetentionHold(
        job_instance_id=row["id"],
        actor=row["hold_actor"],
        reason_code=row["hold_reason_code"],
        placed_at=row["hold_placed_at"],
        actor_user_id=row["hold_user_id"],
    )


def retention_record_from_row(row: Mapping[str, Any]) -> RetentionRecord:
    """A ``RECORD_COLUMNS`` row as a ``RetentionRecord``."""
    return RetentionRecord(
        id=row["id"],
        action=RetentionAction(row["action"]),
        operation_id=row["operation_id"],
        actor=row["actor"],
        actor_user_id=row["actor_user_id"],
        reason_code=row["reason_code"],
        request_digest=row["request_digest"],
        job_instance_id=row["job_instance_id"],
        plan_digest=row["plan_digest"],
        batch_bound=row["batch_bound"],
        counts=PurgeCounts(*(row[f"deleted_{kind}"] for kind in models.PURGE_KINDS)),
        changed=row["changed"],
        outcome=RecordOutcome(row["outcome"]),
        rejection_code=row["rejection_code"],
        rejection_details=row["rejection_details"],
        applied_at=row["applied_at"],
    )


class RetentionOperations(UnitOfWorkBase):
    """Holds, retention records, purge survey/apply and audit pruning."""

    # -- holds ----------------------------------------------------------------

    @operation
    def job_instance_hold(self, job_instance_id: int) -> RetentionHold | None:
        """The instance's hold, or ``None``; ``JobInstanceNotFound``. One read."""
        pk = self._id(JOB_INSTANCE, job_instance_id)
        row = self._read_row(models.JobInstance, pk, HOLD_COLUMNS)
        if row is None:
            raise JobInstanceNotFound(id=pk)
        return _hold_from_row(row)

    @operation
    def place_instance_hold(
        self, job_instance_id: int, actor: AuditedActor, reason_code: str
    ) -> RetentionHold:
        """Place (or replace: actor, reason, time) the single hold. One UPDATE,
        which locks the row ``FOR NO KEY UPDATE`` implicitly; ``JobInstanceNotFound``
        when no row matched (including one a concurrent purge just deleted)."""
        pk = self._id(JOB_INSTANCE, job_instance_id)
        validate_operator_string(actor.reference, OperatorStringKind.ACTOR)
        validate_operator_string(reason_code, OperatorStringKind.REASON_CODE)
        now = self.now()
        updated = (
            models.JobInstance.objects.using(self._using)
            .filter(pk=pk)
            .update(
                hold_actor=actor.reference,
                hold_user_id=actor.user_id,
                hold_reason_code=reason_code,
                hold_placed_at=now,
            )
        )
        if updated == 0:
            raise JobInstanceNotFound(id=pk)
        hold = RetentionHold(pk, actor.reference, reason_code, now, actor.user_id)
        self._record(events.HoldPlaced(hold=hold, actor=events.Actor("operator", actor.user_id)))
        return hold

    @operation
    def release_instance_hold(self, job_instance_id: int) -> RetentionHold | None:
        """Remove the hold and return it (``None`` when there was none — not an
        error). Locks the instance ``FOR NO KEY UPDATE``; writes only if held."""
        pk = self._id(JOB_INSTANCE, job_instance_id)
        row = self._lock_row(models.JobInstance, pk, HOLD_COLUMNS)
        if row is None:
            raise JobInstanceNotFound(id=pk)
        previous = _hold_from_row(row)
        if previous is not None:
            self._update(
                models.JobInstance,
                pk,
                {
                    "hold_actor": None,
                    "hold_user_id": None,
                    "hold_reason_code": None,
                    "hold_placed_at": None,
                },
            )
        self._record(
            events.HoldReleased(job_instance_id=pk, hold=previous, actor=events.Actor("operator"))
        )
        return previous

    # -- retention audit ---------------------------------------------------------

    @operation
    def find_retention_record(
        self, action: RetentionAction, operation_id: str
    ) -> RetentionRecord | None:
        row = (
            models.RetentionRecord.objects.using(self._using)
            .filter(action=action.value, operation_id=operation_id)
            .values(*RECORD_COLUMNS)
            .first()
        )
        return None if row is None else retention_record_from_row(row)

    @operation
    def find_retention_records(
        self, action: RetentionAction, operation_ids: Sequence[str]
    ) -> dict[str, RetentionRecord]:
        """The records of these operation ids (by id; absent ones left out). One read."""
        rows = models.RetentionRecord.objects.using(self._using).filter(
            action=action.value, operation_id__in=list(operation_ids)
        )
        return {
            row["operation_id"]: retention_record_from_row(row)
            for row in rows.values(*RECORD_COLUMNS)
        }

    @operation
    def append_retention_record(self, draft: RetentionRecordDraft) -> RetentionRecord | None:
        """Append one audit row, in the transaction of the effect it audits; ``None``
        when ``(action, operation_id)`` is taken (a concurrent request won: the
        caller rolls back and replays). One ``INSERT … ON CONFLICT DO NOTHING``."""
        now = self.now()
        values: dict[str, Any] = {
            "action": draft.action.value,
            "operation_id": draft.operation_id,
            "actor": draft.actor,
            "actor_user_id": draft.actor_user_id,
            "reason_code": draft.reason_code,
            "request_digest": draft.request_digest,
            "job_instance_id": draft.job_instance_id,
            "plan_digest": draft.plan_digest,
            "batch_bound": draft.batch_bound,
            "changed": draft.changed,
            "outcome": draft.outcome.value,
            "rejection_code": draft.rejection_code,
            "rejection_details": draft.rejection_details,
            "applied_at": now,
            **{f"deleted_{kind}": value for kind, value in draft.counts.as_dict().items()},
        }
        new_id = self._insert_unless_conflict(
            models.RetentionRecord, values, ("action", "operation_id")
        )
        if new_id is None:
            return None
        record = RetentionRecord(**{**vars(draft), "id": new_id, "applied_at": now})
        self._record(
            events.RetentionRecorded(
                record=record, actor=events.Actor("operator", draft.actor_user_id)
            )
        )
        return record

    # -- purge ---------------------------------------------------------------------

    @operation
    def purge_survey(self, criteria: PurgeCriteria, *, min_age: timedelta) -> PurgePlan:
        """The oldest eligible instances (by their latest end), at most the bound,
        with every execution's observed version. Reads only; 4 statements (2 when
        nothing is eligible). ``AgeBoundTooSmall`` for a cutoff younger than ``min_age``.
        """
        criteria.check_age(self.now(), min_age)
        statuses = [status.value for status in criteria.statuses]
        executions = models.JobExecution.objects.using(self._using)
        # The latest execution of an instance all of whose executions qualify.
        disqualifying = executions.filter(job_instance_id=OuterRef("job_instance_id")).filter(
            ~Q(status__in=statuses)
            | Q(ended_at__isnull=True)
            | Q(ended_at__gt=OuterRef("ended_at"))
            | Q(ended_at=OuterRef("ended_at"), id__gt=OuterRef("id"))
        )
        latest = executions.filter(
            ended_at__lt=criteria.cutoff,
            status__in=statuses,
            job_instance__hold_placed_at__isnull=True,
        )
        if criteria.job_name is not None:
            latest = latest.filter(job_name=criteria.job_name)
        ids = list(
            latest.filter(~Exists(disqualifying))
            .order_by("ended_at", "job_instance_id")
            .values_list("job_instance_id", flat=True)[: criteria.bound]
        )
        candidates = self._observe_candidates(criteria, ids)
        kept = [candidate.instance_id for candidate in candidates]
        return PurgePlan(
            criteria=criteria,
            candidates=tuple(candidates),
            counts=self._child_counts(kept, sum(len(c.executions) for c in candidates)),
            held_excluded=self._held_excluded(criteria),
        )

    def _observe_candidates(
        self, criteria: PurgeCriteria, ids: Sequence[int]
    ) -> list[PurgeCandidate]:
        """Each candidate's executions with versions. A candidate that changed
        between the two reads (a restart, a transition) is left out, so a plan
        only offers what it saw eligible."""
        if not ids:
            return []
        observed = self._executions_of(ids, criteria)
        return [
            PurgeCandidate(instance_id, tuple(ObservedExecution(e[0], e[1]) for e in found))
            for instance_id in ids
            if (found := observed.get(instance_id))
            and all(status in criteria.statuses and ended for _, _, status, ended in found)
        ]

    def _in(self, column: str, ids: Sequence[int]) -> tuple[str, list[Any]]:
        """``column = ANY(%s)`` (one array parameter) on PostgreSQL, ``IN (…)`` elsewhere:
        a batch of 1000 ids costs one parameter to bind, not a thousand."""
        quoted = self._connection.ops.quote_name(column)
        if self._connection.vendor == "postgresql":
            return f"{quoted} = ANY(%s)", [list(ids)]
        return f"{quoted} IN ({', '.join(['%s'] * len(ids))})", list(ids)

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def _lock_clause(self) -> str:
        """``FOR NO KEY UPDATE``, as every writer of these rows takes: it waits for
        a restart, a hold, a transition or an enrichment in flight, while an
        insert that references the row by foreign key (``FOR KEY SHARE``) is not
        blocked — so a step insert under a restarted execution, holding that
        execution, cannot deadlock with the apply. The DELETEs take their own
        row locks."""
        if not self._connection.features.has_select_for_update:
            return ""
        return " FOR NO KEY UPDATE"

    def _executions_of(
        self, ids: Sequence[int], criteria: PurgeCriteria, *, lock: bool = False
    ) -> dict[int, list[tuple[int, int, BatchStatus, bool]]]:
        """(id, version, status, ended before the cutoff) of every execution of the
        instances, in id order. One statement; the end time is compared in SQL.

        ``lock`` takes the rows ``FOR NO KEY UPDATE`` in (instance, id) order.
        A row that a concurrent writer holds is waited for and then read as
        that writer committed it (READ COMMITTED re-reads a
        locked row once the lock is granted), so a change committed while the
        apply waited is seen."""
        table = self._connection.ops.quote_name(models.JobExecution._meta.db_table)
        where, params = self._in("job_instance_id", ids)
        cutoff = self._connection.ops.adapt_datetimefield_value(criteria.cutoff)
        lock_clause = self._lock_clause() if lock else ""
        rows = self._fetch(
            "SELECT job_instance_id, id, version, status, "  # nosec B608 # quoted table; ids bound
            "CASE WHEN ended_at IS NOT NULL AND ended_at < %s THEN 1 ELSE 0 END "
            f"FROM {table} WHERE {where} ORDER BY job_instance_id, id{lock_clause}",
            [cutoff, *params],
        )
        observed: dict[int, list[tuple[int, int, BatchStatus, bool]]] = defaultdict(list)
        for instance_id, execution_id, version, status, ended in rows:
            observed[instance_id].append((execution_id, version, BatchStatus(status), ended == 1))
        return observed

    def _child_counts(self, ids: Sequence[int], job_executions: int) -> PurgeCounts:
        """Rows the candidates own, per kind, in one statement."""
        if not ids:
            return PurgeCounts()
        quote = self._connection.ops.quote_name
        where, params = self._in("job_instance_id", ids)
        tables = [models.FlowDecision, models.StepPartition, models.StepExecution]
        selects = ", ".join(
            f"(SELECT COUNT(*) FROM {quote(model._meta.db_table)} WHERE {where})"  # nosec B608 # quoted; ids bound
            for model in tables
        )
        ((flow, partitions, steps),) = self._fetch(f"SELECT {selects}", params * len(tables))
        return PurgeCounts(int(flow), int(partitions), int(steps), job_executions, len(ids))

    def _held_excluded(self, criteria: PurgeCriteria) -> int:
        """Held instances the criteria would otherwise offer (all of them, not bounded)."""
        statuses = [status.value for status in criteria.statuses]
        executions = models.JobExecution.objects.using(self._using)
        held = models.JobInstance.objects.using(self._using).filter(hold_placed_at__isnull=False)
        if criteria.job_name is not None:
            held = held.filter(job_name=criteria.job_name)
        return (
            held.filter(Exists(executions.filter(job_instance_id=OuterRef("pk"))))
            .exclude(
                Exists(
                    executions.filter(job_instance_id=OuterRef("pk")).filter(
                        ~Q(status__in=statuses)
                        | Q(ended_at__isnull=True)
                        | Q(ended_at__gte=criteria.cutoff)
                    )
                )
            )
            .count()
        )

    @operation
    def apply_purge(self, plan: PurgePlan, *, min_age: timedelta) -> PurgeCounts:
        """Delete the plan's instances and everything they own, or nothing.

        Recomputes the digest (an edited plan → ``RetentionPlanStale``), checks
        the cutoff's age (``AgeBoundTooSmall``), locks the candidate instances and
        then their executions ``FOR NO KEY UPDATE`` (so a concurrent restart,
        hold or execution change is waited for, and none can start) and
        re-checks the full eligibility of every candidate; any change →
        ``RetentionPlanStale`` and nothing deleted.
        Then one DELETE per table, child before parent — the failure details
        and the skip ledger first (counted with nothing: they are part of their
        executions). 9 statements for any non-empty batch; an empty plan issues
        none.
        """
        if plan.computed_digest() != plan.plan_digest:
            raise RetentionPlanStale()
        plan.criteria.check_age(self.now(), min_age)
        if not plan.candidates:
            self._record(events.PurgeApplied(counts=PurgeCounts()))
            return PurgeCounts()
        ids = sorted(plan.instance_ids)
        if stale_candidates(plan, self._lock_and_observe(plan, ids)):
            raise RetentionPlanStale()
        self._delete_owned(models.FailureDetail, "job_instance_id", ids)
        self._delete_owned(models.Skip, "job_instance_id", ids)
        deleted = {
            kind: self._delete_owned(
                model, "id" if kind == "job_instances" else "job_instance_id", ids
            )
            for kind, model in PURGE_ORDER
        }
        counts = PurgeCounts(**deleted)
        self._record(events.PurgeApplied(counts=counts))
        return counts

    def _lock_and_observe(self, plan: PurgePlan, ids: Sequence[int]) -> dict[int, InstanceState]:
        """Lock what the re-check reads, in the documented lock order: the
        instances in id order, then their executions in (instance, id) order —
        each read after its lock is granted, so a restart, a hold or a change to
        a finished execution (an abandon, an exit enrichment) that committed
        while the apply waited is seen."""
        table = self._connection.ops.quote_name(models.JobInstance._meta.db_table)
        where, params = self._in("id", ids)
        instances = self._fetch(
            "SELECT id, job_name, CASE WHEN hold_placed_at IS NULL THEN 0 ELSE 1 END "  # nosec B608 # ids bound
            f"FROM {table} WHERE {where} ORDER BY id{self._lock_clause()}",
            params,
        )
        executions = self._executions_of(ids, plan.criteria, lock=True)
        return {
            instance_id: InstanceState(job_name, held == 1, executions.get(instance_id, []))
            for instance_id, job_name, held in instances
        }

    def _delete_owned(
        self, model: type[django_models.Model], column: str, ids: Sequence[int]
    ) -> int:
        """One set-based DELETE (no collector, no signals); the deleted row count."""
        table = self._connection.ops.quote_name(model._meta.db_table)
        where, params = self._in(column, ids)
        with self._connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM {table} WHERE {where}", params)  # nosec B608 # quoted; ids bound
            return int(cursor.rowcount)

    # -- audit pruning ---------------------------------------------------------

    @operation
    def prune_audit(self, before: datetime, *, limit: int) -> dict[str, int]:
        """Delete up to ``limit`` of the oldest rows older than ``before`` from each
        audit table, through ``AuditQuerySet.prune()``. On PostgreSQL the append-only
        trigger lets the deletes through only with ``oxide_batch.audit_prune`` on,
        set for this transaction alone."""
        if self._connection.vendor == "postgresql":
            with self._connection.cursor() as cursor:
                cursor.execute("SET LOCAL oxide_batch.audit_prune = 'on'")
        pruned = {}
        for name, model, column in AUDIT_TABLES:
            manager = model._default_manager.using(self._using)
            oldest = (
                manager.filter(**{f"{column}__lt": before})
                .order_by(column, "id")
                .values("id")[:limit]
            )
            pruned[name] = manager.filter(id__in=oldest).prune()
        self._record(events.AuditPruned(counts=tuple(pruned.items())))
        return pruned

    @operation
    def record_purge_failure(self, *, outcome: str, candidates: int, job_name: str | None) -> int:
        """The ``purge.failed`` outbox event of a batch that failed (issue 41):
        its id. Written by the caller after the batch rolled back, in a work of
        its own, so the event survives the failure it tells of."""
        event_id = outbox.write_purge_failed_event(
            self._using,
            outcome=outcome,
            candidates=candidates,
            job_name=job_name,
            now=self.now(),
        )
        self._record(
            events.PurgeFailureRecorded(outcome=outcome, candidates=candidates, event_id=event_id)
        )
        return event_id

    @operation
    def count_prunable_audit(self, before: datetime) -> dict[str, int]:
        """How many audit rows per table are older than ``before`` (reads only)."""
        return {
            name: model._default_manager.using(self._using)
            .filter(**{f"{column}__lt": before})
            .count()
            for name, model, column in AUDIT_TABLES
        }
