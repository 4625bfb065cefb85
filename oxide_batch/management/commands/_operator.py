"""What the operator commands share: the service, and JSON renderings of
executions, proposals and operator outcomes (the same facts the API shows)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import JobExecutionNotFound
from oxide_batch.domain.evidence import ExecutionView, RecoveryProposal
from oxide_batch.domain.execution import JobExecution
from oxide_batch.domain.failures import failure_url
from oxide_batch.domain.worker import worker_data
from oxide_batch.selectors.executions import execution_view
from oxide_batch.services import bootstrap
from oxide_batch.services.operator import OperatorResult, OperatorService


def service() -> OperatorService:
    return bootstrap.operator_service()


def instant(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_instant(text: str) -> datetime:
    """An instant as :func:`instant` writes it, read back."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def execution_json(view: ExecutionView, owner_user: str | None = None) -> dict[str, Any]:
    """An execution as the API shows it (without counts and definition):
    ``last_activity_at`` is contract §2.5.3's activity, ``updated_at`` the row's last
    versioned write, ``lease_ttl_seconds`` the TTL its owner's claim was granted
    (null without an owner) and ``lease_expires_at`` its owner's lease expiry
    (contract §2.5.3, that TTL after that activity; null without an owner or once
    not active) — derived from the view, no further query. ``worker`` is who
    runs it (decision 310), with ``owner_user`` (the claimant's username) when
    the caller read it."""
    core = view.execution
    return {
        "id": core.id,
        "job_instance_id": core.job_instance_id,
        "job_name": core.job_name,
        "attempt": core.attempt,
        "status": core.status.value,
        "exit_code": core.exit_code,
        "version": core.version,
        "created_at": instant(core.created_at),
        "started_at": instant(core.started_at),
        "ended_at": instant(core.ended_at),
        "updated_at": instant(core.updated_at),
        "failure": (
            {
                "category": core.failure.category.value,
                "failure_id": core.failure.failure_id,
                # "Open the logs" (decision 316), as the API's failure object says it.
                "logs_url": failure_url(
                    batch_settings.FAILURE_URL_TEMPLATE,
                    failure_id=core.failure.failure_id,
                    execution_id=core.id,
                    job_name=core.job_name,
                    host=None if view.worker is None else view.worker.host,
                    started_at=core.started_at,
                    ended_at=core.ended_at,
                ),
            }
            if core.failure
            else None
        ),
        "stop_requested": view.stop_requested,
        "stop_requested_at": instant(view.stop_requested_at),
        "owner_recorded": view.owner_recorded,
        "last_observed_at": instant(view.last_observed_at),
        "last_activity_at": instant(view.activity_at),
        # The lease its claim was granted (contract §2.5.3), whatever this
        # process's OXIDE_BATCH_LEASE_TTL says; null without an owner.
        "lease_ttl_seconds": int(view.granted_ttl(batch_settings.LEASE_TTL).total_seconds())
        if view.owner_recorded
        else None,
        "lease_expires_at": instant(view.lease_expires_at(batch_settings.LEASE_TTL)),
        "worker": worker_data(view.worker, owner_user),
    }


def current_view(execution: JobExecution | None) -> ExecutionView | None:
    """The execution an operator result names, read again with its stop, owner
    and activity evidence (``None``: purged, as in a replay after a purge)."""
    if execution is None:
        return None
    try:
        return execution_view(execution.id)
    except JobExecutionNotFound:
        return None


def proposal_json(proposal: RecoveryProposal) -> dict[str, Any]:
    """The proposal as the API shows it: ``eligibility`` says why eligible
    (``reason_code`` why not), ``rule`` what decides an active execution
    (``lease`` with an owner, else ``inactivity``; null otherwise) and
    ``threshold_seconds`` the inactivity that rule waits for."""
    evidence = proposal.evidence.encoded()
    return {
        "eligible": proposal.eligible,
        "last_activity_at": instant(proposal.evidence.activity_at),
        "reason_code": proposal.reason_code,
        "eligibility": None if proposal.eligibility is None else proposal.eligibility.value,
        "rule": proposal.rule,
        "inactive_seconds": int(proposal.inactive_for.total_seconds()),
        "threshold_seconds": int(proposal.threshold.total_seconds()),
        "lease_ttl_seconds": int(proposal.lease_ttl.total_seconds()),
        "lease_expires_at": instant(proposal.lease_expires_at),
        "evidence": evidence,
        "evidence_digest": proposal.evidence_digest,
    }


def result_json(result: OperatorResult) -> dict[str, Any]:
    record = result.record
    view = current_view(result.execution)
    document: dict[str, Any] = {
        "outcome": result.outcome.value,
        "changed": result.changed,
        "operation_id": result.operation_id,
        # None: a replay after the execution was purged.
        "execution": None if view is None else execution_json(view),
        "record": {
            "id": record.id,
            "action": record.action.value,
            "operation_id": record.operation_id,
            "actor": record.actor,
            "outcome": record.outcome.value,
            "prior_status": record.prior_status.value if record.prior_status else None,
            "result_status": record.result_status.value if record.result_status else None,
            "requested_at": instant(record.requested_at),
        },
    }
    if result.decision is not None:
        document["decision"] = {
            "id": result.decision.id,
            "prior_status": result.decision.prior_status.value,
            "resulting_status": result.decision.resulting_status.value,
            "reason_code": result.decision.reason_code,
            "actor": result.decision.operator_reference,
            # The operator request that made it: this one.
            "operation_id": result.operation_id,
            "evidence_digest_prefix": result.decision.evidence_digest.hex()[:12],
            # Why it was allowed; ``override``: only the operator's override did.
            "eligibility": result.decision.eligibility,
            "override": result.decision.overridden,
            "override_note": result.decision.override_note,
            "resolved_step_ids": list(result.decision.resolved_step_ids),
        }
    return document


def add_execution_target(
    parser: CommandParser, *, reason: bool = False, required: bool = True
) -> None:
    """The execution argument, ``--expected-version`` and (``reason``) ``--reason``;
    ``required=False``: the command checks them itself (a mode that needs neither)."""
    parser.add_argument("execution_id", type=int, help="the job execution")
    parser.add_argument(
        "--expected-version", type=int, required=required, help="the version you observed"
    )
    if reason:
        parser.add_argument("--reason", required=required, help="reason code, e.g. WORKER_LOST")
