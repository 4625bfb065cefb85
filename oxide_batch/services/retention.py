"""Retention use cases: holds, the two-phase purge and audit pruning (SPEC §2.5, §9).

Each call is its own unit of work. Holds and purge batches are audited and
idempotent like operator requests: the request digest (never the actor)
decides — the same ``(action, operation_id)`` and digest replays the recorded
outcome and nothing acts twice; another digest is ``operation_id_conflict``.
Not-found and conflicts are not audited.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from oxide_batch.domain.durations import parse_duration
from oxide_batch.domain.errors import (
    ConcurrentModification,
    OperationIdConflict,
    RetentionPlanStale,
)
from oxide_batch.domain.identifiers import IdentifierKind, validate_identifier
from oxide_batch.domain.retention import (
    DEFAULT_PURGE_REASON,
    MAX_BATCH_BOUND,
    AgeBoundTooSmall,
    BatchBoundOutOfRange,
    PurgeCounts,
    PurgeCriteria,
    PurgePlan,
    RetentionAction,
    RetentionHold,
    RetentionRecord,
    RetentionRecordDraft,
    format_instant,
    purge_statuses,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.observability import reporting
from oxide_batch.repository import DjangoJobRepository, JobRepository, UnitOfWork
from oxide_batch.services.audit import (
    Actor,
    Outcome,
    request_digest,
    validate_operation_id,
    validate_reason_code,
)

# Audit rows must outlive the metadata they describe: pruning younger rows is refused.
AUDIT_PRUNE_MIN_AGE = timedelta(days=1)
MAX_RESURVEYS = 3


@dataclass(frozen=True)
class RetentionResult:
    """``{outcome, changed, operation_id, hold | counts, record}`` (SPEC §9)."""

    outcome: Outcome
    changed: bool
    operation_id: str
    record: RetentionRecord
    hold: RetentionHold | None = None
    counts: PurgeCounts | None = None

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "outcome": self.outcome.value,
            "changed": self.changed,
            "operation_id": self.operation_id,
        }
        if self.record.action is RetentionAction.APPLY_PURGE:
            document["counts"] = (self.counts or PurgeCounts()).as_dict()
        else:
            document["hold"] = None if self.hold is None else self.hold.to_json()
        document["record"] = self.record.to_json()
        return document


@dataclass(frozen=True)
class AuditPruneResult:
    cutoff: datetime
    dry_run: bool
    counts: dict[str, int]
    batches: int

    def to_json(self) -> dict[str, Any]:
        return {
            "cutoff": format_instant(self.cutoff),
            "dry_run": self.dry_run,
            "counts": dict(self.counts),
            "batches": self.batches,
        }


def _hold_from_record(record: RetentionRecord) -> RetentionHold | None:
    if record.action is not RetentionAction.HOLD or record.job_instance_id is None:
        return None
    return RetentionHold(
        record.job_instance_id,
        record.actor,
        record.reason_code,
        record.applied_at,
        record.actor_user_id,
    )


class RetentionService:
    """Holds, purge survey/apply and audit pruning on one repository."""

    def __init__(
        self, repository: JobRepository | None = None, *, min_age: timedelta | None = None
    ) -> None:
        """``min_age`` defaults to the setting ``OXIDE_BATCH_PURGE_MIN_AGE``, read
        at each call (so tests may override it)."""
        self.repository: JobRepository = repository or DjangoJobRepository()
        self._min_age = min_age

    @property
    def min_age(self) -> timedelta:
        if self._min_age is not None:
            return self._min_age
        value = getattr(settings, "OXIDE_BATCH_PURGE_MIN_AGE", timedelta(hours=1))
        return parse_duration(value) if isinstance(value, str) else value

    def now(self) -> datetime:
        """The repository clock's instant."""
        with self.repository.begin() as uow:
            return uow.now()

    # -- holds ----------------------------------------------------------------

    def hold(self, instance_id: int) -> RetentionHold | None:
        with self.repository.begin() as uow:
            return uow.job_instance_hold(instance_id)

    def place_hold(
        self, instance_id: int, *, actor: Actor, reason_code: str, operation_id: str
    ) -> RetentionResult:
        """Place or replace the instance's hold, audited. ``JobInstanceNotFound``."""
        return self._hold_action(
            RetentionAction.HOLD, instance_id, actor, reason_code, operation_id
        )

    def release_hold(
        self, instance_id: int, *, actor: Actor, reason_code: str, operation_id: str
    ) -> RetentionResult:
        """Release the hold (``changed`` false when none was held), audited."""
        return self._hold_action(
            RetentionAction.RELEASE_HOLD, instance_id, actor, reason_code, operation_id
        )

    def _hold_action(
        self,
        action: RetentionAction,
        instance_id: int,
        actor: Actor,
        reason_code: str,
        operation_id: str,
    ) -> RetentionResult:
        validate_identifier(IdentifierKind.JOB_INSTANCE, instance_id)
        validate_reason_code(reason_code)
        validate_operation_id(operation_id)
        digest = request_digest(
            action=action.value, target=f"instance:{instance_id}", reason_code=reason_code
        )

        def act(uow: UnitOfWork) -> tuple[RetentionRecordDraft, RetentionHold | None]:
            if action is RetentionAction.HOLD:
                hold: RetentionHold | None = uow.place_instance_hold(
                    instance_id, actor, reason_code
                )
                changed = True
            else:
                changed = uow.release_instance_hold(instance_id) is not None
                hold = None
            draft = self._draft(action, operation_id, actor, reason_code, digest, changed)
            return dataclasses.replace(draft, job_instance_id=instance_id), hold

        return self._audited(action, operation_id, digest, act)

    # -- purge ----------------------------------------------------------------

    def survey(
        self,
        *,
        cutoff: datetime | None = None,
        older_than: timedelta | None = None,
        job_name: str | None = None,
        statuses: Iterable[BatchStatus | str] | None = None,
        limit: int = MAX_BATCH_BOUND,
    ) -> PurgePlan:
        """One batch's plan (deletes nothing). Give ``cutoff`` or ``older_than``.
        ``AgeBoundTooSmall`` when the cutoff is younger than the minimum age;
        ``BatchBoundOutOfRange``, ``EmptyStatusSet``, ``NonTerminalStatus``."""
        if (cutoff is None) == (older_than is None):
            raise TypeError("survey() takes exactly one of cutoff and older_than")
        with self.repository.begin() as uow:
            if cutoff is None:
                assert older_than is not None
                cutoff = uow.now() - older_than
            criteria = PurgeCriteria(cutoff, job_name, purge_statuses(statuses), limit)
            return uow.purge_survey(criteria, min_age=self.min_age)

    def apply(
        self,
        plan: PurgePlan,
        *,
        actor: Actor,
        reason_code: str = DEFAULT_PURGE_REASON,
        operation_id: str,
    ) -> RetentionResult:
        """Delete the plan's instances and everything they own, and append one
        APPLY_PURGE record, in one transaction — or, when anything changed since
        the survey (or the plan was edited), ``RetentionPlanStale`` and nothing
        deleted. An empty plan applies with zero counts and is recorded."""
        validate_reason_code(reason_code)
        validate_operation_id(operation_id)
        action = RetentionAction.APPLY_PURGE
        digest = request_digest(
            action=action.value, target=f"plan:{plan.plan_digest}", reason_code=reason_code
        )

        def act(uow: UnitOfWork) -> tuple[RetentionRecordDraft, None]:
            counts = uow.apply_purge(plan, min_age=self.min_age)
            draft = self._draft(action, operation_id, actor, reason_code, digest, counts.total > 0)
            return dataclasses.replace(
                draft, plan_digest=plan.plan_digest, batch_bound=plan.criteria.bound, counts=counts
            ), None

        return self._audited(action, operation_id, digest, act)

    def purge_record(self, operation_id: str) -> RetentionRecord | None:
        """The APPLY_PURGE record of ``operation_id``, if that batch was applied."""
        with self.repository.begin() as uow:
            return uow.find_retention_record(RetentionAction.APPLY_PURGE, operation_id)

    # -- audit pruning ------------------------------------------------------------

    def prune_audit(
        self,
        *,
        older_than: timedelta,
        batch_size: int = MAX_BATCH_BOUND,
        dry_run: bool = False,
        between_batches: Callable[[dict[str, int]], None] | None = None,
    ) -> AuditPruneResult:
        """Delete recovery decisions, operator requests and retention records older
        than ``older_than`` (at least a day), oldest first, ``batch_size`` rows per
        table per transaction. ``dry_run`` only counts. Never part of a purge."""
        if older_than < AUDIT_PRUNE_MIN_AGE:
            raise AgeBoundTooSmall(minimum_seconds=int(AUDIT_PRUNE_MIN_AGE.total_seconds()))
        if not 1 <= batch_size <= MAX_BATCH_BOUND:
            raise BatchBoundOutOfRange(bound=batch_size)
        with self.repository.begin() as uow:
            cutoff = uow.now() - older_than
            if dry_run:
                return AuditPruneResult(cutoff, True, uow.count_prunable_audit(cutoff), 0)
        totals: dict[str, int] = {}
        for batch in itertools.count(1):
            with self.repository.begin() as uow:
                pruned = uow.prune_audit(cutoff, limit=batch_size)
                uow.commit()
            totals = {name: totals.get(name, 0) + count for name, count in pruned.items()}
            if between_batches is not None:
                between_batches(pruned)
            if all(count < batch_size for count in pruned.values()):
                return AuditPruneResult(cutoff, False, totals, batch)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- shared ---------------------------------------------------------------

    @staticmethod
    def _draft(
        action: RetentionAction,
        operation_id: str,
        actor: Actor,
        reason_code: str,
        digest: str,
        changed: bool,
    ) -> RetentionRecordDraft:
        return RetentionRecordDraft(
            action=action,
            operation_id=operation_id,
            actor=actor.reference,
            actor_user_id=actor.user_id,
            reason_code=reason_code,
            request_digest=digest,
            changed=changed,
        )

    def _audited(
        self,
        action: RetentionAction,
        operation_id: str,
        digest: str,
        act: Callable[[UnitOfWork], tuple[RetentionRecordDraft, RetentionHold | None]],
    ) -> RetentionResult:
        """Probe for a recorded outcome first (a replay is detected before anything
        is re-validated), else act and append the record in one transaction. A
        concurrent identical request that recorded first is answered as a replay."""
        with self.repository.begin() as uow:
            recorded = uow.find_retention_record(action, operation_id)
            if recorded is None:
                draft, hold = act(uow)
                record = uow.append_retention_record(draft)
                if record is not None:
                    uow.commit()
                    return RetentionResult(
                        Outcome.APPLIED, record.changed, operation_id, record, hold, record.counts
                    )
        if recorded is None:  # lost the race: our effect was rolled back
            with self.repository.begin() as uow:
                recorded = uow.find_retention_record(action, operation_id)
            if recorded is None:
                raise ConcurrentModification()
        if recorded.request_digest != digest:
            raise OperationIdConflict(action=action.value, operation_id=operation_id)
        reporting.retention_replayed(recorded)
        return RetentionResult(
            Outcome.REPLAYED,
            recorded.changed,  # the recorded outcome, as operator replays answer
            operation_id,
            recorded,
            _hold_from_record(recorded),
            recorded.counts,
        )


# --------------------------------------------------------------- batched purge loop


@dataclass(frozen=True)
class PurgeBatch:
    """One batch of a purge run: applied now, or replayed from an earlier run."""

    number: int
    result: RetentionResult
    resurveys: int = 0

    def to_json(self) -> dict[str, Any]:
        record = self.result.record
        return {
            "number": self.number,
            "operation_id": self.result.operation_id,
            "outcome": self.result.outcome.value,
            "counts": record.counts.as_dict(),
            "plan_digest": record.plan_digest,
            "record_id": record.id,
            "resurveys": self.resurveys,
        }


@dataclass
class PurgeRun:
    """Survey → apply, batch after batch, until nothing eligible is left.

    Batch ``n`` runs under operation id ``<operation_id>:<n>``. A rerun with the
    same operation id resumes: batches already recorded are answered as replays
    (their reason must match, else ``OperationIdConflict``) and the loop goes on
    with the next number. A stale plan (or a lost lock race) is re-surveyed at
    most ``max_resurveys`` times in a row, then the error propagates. Committed
    batches stay whatever happens later.
    """

    service: RetentionService
    criteria: PurgeCriteria
    actor: Actor
    operation_id: str
    reason_code: str = DEFAULT_PURGE_REASON
    max_resurveys: int = MAX_RESURVEYS
    between_batches: Callable[[], None] | None = None
    counts: PurgeCounts = field(default_factory=PurgeCounts)
    held_excluded: int = 0
    resurveys: int = 0
    batches: list[PurgeBatch] = field(default_factory=list)

    def __iter__(self) -> Iterator[PurgeBatch]:
        for number in itertools.count(1):
            if number > 1 and self.between_batches is not None:
                self.between_batches()
            batch = self._batch(number)
            if batch is None:
                return
            self.batches.append(batch)
            self.counts = self.counts.plus(batch.result.record.counts)
            yield batch

    def _batch(self, number: int) -> PurgeBatch | None:
        batch_id = f"{self.operation_id}:{number}"
        recorded = self.service.purge_record(batch_id)
        if recorded is not None:
            if recorded.reason_code != self.reason_code:
                raise OperationIdConflict(action=recorded.action.value, operation_id=batch_id)
            reporting.retention_replayed(recorded)
            replayed = RetentionResult(
                Outcome.REPLAYED, recorded.changed, batch_id, recorded, None, recorded.counts
            )
            return PurgeBatch(number, replayed)
        for attempt in itertools.count():
            plan = self.service.survey(
                cutoff=self.criteria.cutoff,
                job_name=self.criteria.job_name,
                statuses=self.criteria.statuses,
                limit=self.criteria.bound,
            )
            self.held_excluded = plan.held_excluded
            if not plan.candidates:
                return None
            try:
                result = self.service.apply(
                    plan, actor=self.actor, reason_code=self.reason_code, operation_id=batch_id
                )
            except (RetentionPlanStale, ConcurrentModification):
                if attempt >= self.max_resurveys:
                    raise
                self.resurveys += 1
                continue
            return PurgeBatch(number, result, attempt)
        raise AssertionError("unreachable")  # pragma: no cover
