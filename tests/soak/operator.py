"""The operator thread of the soak: stop requests on running executions, audited
recovery of crashed ones (proposal → recover with its evidence digest),
abandons, holds and releases — plus deliberate replays (same operation id and
request: must answer REPLAYED and act once) and operation-id conflicts (same
id, another request: must be refused and not audited)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oxide_batch.client import ApiError, HoldOutcome, OperatorOutcome
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    ConcurrentModification,
    LifecycleError,
    NotFound,
    OperationIdConflict,
    OxideBatchError,
    RepositoryError,
    Unavailable,
)
from oxide_batch.domain.recovery import RecoveryDisposition
from tests.soak.clients import MeteredOperator, error_code
from tests.soak.ledger import (
    APPLIED,
    EXECUTION,
    NOT_AUDITED,
    REJECTED,
    REPLAYED,
    Ledger,
    OperatorEntry,
)

OPERATION_PREFIX = "soak-op-"
OPERATOR_AUDIT, RETENTION_AUDIT = "operator", "retention"
Answer = OperatorOutcome | HoldOutcome
Send = Callable[[str], Answer]
# contract §2.5.9: not-found, operation-id conflicts and infrastructure failures
# leave no audit row; every other refusal by a rule is recorded as REJECTED.
UNAUDITED_ERRORS = (
    NotFound,
    OperationIdConflict,
    ConcurrentModification,
    CommitOutcomeUnknown,
    Unavailable,
)


def audited_refusal(error: BaseException) -> bool:
    """Whether the server must have recorded this refusal: a rule's refusal of an
    operator or a retention request (contract §2.5.9; no rule refuses a hold today)."""
    return isinstance(error, (LifecycleError, RepositoryError)) and not isinstance(
        error, UNAUDITED_ERRORS
    )


@dataclass(frozen=True)
class Sent:
    """An audited request, kept to be replayed (``send``) or contradicted (``alter``)."""

    audit: str
    kind: str
    target: int
    operation_id: str
    send: Send
    alter: Send
    outcome: str
    code: str | None
    record_id: Any


class OperatorActor:
    def __init__(
        self,
        client: MeteredOperator,
        ledger: Ledger,
        *,
        deadline: float,
        seed: int,
        recover_stale_after: int | None,
    ) -> None:
        self.client = client
        self.ledger = ledger
        self.deadline = deadline
        self.rng = random.Random(seed)
        # Only a run longer than the stale threshold can see a dropped execution go stale.
        self.recover_stale_after = recover_stale_after
        self.sequence = 0
        self.history: list[Sent] = []
        self.held: set[int] = set()
        self.actions: list[tuple[Callable[[], None], int]] = [
            (self.stop, 30),
            (self.recover, 20),
            (self.abandon, 8),
            (self.hold, 12),
            (self.release, 10),
            (self.replay, 12),
            (self.conflict, 4),
        ]

    def run(self) -> None:
        actions, weights = zip(*self.actions, strict=True)
        while time.monotonic() < self.deadline:
            action = self.rng.choices(actions, weights)[0]
            try:
                action()
            except (OxideBatchError, ApiError) as error:
                # A read (list, proposal) lost a race or failed; the call is in the ledger.
                self.ledger.notes[f"read refused: {error_code(error)}"] += 1
            time.sleep(self.rng.uniform(0.01, 0.06))

    # -- actions ------------------------------------------------------------------------

    def stop(self) -> None:
        # Now and then an UNKNOWN one: refused (invalid_state) and audited as REJECTED.
        statuses = ["UNKNOWN"] if self.rng.random() < 0.1 else ["STARTING", "STARTED"]
        running = self.client.executions_page(status=statuses, page_size=50)
        if not running:
            return
        target = self.rng.choice(running)
        self.perform(
            OPERATOR_AUDIT,
            "STOP",
            target.id,
            lambda op: self.client.stop(target.id, target.version, operation_id=op),
            lambda op: self.client.stop(target.id, target.version + 1000, operation_id=op),
        )

    def recover(self) -> None:
        candidates = self.client.executions_page(status=["UNKNOWN"], page_size=50)
        if self.recover_stale_after is not None:
            candidates += self.client.executions_page(
                unresolved_for=self.recover_stale_after, page_size=50
            )
        if not candidates:
            return
        proposal = self.client.proposal(self.rng.choice(candidates).id)
        if not proposal.eligible:
            self.ledger.notes[f"proposal ineligible: {proposal.reason_code}"] += 1
            return
        self.ledger.notes[f"recovery proposed for {proposal.status.value}"] += 1
        unknown_commit = bool(proposal.markers.get("unknown_commit"))
        disposition = (
            RecoveryDisposition.MARK_FAILED
            if self.rng.random() < 0.7
            else RecoveryDisposition.ABANDON
        )
        reason = "UNKNOWN_EFFECT" if unknown_commit else "WORKER_LOST"
        if unknown_commit and self.rng.random() < 0.25:
            reason = "WORKER_LOST"  # refused (unresolved_recovery_required) and audited

        def recover(reason_code: str) -> Send:
            return lambda op: self.client.recover(
                proposal, disposition=disposition, reason_code=reason_code, operation_id=op
            )

        self.perform(
            OPERATOR_AUDIT,
            "RECOVER",
            proposal.job_execution_id,
            recover(reason),
            recover("OTHER_REASON"),
        )

    def abandon(self) -> None:
        finished = self.client.executions_page(status=["FAILED", "STOPPED"], page_size=50)
        if not finished:
            return
        target = self.rng.choice(finished)

        def abandon(reason_code: str) -> Send:
            return lambda op: self.client.abandon(
                target.id, target.version, reason_code=reason_code, operation_id=op
            )

        self.perform(
            OPERATOR_AUDIT, "ABANDON", target.id, abandon("NOT_WORTH_RERUN"), abandon("OTHER")
        )

    def hold(self) -> None:
        instances = self.client.instances_page(page_size=100)
        if not instances:
            return
        target = self.rng.choice(instances).id

        def hold(reason_code: str) -> Send:
            return lambda op: self.client.hold(target, reason_code=reason_code, operation_id=op)

        if self.perform(RETENTION_AUDIT, "HOLD", target, hold("LEGAL_HOLD"), hold("AUDIT")):
            self.held.add(target)

    def release(self) -> None:
        if self.held and self.rng.random() < 0.8:
            target = self.rng.choice(sorted(self.held))
        else:  # releasing what is not held succeeds too (changed: false)
            instances = self.client.instances_page(page_size=100)
            if not instances:
                return
            target = self.rng.choice(instances).id

        def release(reason_code: str) -> Send:
            return lambda op: self.client.release(target, reason_code=reason_code, operation_id=op)

        if self.perform(
            RETENTION_AUDIT, "RELEASE_HOLD", target, release("HOLD_DONE"), release("OTHER")
        ):
            self.held.discard(target)

    def replay(self) -> None:
        """The same request again: the recorded outcome, nothing acts twice."""
        if not self.history:
            return
        sent = self.rng.choice(self.history)
        entry = OperatorEntry(
            sent.audit, sent.kind, sent.operation_id, sent.target, REPLAYED, None, "replay"
        )
        try:
            answer = sent.send(sent.operation_id)
        except (OxideBatchError, ApiError) as error:
            code = error_code(error)
            entry = OperatorEntry(
                sent.audit, sent.kind, sent.operation_id, sent.target, NOT_AUDITED, code, "replay"
            )
            if (code, getattr(error, "replayed", False)) == (sent.code, True):
                entry = OperatorEntry(
                    sent.audit, sent.kind, sent.operation_id, sent.target, REPLAYED, code, "replay"
                )
            elif not isinstance(error, NotFound):
                # A 404 is checked against the purged rows; anything else is wrong.
                self.ledger.anomaly(f"replay of {sent.operation_id} ({sent.outcome}) → {code}")
        else:
            if (answer.outcome, answer.replayed, answer.record.get("id")) != (
                REPLAYED,
                True,
                sent.record_id,
            ) or sent.outcome != APPLIED:
                self.ledger.anomaly(
                    f"replay of {sent.operation_id} ({sent.outcome}) → {answer.outcome} "
                    f"record {answer.record.get('id')} (recorded {sent.record_id})"
                )
        self.ledger.operator.append(entry)

    def conflict(self) -> None:
        """Another request under a used operation id: refused, not audited."""
        if not self.history:
            return
        sent = self.rng.choice(self.history)
        try:
            answer = sent.alter(sent.operation_id)
        except OperationIdConflict:
            code: str | None = OperationIdConflict.code
        except (OxideBatchError, ApiError) as error:
            code = error_code(error)
            self.ledger.anomaly(f"conflicting reuse of {sent.operation_id} → {code}")
        else:
            code = None
            self.ledger.anomaly(f"conflicting reuse of {sent.operation_id} → {answer.outcome}")
        self.ledger.operator.append(
            OperatorEntry(
                sent.audit, sent.kind, sent.operation_id, sent.target, NOT_AUDITED, code, "conflict"
            )
        )

    # -- the ledgered request --------------------------------------------------------------

    def perform(self, audit: str, kind: str, target: int, send: Send, alter: Send) -> bool:
        """Send a new request; ledger its outcome (and the version it produced).
        ``True`` when it applied."""
        self.sequence += 1
        operation_id = f"{OPERATION_PREFIX}{self.sequence}"
        try:
            answer = send(operation_id)
        except (OxideBatchError, ApiError) as error:
            code = error_code(error)
            outcome = REJECTED if audited_refusal(error) else NOT_AUDITED
            if getattr(error, "replayed", False):
                self.ledger.anomaly(f"a new operation id {operation_id} was answered as a replay")
            self.ledger.operator.append(
                OperatorEntry(audit, kind, operation_id, target, outcome, code)
            )
            if outcome == REJECTED:
                self.history.append(
                    Sent(audit, kind, target, operation_id, send, alter, outcome, code, None)
                )
            return False
        if answer.outcome != APPLIED:
            self.ledger.anomaly(f"a new operation id {operation_id} answered {answer.outcome}")
        if (
            isinstance(answer, OperatorOutcome)
            and answer.changed
            and kind != "STOP"
            and answer.execution is not None  # a new request always names its execution
        ):
            # Recover and abandon move the execution (version + 1); a stop never does.
            self.ledger.mutated(EXECUTION, answer.execution.id, answer.execution.version)
        self.ledger.operator.append(OperatorEntry(audit, kind, operation_id, target, APPLIED))
        self.history.append(
            Sent(audit, kind, target, operation_id, send, alter, APPLIED, None, answer.record["id"])
        )
        return True
