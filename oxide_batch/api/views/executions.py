"""Job executions: launch, list, read, and what a runtime does to its own
attempt (CAS transitions, exit status, ownership claims, control observations)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import render
from oxide_batch.api import serializers as s
from oxide_batch.api.fields import INSTANT_SCHEMA
from oxide_batch.api.filters import UNRESOLVED_FOR_SCHEMA, ExecutionFilter, apply_filters
from oxide_batch.api.permissions import may_see_payloads
from oxide_batch.api.schema import endpoint
from oxide_batch.api.shapes import name_schema
from oxide_batch.api.views.base import (
    PAGE_PARAMETERS,
    READ,
    READ_RUN,
    RUN,
    STATE_ERRORS,
    TRANSITION_ERRORS,
    BatchView,
    paginate,
)
from oxide_batch.domain.errors import JobInstanceNotFound
from oxide_batch.domain.fused import WriteControl
from oxide_batch.domain.names import NameKind
from oxide_batch.domain.status import BatchStatus
from oxide_batch.roles import RUN_BATCH, VIEW_BATCH
from oxide_batch.selectors.executions import (
    execution_record,
    execution_record_from_row,
    executions,
    with_extras,
)
from oxide_batch.selectors.failure_details import failure_detail
from oxide_batch.selectors.instances import instance_exists, instance_record
from oxide_batch.selectors.restart_plan import execution_restart_plan, plan_document

#: Why a new attempt (``POST instances/{id}/executions``, ``POST launches``) is refused.
NEW_ATTEMPT_CONFLICTS = (
    "completed_instance",
    "abandoned_instance",
    "execution_already_active",
    "lost_write_unresolved",
    "incompatible_definition",
    "definition_job_mismatch",
    "concurrent_modification",
)


class InstanceExecutionsView(BatchView):
    required_permissions = READ_RUN

    @endpoint(
        operation_id="list_instance_executions",
        summary="The instance's attempts, newest first",
        permission=VIEW_BATCH,
        ok={200: s.ExecutionPageOutput},
        errors={404: ("job_instance_not_found",)},
        path_ids=True,
        listing=True,
        parameters=PAGE_PARAMETERS,
        tags=["executions"],
    )
    def get(self, request: Request, instance_id: int) -> Response:
        queryset = executions().filter(job_instance_id=instance_id)
        paginator, rows = paginate(self, request, queryset)
        if not rows and not instance_exists(instance_id):
            raise JobInstanceNotFound(id=instance_id)
        records = [execution_record_from_row(row) for row in rows]
        return paginator.get_paginated_response(s.ExecutionOutput(records, many=True).data)

    @endpoint(
        operation_id="create_execution",
        summary="Launch or restart: a new attempt",
        description=(
            "Without `definition_digest` the attempt keeps the latest attempt's "
            "definition (the built-in legacy definition for a first attempt)."
        ),
        permission=RUN_BATCH,
        request=s.LaunchInput,
        ok={201: s.ExecutionOutput},
        errors={
            404: ("job_instance_not_found", "definition_not_found"),
            409: NEW_ATTEMPT_CONFLICTS,
        },
        body=True,
        path_ids=True,
        tags=["executions"],
    )
    def post(self, request: Request, instance_id: int) -> Response:
        digest = self.read(s.LaunchInput, request.data).to_domain()
        with self.unit_of_work() as uow:
            execution = uow.create_job_execution(instance_id, definition_digest=digest)
            record = with_extras(execution, uow, request.user)
            control = uow.write_control(execution.id)
            uow.commit()
        return Response(render.execution_write_data(record, control), status=http.HTTP_201_CREATED)


class ExecutionsView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="list_executions",
        summary="List job executions",
        description=(
            "Newest first (keyset pagination, no total count). `*_after` is inclusive, "
            "`*_before` exclusive."
        ),
        permission=VIEW_BATCH,
        ok={200: s.ExecutionPageOutput},
        listing=True,
        parameters=[
            OpenApiParameter(
                "status",
                str,
                many=True,
                enum=[status.value for status in BatchStatus],
                description="Repeatable.",
            ),
            OpenApiParameter("job_name", name_schema(NameKind.JOB)),
            OpenApiParameter("created_after", INSTANT_SCHEMA, description="RFC 3339 instant."),
            OpenApiParameter("created_before", INSTANT_SCHEMA, description="RFC 3339 instant."),
            OpenApiParameter("ended_after", INSTANT_SCHEMA, description="RFC 3339 instant."),
            OpenApiParameter("ended_before", INSTANT_SCHEMA, description="RFC 3339 instant."),
            OpenApiParameter(
                "unresolved_for",
                UNRESOLVED_FOR_SCHEMA,
                description=(
                    "Seconds (`900`) or a duration (`90s`, `15m`, `1h`, `30d`): UNKNOWN "
                    "executions, and active ones with no runtime write, owner observation "
                    "or step write for at least that long."
                ),
            ),
            *PAGE_PARAMETERS,
        ],
        tags=["executions"],
    )
    def get(self, request: Request) -> Response:
        queryset = self.scoped(apply_filters(ExecutionFilter, request, executions()))
        return self.page(request, queryset, s.ExecutionOutput, execution_record_from_row)


class ExecutionView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="get_execution",
        summary="One job execution",
        description=(
            "`failure.detail`: what the runtime said about the failure, as kept — every "
            "member for a payload reader (runtimes, operators), `type` alone for a viewer."
        ),
        permission=VIEW_BATCH,
        ok={200: s.ExecutionDetailOutput},
        errors={404: ("job_execution_not_found",)},
        path_ids=True,
        tags=["executions"],
    )
    def get(self, request: Request, execution_id: int) -> Response:
        data = render.execution_data(execution_record(execution_id))
        return Response(
            render.with_failure_detail(
                data, lambda: failure_detail(execution_id), full=may_see_payloads(request)
            )
        )


class ExecutionRestartPlanView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="get_execution_restart_plan",
        summary="What a restart will do, step by step",
        description=(
            "For each step the instance's attempts recorded (the newest row per step "
            "name), what the next attempt would do with it: `skip`, `rerun`, `resume` "
            "or `refuse`, decided by the launch's and step creation's own rules; for a "
            "flow plan also the step nodes not reached (`run`). An execution that "
            "cannot be restarted (not FAILED or STOPPED, or not its instance's latest "
            "attempt) answers `restartable: false` with the reason and no steps. No "
            "payload value is shown."
        ),
        permission=VIEW_BATCH,
        ok={200: s.RestartPlanOutput},
        errors={404: ("job_execution_not_found",)},
        path_ids=True,
        tags=["executions"],
    )
    def get(self, request: Request, execution_id: int) -> Response:
        return Response(plan_document(execution_restart_plan(execution_id)))


class ExecutionTransitionView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="transition_execution",
        summary="CAS transition of a job execution",
        description=(
            "The lifecycle table applies; a runtime cannot move a job execution to "
            "ABANDONED or out of UNKNOWN (`illegal_transition`): those are operator decisions. "
            "With `exit_code` the exit code is stored by the same write (version + 1). The "
            "answer carries the execution's `control` state."
        ),
        permission=RUN_BATCH,
        request=s.TransitionInput,
        ok={200: s.ExecutionOutput},
        errors={404: ("job_execution_not_found",), 409: TRANSITION_ERRORS},
        body=True,
        path_ids=True,
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        data = self.read(s.TransitionInput, request.data)
        expected, transition = data.to_domain()
        exit_code = data.exit_code_value()
        with self.unit_of_work(data.owner_token_value()) as uow:
            execution = uow.transition_job_execution(
                execution_id, expected, transition, by_runtime=True, exit_code=exit_code
            )
            record = with_extras(execution, uow, request.user)
            control = uow.write_control(execution_id)
            uow.commit()
        return Response(render.execution_write_data(record, control))


class ExecutionExitStatusView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="enrich_execution_exit_status",
        summary="CAS exit-status enrichment of a job execution",
        permission=RUN_BATCH,
        request=s.ExitStatusInput,
        ok={200: s.ExecutionOutput},
        errors={404: ("job_execution_not_found",), **STATE_ERRORS},
        body=True,
        path_ids=True,
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        data = self.read(s.ExitStatusInput, request.data)
        expected, exit_code = data.to_domain()
        with self.unit_of_work(data.owner_token_value()) as uow:
            execution = uow.enrich_job_exit_status(execution_id, expected, exit_code)
            record = with_extras(execution, uow, request.user)
            control = uow.write_control(execution_id)
            uow.commit()
        return Response(render.execution_write_data(record, control))


class ExecutionClaimView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="claim_execution",
        summary="Record ownership evidence (STARTING only)",
        description=(
            "Records the owner token (never shown back) and the claimant: from then on only "
            "this user's token may write to the execution and everything under it "
            "(`execution_owned`), and the owner holds a lease (`lease` in the answer) that "
            "expires OXIDE_BATCH_LEASE_TTL after its latest write or `control` observation; "
            "an execution whose lease expired may be recovered at once. Same token again: no-op."
        ),
        permission=RUN_BATCH,
        request=s.ClaimInput,
        ok={200: s.ExecutionOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "stale_version",
                "version_ahead",
                "execution_ownership_not_allowed",
                "execution_owned",
            ),
        },
        body=True,
        path_ids=True,
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        data = self.read(s.ClaimInput, request.data)
        expected, token = data.to_domain()
        worker = data.worker_value()
        with self.unit_of_work(token) as uow:
            view = uow.claim_execution_owner(execution_id, expected, token, worker=worker)
            record = with_extras(view.execution, uow, request.user)
            uow.commit()
        # The claim's own token is now the recorded one (or the refusal said so).
        control = WriteControl(
            stop_requested=view.stop_requested_at is not None,
            owner_matches=True,
            fenced=view.execution.recovery_decision_id is not None,
        )
        return Response(render.execution_write_data(record, control))


class ExecutionControlView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="observe_execution_control",
        summary="Observe control: ownership and a pending stop",
        description=(
            "The owner seeing a pending stop moves a STARTING/STARTED execution to "
            "STOPPING (version + 1). Call at every chunk boundary."
        ),
        permission=RUN_BATCH,
        request=s.ControlInput,
        ok={200: s.ControlOutput},
        errors={404: ("job_execution_not_found",), 409: ("invalid_state", "version_exhausted")},
        body=True,
        path_ids=True,
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        token = self.read(s.ControlInput, request.data).to_domain()
        with self.unit_of_work() as uow:
            control = uow.observe_execution_control(execution_id, token)
            record = with_extras(control.execution.execution, uow, request.user)
            uow.commit()
        return Response(
            {
                "execution": render.execution_data(record),
                "owner_matches": control.owner_matches,
                "stop_requested": control.stop_requested,
            }
        )


class LaunchesView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="launch",
        summary="Launch or restart, claimed and STARTED, in one request",
        description=(
            "Selects or creates the instance of the key, creates its next attempt (a "
            "restart when the latest is FAILED or STOPPED; the refusals of "
            "`create_execution`), claims it for `owner_token` and the request's user (as "
            "`claim` does) and moves it to STARTED — one transaction: a refusal leaves "
            "nothing, not even a new instance. The attempt is written once, STARTED at "
            "version 1 (where create, claim and start would leave it), with the owner's "
            "`lease`. Instead of `POST instances`, `POST instances/{id}/executions`, "
            "`claim` and `transition` (which all keep working)."
        ),
        permission=RUN_BATCH,
        request=s.LaunchRunInput,
        ok={201: s.LaunchOutput},
        errors={
            404: ("definition_not_found",),
            409: NEW_ATTEMPT_CONFLICTS,
        },
        body=True,
        tags=["executions"],
    )
    def post(self, request: Request) -> Response:
        data = self.read(s.LaunchRunInput, request.data)
        key, token, digest = data.launch_values()
        worker = data.worker_value()
        self.check_job(key.job_name)
        with self.unit_of_work(token) as uow:
            launch = uow.launch_job_execution(key, token, definition_digest=digest, worker=worker)
            record = with_extras(launch.execution, uow, request.user)
            control = uow.write_control(launch.execution.id)
            instance = instance_record(launch.instance.id)
            uow.commit()
        return Response(
            {
                "instance": s.InstanceOutput(
                    instance, context={"payloads": may_see_payloads(request)}
                ).data,
                "execution": render.execution_write_data(record, control),
            },
            status=http.HTTP_201_CREATED,
        )
