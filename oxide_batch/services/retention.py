"""Retention use cases: holds, the two-phase purge and audit pruning (contract §2.5.10–§2.5.12).

Each call is its own unit of work. Holds and purge batches are audited and
idempotent like operator requests: the request digest (never the actor)
decides — the same ``(action, operation_id)`` and digest replays the recorded
outcome and nothing acts twice; another digest is ``operation_id_conflict``.
Not-found and conflicts are not audited.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from oxide_batch.conf import batch_settings
from oxide_batch.domain import events
from oxide_batch.domain.errors import (
    ConcurrentModification,
    OperationIdConflict,
    OxideBatchError,
    RetentionPlanStale,
    rebuild_error,
)
from oxide_batch.domain.names import IdentifierKind, validate_identifier
from oxide_batch.domain.operator import RecordOutcome
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
from oxide_batch.repository import hooks
from oxide_batch.repository.port import (
    AdminHistory,
    Holds,
    Purge,
    Transaction,
    UnitOfWorkFactory,
)
from oxide_batch.services.audit import (
    Actor,
    Outcome,
    is_rule_refusal,
    request_digest,
    validate_operation_id,
    validate_reason_code,
)

# Audit rows must outlive the metadata they describe: pruning younger rows is refused.
logger = logging.getLogger(__name__)
AUDIT_PRUNE_MIN_AGE = timedelta(days=1)
MAX_RESURVEYS = 3
# Recorded attempts of one purge batch read back per query on a resume.
ATTEMPT_WINDOW = 8


@dataclass(frozen=True)
class RetentionResult:
    """``{outcome, changed, operation_id, hold | counts, record}`` (contract §2.5.9)."""

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


def hold_history_message(record: RetentionRecord) -> str:
    """The admin history's line of an applied hold or release."""
    audit = f"retention record #{record.id} ({record.operation_id})"
    if record.action is RetentionAction.HOLD:
        return f"Hold placed, reason {record.reason_code}; {audit}"
    if not record.changed:
        return f"Hold release: none was held, reason {record.reason_code}; {audit}"
    return f"Hold released, reason {record.reason_code}; {audit}"


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


class RetentionWork(Transaction, Holds, Purge, AdminHistory, Protocol):
    """What the retention use cases use of the repository port: holds, the
    retention audit, the purge and audit pruning, and the admin history."""


class RetentionService:
    """Holds, purge survey/apply and audit pruning on one repository. Built by
    :func:`oxide_batch.services.bootstrap.retention_service`."""

    def __init__(
        self, repository: UnitOfWorkFactory[RetentionWork], *, min_age: timedelta | None = None
    ) -> None:
        """``min_age`` defaults to the setting ``OXIDE_BATCH_PURGE_MIN_AGE``, read
        at each call (so tests may override it)."""
        self.repository = repository
        self._min_age = min_age

    @property
    def min_age(self) -> timedelta:
        if self._min_age is not None:
            return self._min_age
        return batch_settings.PURGE_MIN_AGE

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

        draft = dataclasses.replace(
            self._draft(action, operation_id, actor, reason_code, digest),
            job_instance_id=instance_id,
        )

        def act(uow: RetentionWork) -> tuple[RetentionRecordDraft, RetentionHold | None]:
            if action is RetentionAction.HOLD:
                hold: RetentionHold | None = uow.place_instance_hold(
                    instance_id, actor, reason_code
                )
                changed = True
            else:
                changed = uow.release_instance_hold(instance_id) is not None
                hold = None
            return dataclasses.replace(draft, changed=changed), hold

        return self._audited(draft, act)

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
        requested: Mapping[str, Any] | None = None,
    ) -> RetentionResult:
        """Delete the plan's instances and everything they own, and append one
        APPLY_PURGE record, in one transaction — or, when anything changed since
        the survey (or the plan was edited), ``RetentionPlanStale``, nothing
        deleted and a REJECTED record (a replay answers the same problem). An
        empty plan applies with zero counts and is recorded.

        The request digest covers the plan digest, the reason and the criteria:
        ``requested`` (a purge run's criteria as the operator gave them) or
        else the plan's own (:func:`purge_request_digest`)."""
        validate_reason_code(reason_code)
        validate_operation_id(operation_id)
        action = RetentionAction.APPLY_PURGE
        digest = purge_request_digest(
            plan.plan_digest,
            reason_code,
            plan.criteria.to_json() if requested is None else requested,
        )
        legacy = legacy_purge_request_digest(plan.plan_digest, reason_code)
        draft = dataclasses.replace(
            self._draft(action, operation_id, actor, reason_code, digest),
            plan_digest=plan.plan_digest,
            batch_bound=plan.criteria.bound,
        )

        failures: list[events.PurgeBatchFailed] = []  # a batch that failed, not one refused

        def act(uow: RetentionWork) -> tuple[RetentionRecordDraft, None]:
            try:
                counts = uow.apply_purge(plan, min_age=self.min_age)
            except Exception as error:
                code = getattr(error, "code", "database_error")
                failed = events.PurgeBatchFailed(outcome=code, candidates=len(plan.candidates))
                hooks.report(failed)
                if not _refused(error):
                    failures.append(failed)
                raise
            return dataclasses.replace(draft, changed=counts.total > 0, counts=counts), None

        try:
            return self._audited(draft, act, also_replays=legacy)
        finally:
            for failed in failures:
                self._notify_purge_failure(failed, plan.criteria.job_name)

    def _notify_purge_failure(self, failed: events.PurgeBatchFailed, job_name: str | None) -> None:
        """``purge.failed`` (issue 41) for a batch that failed, in a work of its
        own after the batch rolled back, so it outlives the failure. Best
        effort: a database that fails now leaves the error and the metric to tell."""
        try:
            with self.repository.begin() as uow:
                uow.record_purge_failure(
                    outcome=failed.outcome, candidates=failed.candidates, job_name=job_name
                )
                uow.commit()
        except Exception:  # the batch's own error is the one to raise, not this one
            logger.warning("the purge.failed event of a failed batch was not written")

    def purge_records(self, operation_ids: Sequence[str]) -> dict[str, RetentionRecord]:
        """The APPLY_PURGE records (applied or rejected) of these operation ids."""
        with self.repository.begin() as uow:
            return uow.find_retention_records(RetentionAction.APPLY_PURGE, operation_ids)

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
    ) -> RetentionRecordDraft:
        return RetentionRecordDraft(
            action=action,
            operation_id=operation_id,
            actor=actor.reference,
            actor_user_id=actor.user_id,
            reason_code=reason_code,
            request_digest=digest,
            changed=False,
        )

    def _audited(
        self,
        draft: RetentionRecordDraft,
        act: Callable[[RetentionWork], tuple[RetentionRecordDraft, RetentionHold | None]],
        *,
        also_replays: str | None = None,
    ) -> RetentionResult:
        """Probe for a recorded outcome first (a replay is detected before anything
        is re-validated), else act and append the record in one transaction.

        A refusal by a rule rolls the effect back and is recorded REJECTED (with
        the problem's code and fields) in its own transaction, then raised; not
        found, lost races and infrastructure failures are not recorded. A
        concurrent identical request that recorded first is answered as a replay.
        ``draft`` is the record as a refusal would leave it; ``also_replays`` a
        digest the same request was recorded under before schema version 4."""
        action, operation_id = draft.action, draft.operation_id
        try:
            with self.repository.begin() as uow:
                recorded = uow.find_retention_record(action, operation_id)
                if recorded is None:
                    done, hold = act(uow)
                    record = uow.append_retention_record(done)
                    if record is not None:
                        if record.job_instance_id is not None:  # a hold or a release
                            uow.record_admin_history(
                                actor=record.actor,
                                user_id=record.actor_user_id,
                                target="jobinstance",
                                object_id=record.job_instance_id,
                                message=hold_history_message(record),
                            )
                        uow.commit()
                        return RetentionResult(
                            Outcome.APPLIED,
                            record.changed,
                            operation_id,
                            record,
                            hold,
                            record.counts,
                        )
        except OxideBatchError as error:
            if not is_rule_refusal(error):
                raise
            # A concurrent identical request may have won (its effect is why ours
            # was refused): then ours is a replay of it, not a refusal.
            recorded = self._find(action, operation_id)
            if recorded is None:
                if self._reject(draft, error):
                    raise
                recorded = self._find(action, operation_id)
        if recorded is None:  # lost the race: our effect was rolled back
            recorded = self._find(action, operation_id)
            if recorded is None:
                raise ConcurrentModification()
        return self._replay(recorded, draft.request_digest, also_replays)

    def _find(self, action: RetentionAction, operation_id: str) -> RetentionRecord | None:
        with self.repository.begin() as uow:
            return uow.find_retention_record(action, operation_id)

    def _reject(self, draft: RetentionRecordDraft, error: OxideBatchError) -> bool:
        """Record a refusal in its own transaction; ``False`` when another request
        with the operation id was recorded first (the caller replays it)."""
        rejected = dataclasses.replace(
            draft,
            outcome=RecordOutcome.REJECTED,
            rejection_code=error.code,
            rejection_details=error.details(),
        )
        with self.repository.begin() as uow:
            if uow.append_retention_record(rejected) is None:
                return False
            uow.commit()
        return True

    @staticmethod
    def _replay(recorded: RetentionRecord, digest: str, also: str | None = None) -> RetentionResult:
        """The recorded outcome (a refusal as the same problem, ``replayed``),
        or ``OperationIdConflict`` when the digest differs."""
        if recorded.request_digest not in (digest, also):
            raise OperationIdConflict(
                action=recorded.action.value, operation_id=recorded.operation_id
            )
        hooks.report(events.RetentionRequestReplayed(record=recorded))
        if recorded.outcome is RecordOutcome.REJECTED:
            assert recorded.rejection_code is not None
            error = rebuild_error(recorded.rejection_code, recorded.rejection_details or {})
            error.replayed = True  # type: ignore[attr-defined]
            raise error
        return RetentionResult(
            Outcome.REPLAYED,
            recorded.changed,  # the recorded outcome, as operator replays answer
            recorded.operation_id,
            recorded,
            _hold_from_record(recorded),
            recorded.counts,
        )


def legacy_purge_request_digest(plan_digest: str, reason_code: str) -> str:
    """The apply digest recorded before schema version 4 (plan and reason only):
    a request recorded then still replays, as it did (its criteria were not
    recorded, so they cannot be compared)."""
    return request_digest(
        action=RetentionAction.APPLY_PURGE.value,
        target=f"plan:{plan_digest}",
        reason_code=reason_code,
    )


def purge_request_digest(plan_digest: str, reason_code: str, criteria: Mapping[str, Any]) -> str:
    """The request digest of one purge apply: the plan, the reason and the
    criteria (contract §2.5.11: a purge run's criteria belong to its request digest, so
    a rerun under the same operation id with other criteria is a conflict)."""
    return request_digest(
        action=RetentionAction.APPLY_PURGE.value,
        target=f"plan:{plan_digest}",
        reason_code=reason_code,
        arguments={"criteria": dict(criteria)},
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

    Batch ``n`` runs under operation id ``<operation_id>:<n>``; a stale plan is
    recorded REJECTED under its attempt's id, and the re-surveyed plan is applied
    under the next one, ``<operation_id>:<n>.r1``, ``.r2``, … A plan re-surveyed
    more than ``max_resurveys`` times in a row propagates the error.

    A rerun with the same operation id resumes: the recorded attempts of each
    batch are read back (one query per batch); an applied one is answered as a
    replay and the loop goes on with the next number. Each recorded attempt must
    be of this run — the same criteria (``requested``: the criteria as the
    operator gave them, e.g. an age rather than the instant it gave; the
    cutoff, job, statuses and bound by default) and reason — else
    ``OperationIdConflict`` before anything is deleted. Committed batches stay
    whatever happens later.
    """

    service: RetentionService
    criteria: PurgeCriteria
    actor: Actor
    operation_id: str
    reason_code: str = DEFAULT_PURGE_REASON
    max_resurveys: int = MAX_RESURVEYS
    between_batches: Callable[[], None] | None = None
    requested: Mapping[str, Any] | None = None
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

    @property
    def _requested(self) -> Mapping[str, Any]:
        return self.criteria.to_json() if self.requested is None else self.requested

    def attempt_id(self, number: int, attempt: int) -> str:
        """The operation id of batch ``number``'s ``attempt`` (0: the first)."""
        batch_id = f"{self.operation_id}:{number}"
        return batch_id if attempt == 0 else f"{batch_id}.r{attempt}"

    def _batch(self, number: int) -> PurgeBatch | None:
        first_free = 0
        while True:  # the attempts an earlier run recorded, a window at a time
            ids = [self.attempt_id(number, first_free + i) for i in range(ATTEMPT_WINDOW)]
            recorded = self.service.purge_records(ids)
            for batch_id in ids:
                record = recorded.get(batch_id)
                if record is None:
                    break
                self._check_same_run(record)
                if record.outcome is RecordOutcome.APPLIED:
                    hooks.report(events.RetentionRequestReplayed(record=record))
                    replayed = RetentionResult(
                        Outcome.REPLAYED, record.changed, batch_id, record, None, record.counts
                    )
                    return PurgeBatch(number, replayed)
                first_free += 1
            else:
                continue
            break
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
                    plan,
                    actor=self.actor,
                    reason_code=self.reason_code,
                    operation_id=self.attempt_id(number, first_free),
                    requested=self._requested,
                )
            except (RetentionPlanStale, ConcurrentModification) as error:
                if isinstance(error, RetentionPlanStale):
                    first_free += 1  # that attempt is recorded REJECTED
                if attempt >= self.max_resurveys:
                    raise
                self.resurveys += 1
                continue
            return PurgeBatch(number, result, attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _check_same_run(self, record: RetentionRecord) -> None:
        """``OperationIdConflict`` unless ``record`` was made with this run's
        criteria and reason (its digest recomputed with its own plan digest)."""
        assert record.plan_digest is not None
        expected = purge_request_digest(record.plan_digest, self.reason_code, self._requested)
        legacy = legacy_purge_request_digest(record.plan_digest, self.reason_code)
        if record.request_digest not in (expected, legacy):
            raise OperationIdConflict(action=record.action.value, operation_id=record.operation_id)


def _refused(error: Exception) -> bool:
    """A purge batch refused (a plan found stale, an age bound, a lost race —
    the next run surveys again), not failed: no ``purge.failed`` event."""
    return isinstance(error, OxideBatchError) and (
        is_rule_refusal(error) or isinstance(error, ConcurrentModification)
    )
