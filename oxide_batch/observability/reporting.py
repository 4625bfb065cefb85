"""What the operator and retention services report themselves: proposals and
replays — the facts no repository write makes true (nothing is committed), so
they are said at once. Applied and rejected requests are reported by the
repository observer when their audit row commits. Never raises."""

from __future__ import annotations

from oxide_batch.domain.evidence import RecoveryProposal
from oxide_batch.domain.operator import OperatorRecord
from oxide_batch.domain.retention import RetentionAction, RetentionRecord
from oxide_batch.observability import events, metrics
from oxide_batch.observability.observer import operator_fields, retention_fields, safely


def recovery_proposed(proposal: RecoveryProposal) -> None:
    """A recovery proposal was computed (its evidence digest is never logged)."""

    def say() -> None:
        evidence = proposal.evidence
        events.emit(
            "recovery.proposed",
            {
                "job_execution_id": evidence.job_execution_id,
                "attempt": evidence.attempt,
                "status": evidence.status.value,
                "version": evidence.version,
                "eligible": proposal.eligible,
                "ineligible_reason": proposal.reason_code,
                "unknown_commit": proposal.unknown_commit,
                "outcome": "eligible" if proposal.eligible else "ineligible",
            },
        )

    safely(say)


def operator_replayed(record: OperatorRecord) -> None:
    """An operator request was answered from its audit row (an applied outcome
    or a refusal replayed as the same problem)."""

    def say() -> None:
        metrics.OPERATOR_REQUESTS.labels(record.action.value, "replayed").inc()
        events.emit("operator.request.replayed", {**operator_fields(record), "outcome": "replayed"})

    safely(say)


def retention_replayed(record: RetentionRecord) -> None:
    """A hold, release or purge batch was answered from its audit row."""

    def say() -> None:
        metrics.OPERATOR_REQUESTS.labels(record.action.value, "replayed").inc()
        if record.action is RetentionAction.APPLY_PURGE:
            metrics.PURGE_BATCHES.labels("replayed").inc()
        events.emit(
            "operator.request.replayed", {**retention_fields(record), "outcome": "replayed"}
        )

    safely(say)
