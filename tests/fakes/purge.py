"""The purge and audit pruning in the fake (the port's ``Purge``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from oxide_batch.domain.errors import RetentionPlanStale
from oxide_batch.domain.retention import (
    InstanceState,
    ObservedExecution,
    PurgeCandidate,
    PurgeCounts,
    PurgeCriteria,
    PurgePlan,
    stale_candidates,
)
from tests.fakes.base import UnitOfWorkBase
from tests.fakes.tables import by_id


class PurgeOperations(UnitOfWorkBase):
    """The purge and audit pruning in the fake (the port's ``Purge``)."""

    # -- Purge ----------------------------------------------------------------------

    def purge_survey(self, criteria: PurgeCriteria, *, min_age: timedelta) -> PurgePlan:
        """The adapter's survey over the stored rows: the oldest eligible instances
        (by their latest end, then id), at most the bound."""
        criteria.check_age(self.now(), min_age)
        eligible: list[tuple[datetime, int, PurgeCandidate]] = []
        held = 0
        for row in self._open().instances.values():
            if criteria.job_name is not None and row.instance.job_name != criteria.job_name:
                continue
            executions = [r.execution for r in self._executions_of(row.instance.id)]
            ends = [e.ended_at for e in executions]
            if not executions or not all(
                e.status in criteria.statuses and e.ended_at is not None for e in executions
            ):
                continue
            latest_end = max(end for end in ends if end is not None)
            if latest_end >= criteria.cutoff:
                continue
            if row.hold is not None:
                held += 1
                continue
            observed = tuple(
                ObservedExecution(e.id, e.version) for e in sorted(executions, key=by_id)
            )
            eligible.append(
                (latest_end, row.instance.id, PurgeCandidate(row.instance.id, observed))
            )
        eligible.sort(key=lambda found: (found[0], found[1]))
        candidates = tuple(found[2] for found in eligible[: criteria.bound])
        return PurgePlan(
            criteria=criteria,
            candidates=candidates,
            counts=self._purge_counts({c.instance_id for c in candidates}),
            held_excluded=held,
        )

    def apply_purge(self, plan: PurgePlan, *, min_age: timedelta) -> PurgeCounts:
        if plan.computed_digest() != plan.plan_digest:
            raise RetentionPlanStale()
        plan.criteria.check_age(self.now(), min_age)
        if not plan.candidates:
            return PurgeCounts()
        tables, cutoff = self._open(), plan.criteria.cutoff
        observed = {}
        for pk in plan.instance_ids:
            row = tables.instances.get(pk)
            if row is None:
                continue
            observed[pk] = InstanceState(
                row.instance.job_name,
                row.hold is not None,
                [
                    (e.id, e.version, e.status, e.ended_at is not None and e.ended_at < cutoff)
                    for e in sorted((r.execution for r in self._executions_of(pk)), key=by_id)
                ],
            )
        if stale_candidates(plan, observed):
            raise RetentionPlanStale()
        ids = set(plan.instance_ids)
        counts = self._purge_counts(ids)
        details = tables.failure_details  # with their executions, counted with nothing
        for pk in [pk for pk, row in details.items() if row.job_instance_id in ids]:
            del details[pk]
        for table, instance_of in self._instance_tables():
            for pk in [pk for pk, row in table.items() if instance_of(row) in ids]:
                del table[pk]
        return counts

    def _instance_tables(self) -> tuple[tuple[dict[int, Any], Callable[[Any], int]], ...]:
        """Every table of an instance's rows, children first, with the row's instance."""
        tables = self._open()
        return (
            (tables.flow_decisions, lambda row: row.job_instance_id),
            (tables.partitions, lambda row: row.partition.job_instance_id),
            (tables.steps, lambda row: row.job_instance_id),
            (tables.executions, lambda row: row.execution.job_instance_id),
            (tables.instances, lambda row: row.instance.id),
        )

    def _purge_counts(self, ids: set[int]) -> PurgeCounts:
        """The rows of each kind the instances ``ids`` hold, in deletion order."""
        return PurgeCounts(
            *(
                sum(1 for row in table.values() if instance_of(row) in ids)
                for table, instance_of in self._instance_tables()
            )
        )

    def _audit_rows(
        self, before: datetime
    ) -> dict[str, list[tuple[datetime, int, dict[int, Any]]]]:
        tables = self._open()
        sources: tuple[tuple[str, dict[int, Any], str], ...] = (
            ("recovery_decisions", tables.decisions, "decided_at"),
            ("operator_requests", tables.operator_requests, "requested_at"),
            ("retention_records", tables.retention_records, "applied_at"),
        )
        return {
            name: sorted(
                (getattr(row, column), pk, rows)
                for pk, row in rows.items()
                if getattr(row, column) < before
            )
            for name, rows, column in sources
        }

    def prune_audit(self, before: datetime, *, limit: int) -> dict[str, int]:
        pruned = {}
        for name, found in self._audit_rows(before).items():
            for _, pk, rows in found[:limit]:
                del rows[pk]
            pruned[name] = len(found[:limit])
        return pruned

    def record_purge_failure(self, *, outcome: str, candidates: int, job_name: str | None) -> int:
        failures = self._open().purge_failures
        failures.append((outcome, candidates, job_name))
        return len(failures)

    def count_prunable_audit(self, before: datetime) -> dict[str, int]:
        return {name: len(found) for name, found in self._audit_rows(before).items()}
