"""Flow steps and flow decisions."""

from __future__ import annotations

from rest_framework import status as http
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import render
from oxide_batch.api import serializers as s
from oxide_batch.api.schema import endpoint
from oxide_batch.api.serializers.base import at
from oxide_batch.api.views.base import READ, READ_RUN, BatchView
from oxide_batch.domain.names import NameKind, validate_name
from oxide_batch.roles import RUN_BATCH, VIEW_BATCH


class FlowStepView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="latest_flow_step",
        summary="The newest step of a flow node in the instance",
        permission=VIEW_BATCH,
        ok={200: s.StepOutput},
        errors={404: ("job_instance_not_found", "flow_step_not_found")},
        path_ids=True,
        tags=["flow"],
    )
    def get(self, request: Request, instance_id: int, node_id: str) -> Response:
        with at("node_id"):
            validate_name(node_id, NameKind.NODE)
        with self.unit_of_work() as uow:
            step = uow.latest_flow_step(instance_id, node_id)
            if step is None:
                uow.get_job_instance(instance_id)
                raise NotFound("no step of this node in the instance", code="flow_step_not_found")
        return Response(render.step_data(step))


class FlowDecisionsView(BatchView):
    required_permissions = READ_RUN

    @endpoint(
        operation_id="list_flow_decisions",
        summary="The execution's flow decisions, in sequence order",
        permission=VIEW_BATCH,
        ok={200: s.FlowDecisionListOutput},
        errors={404: ("job_execution_not_found",), 409: ("flow_state_corrupt",)},
        path_ids=True,
        tags=["flow"],
    )
    def get(self, request: Request, execution_id: int) -> Response:
        with self.unit_of_work() as uow:
            decisions = uow.flow_decisions(execution_id)
            if not decisions:
                uow.get_job_execution(execution_id)
        return Response(s.FlowDecisionListOutput({"results": decisions}).data)

    @endpoint(
        operation_id="append_flow_decision",
        summary="Append a flow decision (the server assigns the sequence)",
        permission=RUN_BATCH,
        request=s.FlowDecisionInput,
        ok={201: s.FlowDecisionOutput},
        errors={
            404: ("job_execution_not_found",),
            409: ("execution_owned", "flow_state_corrupt", "concurrent_modification"),
        },
        body=True,
        path_ids=True,
        tags=["flow"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        serializer = self.read(s.FlowDecisionInput, request.data)
        decision_request = serializer.request_for(execution_id)
        with self.unit_of_work(serializer.owner_token_value()) as uow:
            decision = uow.append_flow_decision(decision_request)
            control = uow.write_control(execution_id)
            uow.commit()
        answer = render.with_control(dict(s.FlowDecisionOutput(decision).data), control)
        return Response(answer, status=http.HTTP_201_CREATED)


class ReusableFlowDecisionView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="find_reusable_flow_decision",
        summary="The newest reusable flow decision of the instance",
        description="`decision` is null when none matches.",
        permission=VIEW_BATCH,
        ok={200: s.ReusableOutput},
        errors={404: ("job_instance_not_found",), 409: ("flow_state_corrupt",)},
        path_ids=True,
        parameters=[s.ReusableQuery],
        tags=["flow"],
    )
    def get(self, request: Request, instance_id: int) -> Response:
        query = {k: v for k, v in request.query_params.items() if k != "format"}
        node, fingerprint, input_digest, kind = self.read(s.ReusableQuery, query).to_domain()
        with self.unit_of_work() as uow:
            decision = uow.find_reusable_flow_decision(
                instance_id, node, fingerprint, input_digest, kind
            )
            if decision is None:
                uow.get_job_instance(instance_id)
        return Response(s.ReusableOutput({"decision": decision}).data)
