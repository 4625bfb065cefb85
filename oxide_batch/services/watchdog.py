"""The watchdog: recovers executions whose owner's lease expired (contract §2.5.7).

A claimed execution's owner holds a lease that expires ``OXIDE_BATCH_LEASE_TTL``
after its latest activity. A pass of the watchdog reads the claimed, active
executions silent longer than that
(:func:`~oxide_batch.selectors.unresolved.expired_lease_candidates`),
their recovery proposals in one read, and applies to each one still eligible
because its lease expired the operator's own audited recovery:
``MARK_FAILED`` (so the job can be restarted) with the reason ``LEASE_EXPIRED``,
the default category (``STALE_RECOVERED``), the watchdog as its actor and an
operation id derived from the execution and its evidence digest
(``watchdog:<id>:<digest prefix>``). So several watchdogs at once make one
decision per execution and the others replay it, while changed evidence (the
worker wrote in between) gets a new operation id on the next pass instead of a
permanent conflict. The recovery resolves the execution's unfinished steps
and fences the worker, as any recovery does.

It never acts on an execution whose proposal carries the unknown-commit marker
(an UNKNOWN execution, a failure category UNKNOWN_COMMIT, a latest step
UNKNOWN): its effect may have happened, and only a human's ``UNKNOWN_EFFECT``
decision resolves it. Such an execution is reported once per change of its
evidence, not on every pass (``WatchdogAction.repeated`` marks the passes that
saw it unchanged). It recovers at most ``limit`` executions per pass.

Time the database was unreachable never counts against a worker
(:class:`Holdoff`): after a start, and after every outage of the database the
watchdog saw (a pass that failed to reach it), it waits one full TTL after it
reaches the database again before it recovers anything, so live workers that
were retrying have renewed their leases by then; a database server that
started less than one TTL ago (a restart, a failover) holds it off as well.
"""

from __future__ import annotations

import enum
import re
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    ConcurrentModification,
    NotFound,
    OxideBatchError,
    Unavailable,
)
from oxide_batch.domain.evidence import Eligibility, RecoveryProposal
from oxide_batch.domain.failures import WATCHDOG_ACTOR_PREFIX
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.repository.claims import WorkerRecoveryOperations, WorkerRecoveryOutcome
from oxide_batch.selectors.unresolved import expired_lease_candidates, expired_worker_candidates
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.deadlines import Deadlines, RaisedAlarm
from oxide_batch.services.operator import OperatorService

#: The reason code of the watchdog's decisions.
LEASE_EXPIRED = "LEASE_EXPIRED"
#: How many hex characters of the evidence digest its operation ids carry.
DIGEST_PREFIX = 16
#: Failure ids are 1 … 2^63−1.
MAX_FAILURE_ID = 2**63 - 1
#: Candidates read per query (a pass reads pages until ``limit`` are recovered).
PAGE = 100
_ACTOR_CHARACTERS = re.compile(r"[^A-Za-z0-9._:@-]")


def watchdog_actor(host: str | None = None) -> Actor:
    """The watchdog's audited actor: ``watchdog@<host>`` (the host name reduced
    to the actor character set), so the audit says which watchdog decided."""
    name = _ACTOR_CHARACTERS.sub("-", host or socket.gethostname()) or "localhost"
    return Actor(f"{WATCHDOG_ACTOR_PREFIX}{name}"[:128])


def operation_id(proposal: RecoveryProposal) -> str:
    """``watchdog:<execution id>:<evidence digest prefix>``: one per execution and
    evidence, whichever watchdog asks."""
    return f"watchdog:{proposal.job_execution_id}:{proposal.evidence_digest[:DIGEST_PREFIX]}"


class ActionKind(enum.StrEnum):
    """What a pass did with one candidate."""

    RECOVERED = "recovered"  # this watchdog's decision applied
    REPLAYED = "replayed"  # another watchdog decided it first: the same decision
    REFUSED = "refused"  # a rule refused it (the worker wrote in between): audited
    SKIPPED = "skipped"  # left alone: unknown commit, or no longer expired
    WOULD_RECOVER = "would_recover"  # --dry-run


@dataclass(frozen=True)
class WatchdogAction:
    """One candidate's outcome; ``detail`` is a refusal's code or why it was skipped."""

    job_execution_id: int
    kind: ActionKind
    operation_id: str | None = None
    decision_id: int | None = None
    lease_expired_at: datetime | None = None
    detail: str | None = None
    # Left to a human and already reported with the same evidence by an earlier
    # pass of this watchdog: nothing new to say.
    repeated: bool = False
    # A claimed partition worker's recovery (issue 43): its worker step; the
    # decision is then an ``ob_worker_recovery`` row.
    worker_step_execution_id: int | None = None


@dataclass(frozen=True)
class PassReport:
    """One pass: when, whether it was held off (and until when), what it did."""

    at: datetime
    holding_until: datetime | None = None
    actions: tuple[WatchdogAction, ...] = ()
    alarms: tuple[RaisedAlarm, ...] = ()

    def count(self, kind: ActionKind) -> int:
        return sum(1 for action in self.actions if action.kind is kind)


class Watchdog:
    """Passes over the expired leases, acting through ``service`` (its clock,
    lease TTL and stale threshold are the watchdog's)."""

    def __init__(
        self,
        service: OperatorService,
        *,
        actor: Actor | None = None,
        limit: int = 100,
        dry_run: bool = False,
        deadlines: Deadlines | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.service = service
        self.deadlines = deadlines or Deadlines(clock=service.repository.clock)
        self.actor = actor or watchdog_actor()
        self.limit = limit
        self.dry_run = dry_run
        # Executions left to a human by the last pass: id → its evidence digest.
        self._left_to_human: dict[int, str] = {}

    @property
    def lease_ttl(self) -> timedelta:
        return self.service.lease_ttl

    def now(self) -> datetime:
        return self.service.repository.clock.now()

    def run_pass(self) -> PassReport:
        """One pass: recover (or, with ``dry_run``, list) up to ``limit``
        executions whose lease expired, then raise the run deadlines' events
        due (``execution.overdue``, ``job.missing``; none in a dry run —
        ``services/deadlines.py``). Raises what the repository raises when
        the database cannot be reached (``Unavailable``, …)."""
        now = self.now()
        actions: list[WatchdogAction] = []
        left: dict[int, str] = {}
        acted = 0
        after = 0
        while acted < self.limit:
            page = expired_lease_candidates(
                now=now, lease_ttl=self.lease_ttl, after_id=after, limit=PAGE
            )
            if not page:
                break
            after = page[-1]
            for proposal in self.service.propose_many(page).values():
                if acted >= self.limit:
                    break
                action = self._consider(proposal, left)
                actions.append(action)
                if action.kind is not ActionKind.SKIPPED:
                    acted += 1
        acted += self._recover_workers(now, actions, self.limit - acted)
        # One that is no longer left to a human (resolved, purged) is said again
        # if it comes back.
        self._left_to_human = left
        alarms = () if self.dry_run else tuple(self.deadlines.raise_due(now=now, limit=self.limit))
        return PassReport(at=now, actions=tuple(actions), alarms=alarms)

    def _recover_workers(self, now: datetime, actions: list[WatchdogAction], budget: int) -> int:
        """Claimed partition workers whose own lease expired (issue 43, decision
        465): each one's worker step FAILED, its partition claimable again (or,
        over the retry limit, the parent failed), audited in ``ob_worker_recovery``.
        Appends the actions; returns how many acted (at most ``budget``)."""
        acted = 0
        after = 0
        while acted < budget:
            page = expired_worker_candidates(
                now=now, lease_ttl=self.lease_ttl, after_id=after, limit=PAGE
            )
            if not page:
                break
            after = page[-1][0]
            for worker_id, execution_id in page:
                if acted >= budget:
                    break
                action = self._consider_worker(worker_id, execution_id)
                actions.append(action)
                if action.kind is not ActionKind.SKIPPED:
                    acted += 1
        return acted

    def _consider_worker(self, worker_id: int, execution_id: int) -> WatchdogAction:
        if self.dry_run:
            return WatchdogAction(
                execution_id, ActionKind.WOULD_RECOVER, worker_step_execution_id=worker_id
            )
        try:
            with self.service.repository.begin() as uow:
                workers = cast(WorkerRecoveryOperations, uow)
                result = workers.recover_partition_worker(
                    worker_id,
                    actor=self.actor.reference,
                    reason_code=LEASE_EXPIRED,
                    failure_id=secrets.randbelow(MAX_FAILURE_ID) + 1,
                )
                uow.commit()
        except (NotFound, ConcurrentModification) as error:
            return WatchdogAction(
                execution_id, ActionKind.SKIPPED, detail=error.code,
                worker_step_execution_id=worker_id,
            )  # fmt: skip
        record = result.record
        if result.outcome is WorkerRecoveryOutcome.SKIPPED or record is None:
            return WatchdogAction(
                execution_id, ActionKind.SKIPPED, detail=result.detail,
                worker_step_execution_id=worker_id,
            )  # fmt: skip
        kind = (
            ActionKind.REPLAYED
            if result.outcome is WorkerRecoveryOutcome.REPLAYED
            else ActionKind.RECOVERED
        )
        expired = datetime.fromisoformat(str(record.evidence["lease_expired_at"]))
        return WatchdogAction(
            execution_id,
            kind,
            decision_id=record.id,
            lease_expired_at=expired,
            detail="parent_failed" if record.parent_failed else None,
            worker_step_execution_id=worker_id,
        )

    def _consider(
        self, proposal: RecoveryProposal, left: dict[int, str] | None = None
    ) -> WatchdogAction:
        """One candidate's action; ``left`` collects the pass's executions left
        to a human (with their evidence digest)."""
        left = {} if left is None else left
        pk = proposal.job_execution_id
        expired_at = proposal.lease_expires_at
        if proposal.unknown_commit:
            # Its effect may have happened: a human decides (UNKNOWN_EFFECT).
            left[pk] = proposal.evidence_digest
            repeated = self._left_to_human.get(pk) == proposal.evidence_digest
            return WatchdogAction(pk, ActionKind.SKIPPED, lease_expired_at=expired_at,
                                  detail="unknown_commit", repeated=repeated)  # fmt: skip
        if proposal.eligibility is not Eligibility.LEASE_EXPIRED:
            # The owner wrote since the candidates were read (or it is not owned).
            return WatchdogAction(pk, ActionKind.SKIPPED, detail="lease_not_expired")
        operation = operation_id(proposal)
        if self.dry_run:
            return WatchdogAction(pk, ActionKind.WOULD_RECOVER, operation, None, expired_at)
        try:
            result = self.service.recover(
                pk,
                expected_version=proposal.version,
                disposition=RecoveryDisposition.MARK_FAILED,
                reason_code=LEASE_EXPIRED,
                evidence_digest=proposal.evidence_digest,
                actor=self.actor,
                operation_id=operation,
            )
        except (NotFound, ConcurrentModification) as error:
            # Purged meanwhile, or a lost race: the next pass reads it again.
            return WatchdogAction(pk, ActionKind.SKIPPED, operation, detail=error.code)
        except (Unavailable, CommitOutcomeUnknown):
            raise  # the database is away: the pass stops, the watchdog holds off
        except OxideBatchError as error:
            # A rule refused it (audited REJECTED, or replayed as such): the
            # evidence moved under the pass; the next pass reads it again.
            return WatchdogAction(pk, ActionKind.REFUSED, operation, None, expired_at,
                                  error.code)  # fmt: skip
        kind = ActionKind.REPLAYED if result.outcome is Outcome.REPLAYED else ActionKind.RECOVERED
        decision = None if result.decision is None else result.decision.id
        return WatchdogAction(pk, kind, operation, decision, expired_at)


@dataclass
class Holdoff:
    """When the watchdog may act (contract §2.5.7: time the database was unreachable
    never counts against a worker). It holds off for one ``ttl`` after it
    started (it cannot know what it missed), after every outage it saw (from
    the first pass that reached the database again), and while the database
    server itself has been up for less than one ``ttl``."""

    ttl: timedelta
    now: Callable[[], datetime]
    until: datetime | None = None
    why: str | None = None
    in_outage: bool = False

    def started(self) -> None:
        self.until, self.why = self.now() + self.ttl, "started"

    def unreachable(self) -> None:
        """A pass could not reach the database."""
        self.in_outage = True

    def reached(self, *, server_up_for: timedelta | None = None) -> datetime | None:
        """A pass reached the database: ``None`` when the watchdog may act now,
        else until when it holds off. ``server_up_for``: how long the database
        server has been running (``None`` when unknown)."""
        now = self.now()
        if self.in_outage:
            self.in_outage = False
            self.until, self.why = now + self.ttl, "reconnected"
        if server_up_for is not None and server_up_for < self.ttl:
            until = now + (self.ttl - server_up_for)
            if self.until is None or until > self.until:
                self.until, self.why = until, "database_started"
        if self.until is not None and now < self.until:
            return self.until
        return None
