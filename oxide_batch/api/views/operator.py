"""Operator actions on an execution: the recovery proposal, recover, stop,
abandon (audited and idempotent: :mod:`.base`)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import deps
from oxide_batch.api import serializers as s
from oxide_batch.api.schema import endpoint
from oxide_batch.api.throttling import THROTTLED
from oxide_batch.api.views.base import READ, REPLAY_DOC, BatchView, actor_of
from oxide_batch.roles import ABANDON_EXECUTION, RECOVER_EXECUTION, STOP_EXECUTION, VIEW_BATCH
from oxide_batch.selectors.executions import with_extras
from oxide_batch.services.operator import OperatorResult


def operator_response(result: OperatorResult, *, recover: bool = False) -> Response:
    """An operator service's result with the execution it names as the API shows
    it now (``None``: a replay after the execution was purged)."""
    execution = None if result.execution is None else with_extras(result.execution)
    return Response(s.operator_data(result, execution, recover=recover))


class RecoveryProposalView(BatchView):
    required_permissions = READ
    job_scoped = False  # an operator endpoint (contract §4.1)

    @endpoint(
        operation_id="get_recovery_proposal",
        summary="The execution's recovery proposal: evidence, eligibility, evidence digest",
        description=(
            "200 even when not eligible (`eligible: false` with `reason_code` "
            "`recovery_not_allowed` or `execution_not_stale`). Send `version` and "
            "`evidence_digest` back to recover."
        ),
        permission=VIEW_BATCH,
        ok={200: s.RecoveryProposalOutput},
        errors={404: ("job_execution_not_found",)},
        path_ids=True,
        tags=["operator"],
    )
    def get(self, request: Request, execution_id: int) -> Response:
        proposal = deps.operator_service().propose(execution_id)
        return Response(s.RecoveryProposalOutput(proposal).data)


class RecoverView(BatchView):
    required_permissions = {"POST": RECOVER_EXECUTION}
    job_scoped = False  # an operator endpoint (contract §4.1)

    @endpoint(
        operation_id="recover_execution",
        summary="Audited recovery: MARK_FAILED (restartable) or ABANDON",
        description=(
            "The proposal is recomputed as the recovery applies, atomically with it; "
            "checked in order: "
            "`stale_version`, `recovery_not_allowed`, `execution_not_stale`, "
            "`recovery_evidence_stale`, `unresolved_recovery_required` (an unknown "
            "commit is marked FAILED only with the reason `UNKNOWN_EFFECT`). An active "
            "execution is eligible once its owner's lease expired (claimed) or once "
            "inactive past the stale threshold (unclaimed); earlier only with `override` "
            "and an `override_note`. " + REPLAY_DOC
        ),
        permission=RECOVER_EXECUTION,
        request=s.RecoverInput,
        ok={200: s.RecoverResponseOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "stale_version",
                "version_ahead",
                "recovery_not_allowed",
                "execution_not_stale",
                "recovery_evidence_stale",
                "unresolved_recovery_required",
                "operation_id_conflict",
                "concurrent_modification",
                "invalid_transition_time",
                "version_exhausted",
            ),
            **THROTTLED,
        },
        body=True,
        path_ids=True,
        tags=["operator"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        command = self.read(s.RecoverInput, request.data).to_domain()
        result = deps.operator_service().recover(
            execution_id,
            expected_version=command.expected_version,
            disposition=command.disposition,
            reason_code=command.reason_code,
            evidence_digest=command.evidence_digest,
            actor=actor_of(request),
            operation_id=command.operation_id,
            failure_category=command.failure_category,
            failure_id=command.failure_id,
            override_note=command.override_note,
        )
        return operator_response(result, recover=True)


class StopView(BatchView):
    required_permissions = {"POST": STOP_EXECUTION}
    job_scoped = False  # an operator endpoint (contract §4.1)

    @endpoint(
        operation_id="stop_execution",
        summary="Durable stop request",
        description=(
            "STARTING/STARTED: records who and when (status and version unchanged; the "
            "owner's next control observation moves it to STOPPING). STOPPING or "
            "finished: a no-op (`changed: false`, no version check). UNKNOWN: "
            "`invalid_state`. " + REPLAY_DOC
        ),
        permission=STOP_EXECUTION,
        request=s.StopInput,
        ok={200: s.OperatorResponseOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "stale_version",
                "version_ahead",
                "invalid_state",
                "operation_id_conflict",
                "concurrent_modification",
            ),
            **THROTTLED,
        },
        body=True,
        path_ids=True,
        tags=["operator"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        expected, operation_id = self.read(s.StopInput, request.data).to_domain()
        result = deps.operator_service().stop(
            execution_id,
            expected_version=expected,
            actor=actor_of(request),
            operation_id=operation_id,
        )
        return operator_response(result)


class AbandonView(BatchView):
    required_permissions = {"POST": ABANDON_EXECUTION}
    job_scoped = False  # an operator endpoint (contract §4.1)

    @endpoint(
        operation_id="abandon_execution",
        summary="Abandon a STOPPED or FAILED attempt (the instance never runs again)",
        description=(
            "ABANDONED already: a no-op (`changed: false`, no version check); any other "
            "status: `invalid_state`. " + REPLAY_DOC
        ),
        permission=ABANDON_EXECUTION,
        request=s.AbandonInput,
        ok={200: s.OperatorResponseOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "stale_version",
                "version_ahead",
                "invalid_state",
                "operation_id_conflict",
                "concurrent_modification",
                "version_exhausted",
            ),
            **THROTTLED,
        },
        body=True,
        path_ids=True,
        tags=["operator"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        expected, reason_code, operation_id = self.read(s.AbandonInput, request.data).to_domain()
        result = deps.operator_service().abandon(
            execution_id,
            expected_version=expected,
            reason_code=reason_code,
            actor=actor_of(request),
            operation_id=operation_id,
        )
        return operator_response(result)
