"""Step executions: start, list, read, CAS transitions and chunk commits."""

from __future__ import annotations

from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import render
from oxide_batch.api import serializers as s
from oxide_batch.api.permissions import may_see_payloads
from oxide_batch.api.schema import endpoint
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
from oxide_batch.domain.errors import JobExecutionNotFound
from oxide_batch.roles import RUN_BATCH, VIEW_BATCH, VIEW_BATCH_PAYLOAD
from oxide_batch.selectors.executions import execution_exists
from oxide_batch.selectors.failure_details import failure_detail
from oxide_batch.selectors.steps import step_from_row, step_record, steps


class ExecutionStepsView(BatchView):
    required_permissions = READ_RUN

    @endpoint(
        operation_id="list_execution_steps",
        summary="The execution's steps, newest first",
        permission=VIEW_BATCH,
        ok={200: s.StepPageOutput},
        errors={404: ("job_execution_not_found",)},
        path_ids=True,
        listing=True,
        parameters=PAGE_PARAMETERS,
        tags=["steps"],
    )
    def get(self, request: Request, execution_id: int) -> Response:
        queryset = steps().filter(job_execution_id=execution_id)
        paginator, rows = paginate(self, request, queryset)
        if not rows and not execution_exists(execution_id):
            raise JobExecutionNotFound(id=execution_id)
        found = [step_from_row(row) for row in rows]
        return paginator.get_paginated_response(s.StepOutput(found, many=True).data)

    @endpoint(
        operation_id="create_step",
        summary="Start a step (STARTING)",
        description=(
            "With `node_id` or `start_limit` it is a flow step: the node's starts across "
            "the instance count against the limit. In a restart attempt the step takes "
            "over the newest earlier state of the same step (or node), verified: state "
            "that does not verify is `fault_state_corrupt` and no step is created. Only a "
            "FAILED or STOPPED earlier row is taken over: a COMPLETED one is "
            "`not_restartable` (a restart skips it) unless `allow_start_if_complete`, an "
            "ABANDONED one is `not_restartable` (skipped), an UNKNOWN one is "
            "`not_restartable` until an operator resolves it. Once the execution is "
            "claimed, only the claimant's user may create its steps (`execution_owned`). "
            "With `status: STARTED` the step is created and started at once, in one write "
            "(version 1). The answer carries the checkpoint and context the step took over "
            "(null when it started fresh) and the execution's `control` state."
        ),
        permission=RUN_BATCH,
        request=s.StepInput,
        ok={201: s.StepCreatedOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "execution_owned",
                "not_restartable",
                "invalid_state",
                "step_execution_exists",
                "start_limit_exceeded",
                "invalid_definition_upgrade",
                "restart_state_not_found",
                "fault_state_corrupt",
                "concurrent_modification",
            ),
        },
        body=True,
        path_ids=True,
        tags=["steps"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        data = self.read(s.StepInput, request.data)
        step_name, node_id, start_limit, allow = data.to_domain()
        started = data.started()
        worker = data.worker_value()
        with self.unit_of_work(data.owner_token_value()) as uow:
            if node_id is None and start_limit is None:
                step = uow.create_step_execution(
                    execution_id,
                    step_name,
                    allow_start_if_complete=allow,
                    started=started,
                    worker=worker,
                )
            else:
                step = uow.create_flow_step_execution(
                    execution_id,
                    step_name,
                    node_id or step_name,
                    start_limit,
                    allow_start_if_complete=allow,
                    started=started,
                    worker=worker,
                )
            state = uow.created_step_state(step.id)
            control = uow.write_control(execution_id)
            uow.commit()
        taken_over = None
        if started and state is not None:
            taken_over = (state.checkpoint, state.context)
        return Response(
            render.step_create_data(step, control, taken_over),
            status=http.HTTP_201_CREATED,
        )


class StepView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="get_step",
        summary="One step execution",
        description=(
            "`failure.detail`: what the runtime said about the failure, as kept — every "
            "member for a payload reader (runtimes, operators), `type` alone for a viewer."
        ),
        permission=VIEW_BATCH,
        ok={200: s.StepDetailOutput},
        errors={404: ("step_execution_not_found",)},
        path_ids=True,
        tags=["steps"],
    )
    def get(self, request: Request, step_id: int) -> Response:
        step = step_record(step_id)
        return Response(
            render.with_failure_detail(
                render.step_data(step),
                lambda: failure_detail(step.job_execution_id, step.id),
                full=may_see_payloads(request),
            )
        )


class StepTransitionView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="transition_step",
        summary="CAS transition of a step (the full lifecycle table)",
        description="With `exit_code` the exit code is stored by the same write (version + 1).",
        permission=RUN_BATCH,
        request=s.TransitionInput,
        ok={200: s.StepOutput},
        errors={404: ("step_execution_not_found",), 409: TRANSITION_ERRORS},
        body=True,
        path_ids=True,
        tags=["steps"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        data = self.read(s.TransitionInput, request.data)
        expected, transition = data.to_domain()
        with self.unit_of_work(data.owner_token_value()) as uow:
            step = uow.transition_step_execution(
                step_id, expected, transition, exit_code=data.exit_code_value()
            )
            control = uow.write_control(step.job_execution_id)
            uow.commit()
        return Response(render.step_write_data(step, control))


class StepExitStatusView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="enrich_step_exit_status",
        summary="CAS exit-status enrichment of a step",
        permission=RUN_BATCH,
        request=s.ExitStatusInput,
        ok={200: s.StepOutput},
        errors={404: ("step_execution_not_found",), **STATE_ERRORS},
        body=True,
        path_ids=True,
        tags=["steps"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        data = self.read(s.ExitStatusInput, request.data)
        expected, exit_code = data.to_domain()
        with self.unit_of_work(data.owner_token_value()) as uow:
            step = uow.enrich_step_exit_status(step_id, expected, exit_code)
            control = uow.write_control(step.job_execution_id)
            uow.commit()
        return Response(render.step_write_data(step, control))


class CheckpointView(BatchView):
    required_permissions = {"GET": VIEW_BATCH_PAYLOAD, "POST": RUN_BATCH}

    @endpoint(
        operation_id="get_checkpoint",
        summary="The step's latest checkpoint and context",
        description="Payloads: runtimes and operators only (viewers get 403).",
        permission=VIEW_BATCH_PAYLOAD,
        ok={200: s.CheckpointOutput},
        errors={404: ("step_execution_not_found",), 409: ("fault_state_corrupt",)},
        path_ids=True,
        tags=["steps"],
    )
    def get(self, request: Request, step_id: int) -> Response:
        with self.unit_of_work() as uow:
            state = uow.step_state(step_id)
        return Response(
            s.CheckpointOutput(
                {
                    "step": state.step,
                    "checkpoint": None if state.checkpoint is None else state.checkpoint.as_json(),
                    "context": None if state.context is None else state.context.as_json(),
                }
            ).data
        )

    @endpoint(
        operation_id="commit_chunk",
        summary="Commit a chunk (CAS on a STARTED step)",
        description=(
            "`counts` are this chunk's deltas, added to the step's totals; the response "
            "carries the totals. `checkpoint` and `context`, when given, replace the stored ones. "
            "`finish: COMPLETED` (with an optional `exit_code`) ends the step with this "
            "chunk in the same compare-and-swap (version + 1); refused, nothing is written. "
            "The answer carries the execution's `control` state: the chunk boundary's "
            "observation, no `control` call needed. `skips`: the items the chunk skipped, "
            "each a row of the skip ledger written in the same transaction (one INSERT); "
            "their phases add to the step's skip counts. A failure category no fault policy "
            "may skip is `skip_not_eligible` (400): nothing is written."
        ),
        permission=RUN_BATCH,
        request=s.ChunkInput,
        ok={200: s.StepOutput},
        errors={
            400: ("skip_not_eligible",),
            404: ("step_execution_not_found",),
            409: (
                "execution_owned",
                "stale_version",
                "version_ahead",
                "invalid_state",
                "illegal_transition",
                "invalid_transition_time",
                "count_exhausted",
                "version_exhausted",
            ),
        },
        body=True,
        path_ids=True,
        tags=["steps"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        data = self.read(s.ChunkInput, request.data)
        expected, counts, checkpoint, context = data.to_domain()
        skips = data.skips_value()
        with self.unit_of_work(data.owner_token_value()) as uow:
            step = uow.commit_chunk(
                step_id,
                expected,
                counts,
                checkpoint=checkpoint,
                context=context,
                finish=data.finish_value(),
                exit_code=data.exit_code_value(),
                skips=skips,
            )
            control = uow.write_control(step.job_execution_id)
            uow.commit()
        return Response(render.step_write_data(step, control))
