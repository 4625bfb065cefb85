"""The API's views: validate with an input serializer, run ONE unit of work of
the repository (or ONE call of an operator or retention service), render with
an output serializer. No rule lives here.

Reads of single rows go through the repository (or a selector when the
domain value lacks columns the representation shows); lists go through the
read-only selectors with keyset pagination.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiParameter
from rest_framework import status as http
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from oxide_batch.api import deps, runtime, selectors
from oxide_batch.api import serializers as s
from oxide_batch.api.errors import at
from oxide_batch.api.filters import (
    ExecutionFilter,
    InstanceFilter,
    OperatorRequestFilter,
    RecoveryDecisionFilter,
    RetentionRecordFilter,
    apply_filters,
)
from oxide_batch.api.pagination import KeysetPagination
from oxide_batch.api.permissions import BatchPermission, may_see_payloads
from oxide_batch.api.roles import OPERATE_BATCH, RUN_BATCH, VIEW_BATCH, VIEW_BATCH_PAYLOAD
from oxide_batch.api.schema import BodySchema, endpoint
from oxide_batch.api.throttling import THROTTLED, OperatorRateThrottle
from oxide_batch.domain.errors import (
    IdentifierOutOfRange,
    JobExecutionNotFound,
    JobInstanceNotFound,
)
from oxide_batch.domain.identifiers import MAX_IDENTIFIER, IdentifierKind, validate_identifier
from oxide_batch.domain.names import NameKind, validate_name
from oxide_batch.domain.operator import OperatorAction, RecordOutcome
from oxide_batch.domain.partitions import StepPartition, key_bytes
from oxide_batch.domain.retention import RetentionAction
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.port import JobRepository
from oxide_batch.services.audit import Actor
from oxide_batch.services.operator import OperatorResult

K = IdentifierKind
READ = {"GET": VIEW_BATCH}
RUN = {"POST": RUN_BATCH}
READ_RUN = {"GET": VIEW_BATCH, "POST": RUN_BATCH}
PATH_IDS: Mapping[str, IdentifierKind] = {
    "instance_id": K.JOB_INSTANCE,
    "execution_id": K.JOB_EXECUTION,
    "step_id": K.STEP_EXECUTION,
    "partition_id": K.STEP_PARTITION,
}
STATE_ERRORS = {409: ("stale_version", "version_exhausted")}
TRANSITION_ERRORS = (
    "stale_version",
    "illegal_transition",
    "restart_requires_new_attempt",
    "failed_transition_missing_failure",
    "invalid_transition_time",
    "count_exhausted",
    "version_exhausted",
)


class BatchView(APIView):
    """Base of every batch endpoint: per-method permissions, path ids checked."""

    permission_classes = [BatchPermission]
    # Counts only the methods that need operate_batch (oxide_batch.api.throttling).
    throttle_classes = [OperatorRateThrottle]
    metadata_class = None
    required_permissions: ClassVar[Mapping[str, str]] = {}

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        for key, value in kwargs.items():
            kind = PATH_IDS.get(key)
            if kind is None:
                continue
            if value > MAX_IDENTIFIER:
                raise IdentifierOutOfRange(kind=kind.value, value=value)
            with at(key):
                validate_identifier(kind, value)

    @staticmethod
    def repository() -> JobRepository:
        return deps.repository()

    @staticmethod
    def read(serializer_class: type[s.Input], data: Any) -> Any:
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        return serializer


def paginate(view: APIView, request: Request, queryset: Any) -> tuple[KeysetPagination, list[Any]]:
    paginator = KeysetPagination()
    rows = paginator.paginate_queryset(queryset, request, view=view) or []
    return paginator, rows


def partitions_data(request: Request, step_id: int, plan: list[StepPartition]) -> dict[str, Any]:
    """The plan in partition-key byte order (SPEC §2.4), contexts only for payload readers."""
    ordered = sorted(plan, key=lambda partition: key_bytes(partition.key))
    output = s.PlanOutput(
        {"step_execution_id": step_id, "partitions": ordered},
        context={"payloads": may_see_payloads(request)},
    )
    data: dict[str, Any] = output.data
    return data


ID_PARAMETER_DOC = "1 … 2^63−1"
PAGE_PARAMETERS = [
    OpenApiParameter("cursor", str, description="The `next`/`previous` link's cursor."),
    OpenApiParameter("page_size", int, description="1–500, default 50."),
]


# ============================================================================ jobs


class DescriptorView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="descriptor",
        summary="Capability descriptor",
        permission=VIEW_BATCH,
        ok={200: s.DescriptorOutput},
        tags=["repository"],
    )
    def get(self, request: Request) -> Response:
        descriptor = self.repository().descriptor()
        return Response(
            s.DescriptorOutput(
                {
                    "descriptor_version": descriptor.descriptor_version,
                    "schema_version": descriptor.schema_version,
                    "capabilities": sorted(c.value for c in descriptor.capabilities),
                }
            ).data
        )


class DefinitionsView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="register_definition",
        summary="Register a definition",
        description="201 when new, 200 when the digest is already registered for the job.",
        permission=RUN_BATCH,
        request=s.DefinitionInput,
        ok={201: s.DefinitionOutput, 200: s.DefinitionOutput},
        errors={
            400: ("unsupported_manifest_version",),
            409: ("definition_drift", "definition_job_mismatch", "concurrent_modification"),
        },
        body=True,
        tags=["definitions"],
    )
    def post(self, request: Request) -> Response:
        job_name, revision, manifest = self.read(s.DefinitionInput, request.data).to_domain()
        with self.repository().begin() as uow:
            registration = uow.register_definition(job_name, revision, manifest)
            uow.commit()
        definition = registration.definition
        return Response(
            s.DefinitionOutput(definition).data,
            status=http.HTTP_201_CREATED if registration.created else http.HTTP_200_OK,
        )


class UpgradesView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="register_definition_upgrade",
        summary="Register an upgrade edge",
        description="201 when new, 200 when the same edge exists.",
        permission=RUN_BATCH,
        request=s.UpgradeInput,
        ok={201: s.UpgradeOutput, 200: s.UpgradeOutput},
        errors={
            404: ("definition_not_found",),
            409: (
                "definition_upgrade_conflict",
                "definition_job_mismatch",
                "concurrent_modification",
            ),
        },
        body=True,
        tags=["definitions"],
    )
    def post(self, request: Request) -> Response:
        edge = self.read(s.UpgradeInput, request.data).to_domain()
        with self.repository().begin() as uow:
            created = uow.register_definition_upgrade(edge)
            uow.commit()
        return Response(
            s.UpgradeOutput(
                {
                    "job_name": edge.job_name,
                    "key": edge.key,
                    "from_digest": edge.from_digest,
                    "to_digest": edge.to_digest,
                    "step_mapping": dict(edge.step_mapping),
                }
            ).data,
            status=http.HTTP_201_CREATED if created else http.HTTP_200_OK,
        )


class InstancesView(BatchView):
    required_permissions = READ_RUN

    @endpoint(
        operation_id="list_instances",
        summary="List job instances",
        description="Newest first (keyset pagination, no total count).",
        permission=VIEW_BATCH,
        ok={200: s.InstancePageOutput},
        listing=True,
        parameters=[
            OpenApiParameter("job_name", str, description="Only instances of this job."),
            *PAGE_PARAMETERS,
        ],
        tags=["instances"],
    )
    def get(self, request: Request) -> Response:
        queryset = apply_filters(InstanceFilter, request, selectors.instances())
        paginator, rows = paginate(self, request, queryset)
        records = [selectors.instance_record_from_row(row) for row in rows]
        return paginator.get_paginated_response(s.InstanceOutput(records, many=True).data)

    @endpoint(
        operation_id="select_or_create_instance",
        summary="Select or create a job instance",
        description="201 when created, 200 when the instance of this key exists.",
        permission=RUN_BATCH,
        request=s.InstanceInput,
        ok={201: s.InstanceOutput, 200: s.InstanceOutput},
        errors={409: ("concurrent_modification",)},
        body=True,
        tags=["instances"],
    )
    def post(self, request: Request) -> Response:
        key = self.read(s.InstanceInput, request.data).to_domain()
        with self.repository().begin() as uow:
            selection = uow.select_or_create_job_instance(key)
            record = selectors.instance_record(selection.instance.id)
            uow.commit()
        return Response(
            s.InstanceOutput(record).data,
            status=http.HTTP_201_CREATED if selection.created else http.HTTP_200_OK,
        )


class InstanceView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="get_instance",
        summary="One job instance, with its hold",
        permission=VIEW_BATCH,
        ok={200: s.InstanceOutput},
        errors={404: ("job_instance_not_found",)},
        path_ids=True,
        tags=["instances"],
    )
    def get(self, request: Request, instance_id: int) -> Response:
        return Response(s.InstanceOutput(selectors.instance_record(instance_id)).data)


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
        queryset = selectors.executions().filter(job_instance_id=instance_id)
        paginator, rows = paginate(self, request, queryset)
        if not rows and not selectors.instance_exists(instance_id):
            raise JobInstanceNotFound(id=instance_id)
        records = [selectors.execution_record_from_row(row) for row in rows]
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
            409: (
                "completed_instance",
                "abandoned_instance",
                "execution_already_active",
                "incompatible_definition",
                "definition_job_mismatch",
                "concurrent_modification",
            ),
        },
        body=True,
        path_ids=True,
        tags=["executions"],
    )
    def post(self, request: Request, instance_id: int) -> Response:
        digest = self.read(s.LaunchInput, request.data).to_domain()
        with self.repository().begin() as uow:
            execution = uow.create_job_execution(instance_id, definition_digest=digest)
            record = selectors.with_extras(execution)
            uow.commit()
        return Response(s.execution_data(record), status=http.HTTP_201_CREATED)


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
            OpenApiParameter("job_name", str),
            OpenApiParameter("created_after", str, description="RFC 3339 instant."),
            OpenApiParameter("created_before", str, description="RFC 3339 instant."),
            OpenApiParameter("ended_after", str, description="RFC 3339 instant."),
            OpenApiParameter("ended_before", str, description="RFC 3339 instant."),
            OpenApiParameter(
                "unresolved_for",
                int,
                description=(
                    "Seconds: UNKNOWN executions, and active ones with no runtime write, "
                    "owner observation or step write for at least that long."
                ),
            ),
            *PAGE_PARAMETERS,
        ],
        tags=["executions"],
    )
    def get(self, request: Request) -> Response:
        queryset = apply_filters(ExecutionFilter, request, selectors.executions())
        paginator, rows = paginate(self, request, queryset)
        records = [selectors.execution_record_from_row(row) for row in rows]
        return paginator.get_paginated_response(s.ExecutionOutput(records, many=True).data)


class ExecutionView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="get_execution",
        summary="One job execution",
        permission=VIEW_BATCH,
        ok={200: s.ExecutionOutput},
        errors={404: ("job_execution_not_found",)},
        path_ids=True,
        tags=["executions"],
    )
    def get(self, request: Request, execution_id: int) -> Response:
        return Response(s.execution_data(selectors.execution_record(execution_id)))


class ExecutionTransitionView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="transition_execution",
        summary="CAS transition of a job execution",
        description=(
            "The lifecycle table applies; a runtime cannot move a job execution to "
            "ABANDONED or out of UNKNOWN (`illegal_transition`): those are operator decisions."
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
        expected, transition = self.read(s.TransitionInput, request.data).to_domain()
        with self.repository().begin() as uow:
            execution = runtime.transition_job_execution(uow, execution_id, expected, transition)
            record = selectors.with_extras(execution)
            uow.commit()
        return Response(s.execution_data(record))


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
        expected, exit_code = self.read(s.ExitStatusInput, request.data).to_domain()
        with self.repository().begin() as uow:
            execution = uow.enrich_job_exit_status(execution_id, expected, exit_code)
            record = selectors.with_extras(execution)
            uow.commit()
        return Response(s.execution_data(record))


class ExecutionClaimView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="claim_execution",
        summary="Record ownership evidence (STARTING only)",
        description="Evidence, never a lease; the token is never shown. Same token again: no-op.",
        permission=RUN_BATCH,
        request=s.ClaimInput,
        ok={200: s.ExecutionOutput},
        errors={
            404: ("job_execution_not_found",),
            409: ("stale_version", "execution_ownership_not_allowed", "execution_owned"),
        },
        body=True,
        path_ids=True,
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        expected, token = self.read(s.ClaimInput, request.data).to_domain()
        with self.repository().begin() as uow:
            view = uow.claim_execution_owner(execution_id, expected, token)
            record = selectors.with_extras(view.execution)
            uow.commit()
        return Response(s.execution_data(record))


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
        errors={404: ("job_execution_not_found",), 409: ("version_exhausted",)},
        body=True,
        path_ids=True,
        tags=["executions"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        token = self.read(s.ControlInput, request.data).to_domain()
        with self.repository().begin() as uow:
            control = uow.observe_execution_control(execution_id, token)
            record = selectors.with_extras(control.execution.execution)
            uow.commit()
        return Response(
            s.ControlOutput(
                {
                    "execution": record,
                    "owner_matches": control.owner_matches,
                    "stop_requested": control.stop_requested,
                }
            ).data
        )


# =========================================================================== steps


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
        queryset = selectors.steps().filter(job_execution_id=execution_id)
        paginator, rows = paginate(self, request, queryset)
        if not rows and not selectors.execution_exists(execution_id):
            raise JobExecutionNotFound(id=execution_id)
        found = [selectors.step_from_row(row) for row in rows]
        return paginator.get_paginated_response(s.StepOutput(found, many=True).data)

    @endpoint(
        operation_id="create_step",
        summary="Start a step (STARTING)",
        description=(
            "With `node_id` or `start_limit` it is a flow step: the node's starts across "
            "the instance count against the limit. In a restart attempt the step takes "
            "over the newest earlier state of the same step (or node)."
        ),
        permission=RUN_BATCH,
        request=s.StepInput,
        ok={201: s.StepOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "invalid_state",
                "step_execution_exists",
                "start_limit_exceeded",
                "invalid_definition_upgrade",
                "restart_state_not_found",
                "concurrent_modification",
            ),
        },
        body=True,
        path_ids=True,
        tags=["steps"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        step_name, node_id, start_limit = self.read(s.StepInput, request.data).to_domain()
        with self.repository().begin() as uow:
            if node_id is None and start_limit is None:
                step = uow.create_step_execution(execution_id, step_name)
            else:
                step = uow.create_flow_step_execution(
                    execution_id, step_name, node_id or step_name, start_limit
                )
            uow.commit()
        return Response(s.StepOutput(step).data, status=http.HTTP_201_CREATED)


class StepView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="get_step",
        summary="One step execution",
        permission=VIEW_BATCH,
        ok={200: s.StepOutput},
        errors={404: ("step_execution_not_found",)},
        path_ids=True,
        tags=["steps"],
    )
    def get(self, request: Request, step_id: int) -> Response:
        return Response(s.StepOutput(selectors.step(step_id)).data)


class StepTransitionView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="transition_step",
        summary="CAS transition of a step (the full lifecycle table)",
        permission=RUN_BATCH,
        request=s.TransitionInput,
        ok={200: s.StepOutput},
        errors={404: ("step_execution_not_found",), 409: TRANSITION_ERRORS},
        body=True,
        path_ids=True,
        tags=["steps"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        expected, transition = self.read(s.TransitionInput, request.data).to_domain()
        with self.repository().begin() as uow:
            step = uow.transition_step_execution(step_id, expected, transition)
            uow.commit()
        return Response(s.StepOutput(step).data)


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
        expected, exit_code = self.read(s.ExitStatusInput, request.data).to_domain()
        with self.repository().begin() as uow:
            step = uow.enrich_step_exit_status(step_id, expected, exit_code)
            uow.commit()
        return Response(s.StepOutput(step).data)


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
        with self.repository().begin() as uow:
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
            "`counts` are this chunk's deltas, added under the lock; the response carries "
            "the totals. `checkpoint` and `context`, when given, replace the stored ones."
        ),
        permission=RUN_BATCH,
        request=s.ChunkInput,
        ok={200: s.StepOutput},
        errors={
            404: ("step_execution_not_found",),
            409: ("stale_version", "invalid_state", "count_exhausted", "version_exhausted"),
        },
        body=True,
        path_ids=True,
        tags=["steps"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        expected, counts, checkpoint, context = self.read(s.ChunkInput, request.data).to_domain()
        with self.repository().begin() as uow:
            step = uow.commit_chunk(
                step_id, expected, counts, checkpoint=checkpoint, context=context
            )
            uow.commit()
        return Response(s.StepOutput(step).data)


# ====================================================================== partitions


class PartitionPlanView(BatchView):
    required_permissions = READ_RUN

    @endpoint(
        operation_id="get_partition_plan",
        summary="The step's partition plan (key byte order, unpaginated)",
        description="Partition contexts are shown to users who may read payloads.",
        permission=VIEW_BATCH,
        ok={200: s.PlanOutput},
        errors={404: ("step_execution_not_found",), 409: ("partition_state_corrupt",)},
        path_ids=True,
        tags=["partitions"],
    )
    def get(self, request: Request, step_id: int) -> Response:
        with self.repository().begin() as uow:
            plan = uow.step_partition_plan(step_id)
        return Response(partitions_data(request, step_id, plan))

    @endpoint(
        operation_id="create_partition_plan",
        summary="Create the step's partition plan (all or nothing)",
        permission=RUN_BATCH,
        request=s.PartitionPlanInput,
        ok={201: s.PlanOutput},
        errors={
            400: ("empty_partition_plan", "partition_plan_too_large", "duplicate_partition_key"),
            404: ("step_execution_not_found",),
            409: ("partition_parent_not_active", "partition_plan_exists"),
        },
        body=True,
        path_ids=True,
        tags=["partitions"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        entries = self.read(s.PartitionPlanInput, request.data).to_domain()
        with self.repository().begin() as uow:
            plan = uow.create_step_partition_plan(step_id, entries)
            uow.commit()
        return Response(partitions_data(request, step_id, plan), status=http.HTTP_201_CREATED)


class PartitionRestartView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="restart_partition_plan",
        summary="Carry a stopped or failed attempt's plan into this restarted step",
        description="COMPLETED partitions are carried with their worker and not rerun.",
        permission=RUN_BATCH,
        request=s.PlanRestartInput,
        ok={201: s.PlanOutput},
        errors={
            404: ("step_execution_not_found",),
            409: (
                "partition_state_corrupt",
                "partition_parent_not_active",
                "partition_plan_exists",
            ),
        },
        body=True,
        path_ids=True,
        tags=["partitions"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        source = self.read(s.PlanRestartInput, request.data).to_domain()
        with self.repository().begin() as uow:
            plan = uow.restart_step_partition_plan(source, step_id)
            uow.commit()
        return Response(partitions_data(request, step_id, plan), status=http.HTTP_201_CREATED)


class PartitionAssignView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="assign_partition",
        summary="Assign a worker step to a partition (CAS)",
        permission=RUN_BATCH,
        request=s.PartitionCasInput,
        ok={200: s.PartitionOutput},
        errors={
            404: ("step_partition_not_found", "step_execution_not_found"),
            409: (
                "stale_version",
                "partition_parent_not_active",
                "partition_update_not_allowed",
                "partition_worker_mismatch",
                "partition_worker_already_assigned",
                "partition_state_corrupt",
            ),
        },
        body=True,
        path_ids=True,
        tags=["partitions"],
    )
    def post(self, request: Request, partition_id: int) -> Response:
        expected, worker = self.read(s.PartitionCasInput, request.data).to_domain()
        with self.repository().begin() as uow:
            partition = uow.assign_step_partition(partition_id, expected, worker)
            uow.commit()
        output = s.PartitionOutput(partition, context={"payloads": may_see_payloads(request)})
        return Response(output.data)


class PartitionCompleteView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="complete_partition",
        summary="Complete a partition from its worker's outcome (CAS)",
        description="Status, exit code and counts are copied from the worker step.",
        permission=RUN_BATCH,
        request=s.PartitionCasInput,
        ok={200: s.PartitionOutput},
        errors={
            404: ("step_partition_not_found", "step_execution_not_found"),
            409: (
                "stale_version",
                "partition_parent_not_active",
                "partition_update_not_allowed",
                "partition_worker_stale",
                "partition_worker_mismatch",
                "partition_aggregation_incomplete",
                "partition_state_corrupt",
            ),
        },
        body=True,
        path_ids=True,
        tags=["partitions"],
    )
    def post(self, request: Request, partition_id: int) -> Response:
        expected, worker = self.read(s.PartitionCasInput, request.data).to_domain()
        with self.repository().begin() as uow:
            partition = uow.complete_step_partition(partition_id, expected, worker)
            uow.commit()
        output = s.PartitionOutput(partition, context={"payloads": may_see_payloads(request)})
        return Response(output.data)


class AggregateView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="aggregate_partitions",
        summary="Aggregate the partitions and terminate the parent step",
        description=(
            "Re-running an aggregation that already applied answers 200 with the same parent."
        ),
        permission=RUN_BATCH,
        request=s.AggregateInput,
        ok={200: s.StepOutput},
        errors={
            404: ("step_execution_not_found",),
            409: (
                "stale_version",
                "partition_parent_not_active",
                "partition_aggregation_incomplete",
                "partition_state_corrupt",
                "count_exhausted",
                "illegal_transition",
            ),
        },
        body=True,
        path_ids=True,
        tags=["partitions"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        expected = self.read(s.AggregateInput, request.data).to_domain()
        with self.repository().begin() as uow:
            step = uow.aggregate_step_partitions(step_id, expected)
            uow.commit()
        return Response(s.StepOutput(step).data)


# ============================================================================ flow


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
        with self.repository().begin() as uow:
            step = uow.latest_flow_step(instance_id, node_id)
            if step is None:
                uow.get_job_instance(instance_id)
                raise NotFound("no step of this node in the instance", code="flow_step_not_found")
        return Response(s.StepOutput(step).data)


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
        with self.repository().begin() as uow:
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
            409: ("flow_state_corrupt", "concurrent_modification"),
        },
        body=True,
        path_ids=True,
        tags=["flow"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        serializer = self.read(s.FlowDecisionInput, request.data)
        decision_request = serializer.request_for(execution_id)
        with self.repository().begin() as uow:
            decision = uow.append_flow_decision(decision_request)
            uow.commit()
        return Response(s.FlowDecisionOutput(decision).data, status=http.HTTP_201_CREATED)


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
        with self.repository().begin() as uow:
            decision = uow.find_reusable_flow_decision(
                instance_id, node, fingerprint, input_digest, kind
            )
            if decision is None:
                uow.get_job_instance(instance_id)
        return Response(s.ReusableOutput({"decision": decision}).data)


# ======================================================================== operator
#
# Each operator endpoint makes ONE call of a service (oxide_batch/services), which
# audits it: the effect and its APPLIED row commit together; a refusal by a rule
# is the problem (409) and leaves a REJECTED row; the same request again (same
# action, operation id and request digest) answers the recorded outcome with the
# same status and ``replayed: true`` (a recorded refusal: the same problem, plus
# ``replayed: true``); another request under a used operation id is 409
# ``operation_id_conflict``. The audited actor is the authenticated user.

OPERATE = {"POST": OPERATE_BATCH}
REPLAY_DOC = (
    "Audited and idempotent: the same request again (same operation id and body) "
    "answers the recorded outcome with `replayed: true`; another body under a used "
    "operation id is `operation_id_conflict`; a refusal by a rule is recorded "
    "(REJECTED) and replays as the same problem."
)


def actor_of(request: Request) -> Actor:
    """The authenticated user as the audited actor (never a client-supplied string)."""
    return Actor.for_user(request.user)


class RecoveryProposalView(BatchView):
    required_permissions = READ

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
    required_permissions = OPERATE

    @endpoint(
        operation_id="recover_execution",
        summary="Audited recovery: MARK_FAILED (restartable) or ABANDON",
        description=(
            "The proposal is recomputed under the execution lock; checked in order: "
            "`stale_version`, `recovery_not_allowed`, `execution_not_stale`, "
            "`recovery_evidence_stale`, `unresolved_recovery_required` (an unknown "
            "commit is marked FAILED only with the reason `UNKNOWN_EFFECT`). " + REPLAY_DOC
        ),
        permission=OPERATE_BATCH,
        request=s.RecoverInput,
        ok={200: s.RecoverResponseOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "stale_version",
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
        )
        return Response(s.operator_data(result, _current(result), recover=True))


def _current(result: OperatorResult) -> selectors.ExecutionRecord | None:
    """The execution an operator result names, as the API shows it (``None``: a
    replay after the execution was purged)."""
    return None if result.execution is None else selectors.with_extras(result.execution)


class StopView(BatchView):
    required_permissions = OPERATE

    @endpoint(
        operation_id="stop_execution",
        summary="Durable stop request",
        description=(
            "STARTING/STARTED: records who and when (status and version unchanged; the "
            "owner's next control observation moves it to STOPPING). STOPPING or "
            "finished: a no-op (`changed: false`, no version check). UNKNOWN: "
            "`invalid_state`. " + REPLAY_DOC
        ),
        permission=OPERATE_BATCH,
        request=s.StopInput,
        ok={200: s.OperatorResponseOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "stale_version",
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
        return Response(s.operator_data(result, _current(result)))


class AbandonView(BatchView):
    required_permissions = OPERATE

    @endpoint(
        operation_id="abandon_execution",
        summary="Abandon a STOPPED or FAILED attempt (the instance never runs again)",
        description=(
            "ABANDONED already: a no-op (`changed: false`, no version check); any other "
            "status: `invalid_state`. " + REPLAY_DOC
        ),
        permission=OPERATE_BATCH,
        request=s.AbandonInput,
        ok={200: s.OperatorResponseOutput},
        errors={
            404: ("job_execution_not_found",),
            409: (
                "stale_version",
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
        return Response(s.operator_data(result, _current(result)))


class HoldView(BatchView):
    required_permissions = {"PUT": OPERATE_BATCH, "DELETE": OPERATE_BATCH}
    schema = BodySchema()

    @endpoint(
        operation_id="place_hold",
        summary="Place (or replace) the instance's retention hold",
        description=(
            "A held instance is never purged; holds never block lifecycle actions. " + REPLAY_DOC
        ),
        permission=OPERATE_BATCH,
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
        permission=OPERATE_BATCH,
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
    required_permissions = OPERATE

    @endpoint(
        operation_id="survey_purge",
        summary="Survey one purge batch (deletes nothing)",
        description=(
            "Whole instances, oldest first, at most `limit`: no hold, no active or "
            "UNKNOWN execution, every execution in `statuses`, the latest ended before "
            "`ended_before` (at least OXIDE_BATCH_PURGE_MIN_AGE ago, else "
            "`invalid_request`). Hand the answer back whole to `purge/apply`."
        ),
        permission=OPERATE_BATCH,
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
    required_permissions = OPERATE

    @endpoint(
        operation_id="apply_purge",
        summary="Apply a surveyed purge plan (all or nothing)",
        description=(
            "Every candidate is re-checked under lock (full eligibility, versions, "
            "holds) and the plan digest recomputed: any change is "
            "`retention_plan_stale` and nothing is deleted. An empty plan applies with "
            "zero counts. One retention record per applied batch. " + REPLAY_DOC
        ),
        permission=OPERATE_BATCH,
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


# =========================================================================== audit

AUDIT_ID_PARAMETERS = [
    OpenApiParameter("job_execution_id", int, description="Only rows of this execution."),
    OpenApiParameter("job_instance_id", int, description="Only rows of this instance."),
]


class RecoveryDecisionsView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="list_recovery_decisions",
        summary="Recovery decisions (append-only audit), newest first",
        description="Evidence digests are shown by a 12-character prefix.",
        permission=VIEW_BATCH,
        ok={200: s.AuditRecoveryDecisionPageOutput},
        listing=True,
        parameters=[*AUDIT_ID_PARAMETERS, *PAGE_PARAMETERS],
        tags=["audit"],
    )
    def get(self, request: Request) -> Response:
        queryset = apply_filters(RecoveryDecisionFilter, request, selectors.recovery_decisions())
        paginator, rows = paginate(self, request, queryset)
        return paginator.get_paginated_response(s.AuditRecoveryDecisionOutput(rows, many=True).data)


class OperatorRequestsView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="list_operator_requests",
        summary="Operator requests (append-only audit: APPLIED and REJECTED), newest first",
        permission=VIEW_BATCH,
        ok={200: s.OperatorRecordPageOutput},
        listing=True,
        parameters=[
            *AUDIT_ID_PARAMETERS,
            OpenApiParameter("action", str, enum=[action.value for action in OperatorAction]),
            OpenApiParameter("outcome", str, enum=[outcome.value for outcome in RecordOutcome]),
            OpenApiParameter("operation_id", str),
            *PAGE_PARAMETERS,
        ],
        tags=["audit"],
    )
    def get(self, request: Request) -> Response:
        queryset = apply_filters(OperatorRequestFilter, request, selectors.operator_requests())
        paginator, rows = paginate(self, request, queryset)
        records = [selectors.operator_record_from_row(row) for row in rows]
        return paginator.get_paginated_response(s.OperatorRecordOutput(records, many=True).data)


class RetentionRecordsView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="list_retention_records",
        summary="Retention records (append-only audit: holds and purge batches), newest first",
        permission=VIEW_BATCH,
        ok={200: s.RetentionRecordPageOutput},
        listing=True,
        parameters=[
            OpenApiParameter("job_instance_id", int, description="Only rows of this instance."),
            OpenApiParameter("action", str, enum=[action.value for action in RetentionAction]),
            OpenApiParameter("operation_id", str),
            *PAGE_PARAMETERS,
        ],
        tags=["audit"],
    )
    def get(self, request: Request) -> Response:
        queryset = apply_filters(RetentionRecordFilter, request, selectors.retention_records())
        paginator, rows = paginate(self, request, queryset)
        records = [selectors.retention_record_from_row(row) for row in rows]
        return paginator.get_paginated_response(s.RetentionRecordOutput(records, many=True).data)
