"""Retention: holds and the two-phase purge (audited and idempotent: :mod:`.base`)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import deps
from oxide_batch.api import serializers as s
from oxide_batch.api.schema import endpoint
from oxide_batch.api.serializers.base import at
from oxide_batch.api.throttling import THROTTLED
from oxide_batch.api.views.base import REPLAY_DOC, BatchView, actor_of
from oxide_batch.roles import HOLD_INSTANCE, PURGE_METADATA


class HoldView(BatchView):
    required_permissions = {"PUT": HOLD_INSTANCE, "DELETE": HOLD_INSTANCE}
    job_scoped = False  # an operator endpoint (contract §4.1)

    @endpoint(
        operation_id="place_hold",
        summary="Place (or replace) the instance's retention hold",
        description=(
            "A held instance is never purged; holds never block lifecycle actions. " + REPLAY_DOC
        ),
        permission=HOLD_INSTANCE,
        request=s.HoldInput,
        ok={200: s.HoldResponseOutput},
        errors={
            404: ("job_instance_not_found",),
            409: ("operation_id_conflict", "concurrent_modification"),
            **THROTTLED,
        },
        body=True,
        path_ids=True,
        tags=["retention"],
    )
    def put(self, request: Request, instance_id: int) -> Response:
        reason_code, operation_id = self.read(s.HoldInput, request.data).to_domain()
        result = deps.retention_service().place_hold(
            instance_id, actor=actor_of(request), reason_code=reason_code, operation_id=operation_id
        )
        return Response(s.retention_data(result))

    @endpoint(
        operation_id="release_hold",
        summary="Release the instance's retention hold",
        description="Succeeds when none is held (`changed: false`). " + REPLAY_DOC,
        permission=HOLD_INSTANCE,
        request=s.HoldInput,
        ok={200: s.HoldResponseOutput},
        errors={
            404: ("job_instance_not_found",),
            409: ("operation_id_conflict", "concurrent_modification"),
            **THROTTLED,
        },
        body=True,
        path_ids=True,
        tags=["retention"],
    )
    def delete(self, request: Request, instance_id: int) -> Response:
        reason_code, operation_id = self.read(s.HoldInput, request.data).to_domain()
        result = deps.retention_service().release_hold(
            instance_id, actor=actor_of(request), reason_code=reason_code, operation_id=operation_id
        )
        return Response(s.retention_data(result))


class PurgeSurveyView(BatchView):
    required_permissions = {"POST": PURGE_METADATA}
    job_scoped = False  # an operator endpoint (contract §4.1)

    @endpoint(
        operation_id="survey_purge",
        summary="Survey one purge batch (deletes nothing)",
        description=(
            "Whole instances, oldest first, at most `limit`: no hold, no active or "
            "UNKNOWN execution, every execution in `statuses`, the latest ended before "
            "`ended_before` (at least OXIDE_BATCH_PURGE_MIN_AGE ago, else "
            "`invalid_request`). Hand the answer back whole to `purge/apply`."
        ),
        permission=PURGE_METADATA,
        request=s.SurveyInput,
        ok={200: s.PurgePlanOutput},
        errors=THROTTLED,
        body=True,
        tags=["retention"],
    )
    def post(self, request: Request) -> Response:
        command = self.read(s.SurveyInput, request.data).to_domain()
        with at("ended_before"):  # the age check is the one left for the service
            plan = deps.retention_service().survey(
                cutoff=command.cutoff,
                job_name=command.job_name,
                statuses=command.statuses,
                limit=command.limit,
            )
        return Response(s.PurgePlanOutput(plan.to_json()).data)


class PurgeApplyView(BatchView):
    required_permissions = {"POST": PURGE_METADATA}
    job_scoped = False  # an operator endpoint (contract §4.1)

    @endpoint(
        operation_id="apply_purge",
        summary="Apply a surveyed purge plan (all or nothing)",
        description=(
            "Every candidate is re-checked as the purge applies, atomically with it "
            "(the instances, then their executions: full eligibility, versions, holds) "
            "and the plan digest "
            "recomputed: any change is `retention_plan_stale`, nothing is deleted and "
            "the refusal is recorded (a REJECTED retention record; a new survey needs a "
            "new operation id). An empty plan applies with zero counts. One retention "
            "record per batch; its request digest covers the plan, the reason and the "
            "criteria. " + REPLAY_DOC
        ),
        permission=PURGE_METADATA,
        request=s.PurgeApplyInput,
        ok={200: s.PurgeApplyResponseOutput},
        errors={
            409: ("retention_plan_stale", "operation_id_conflict", "concurrent_modification"),
            **THROTTLED,
        },
        body=True,
        tags=["retention"],
    )
    def post(self, request: Request) -> Response:
        plan, reason_code, operation_id = self.read(s.PurgeApplyInput, request.data).to_domain()
        with at("plan"):  # the plan's age check is the one left for the service
            result = deps.retention_service().apply(
                plan, actor=actor_of(request), reason_code=reason_code, operation_id=operation_id
            )
        return Response(s.retention_data(result))
