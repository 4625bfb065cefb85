"""A step's partition plan and its partitions (CAS on each)."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import render
from oxide_batch.api import serializers as s
from oxide_batch.api.permissions import may_see_payloads
from oxide_batch.api.schema import endpoint
from oxide_batch.api.serializers.base import at
from oxide_batch.api.views.base import READ_RUN, RUN, BatchView
from oxide_batch.client.wire import format_instant
from oxide_batch.conf import batch_settings
from oxide_batch.domain.fused import WriteControl
from oxide_batch.domain.partitions import StepPartition, key_bytes
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.claims import ClaimOperations, PartitionClaim
from oxide_batch.roles import RUN_BATCH, VIEW_BATCH


def partitions_data(
    request: Request,
    step_id: int,
    plan: list[StepPartition],
    control: WriteControl | None = None,
) -> dict[str, Any]:
    """The plan in partition-key byte order (contract §2.4.1), contexts only for
    payload readers; with ``control`` when the write carried an owner token."""
    ordered = sorted(plan, key=lambda partition: key_bytes(partition.key))
    output = s.PlanOutput(
        {"step_execution_id": step_id, "partitions": ordered},
        context={"payloads": may_see_payloads(request)},
    )
    return render.with_control(dict(output.data), control)


def plan_summary(plan: list[StepPartition], retry_limit: int) -> dict[str, Any]:
    """``PlanSummaryOutput``: counts by status, claimable, running, settled (issue 43)."""
    by_status = Counter(partition.status.value for partition in plan)
    claimable = sum(
        1
        for partition in plan
        if (partition.status is BatchStatus.STARTING and partition.worker_step_execution_id is None)
        or (partition.status is BatchStatus.FAILED and partition.retries < retry_limit)
    )
    running = by_status.get(BatchStatus.STARTED.value, 0)
    return {
        "by_status": dict(sorted(by_status.items())),
        "claimable": claimable,
        "running": running,
        "settled": bool(plan) and claimable == 0 and running == 0,
    }


def partition_data(
    request: Request, partition: StepPartition, control: WriteControl | None = None
) -> dict[str, Any]:
    """One partition, its context only for payload readers; with ``control``
    when the write carried an owner token."""
    output = s.PartitionOutput(partition, context={"payloads": may_see_payloads(request)})
    return render.with_control(dict(output.data), control)


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
        with self.unit_of_work() as uow:
            plan = uow.step_partition_plan(step_id)
        answer = partitions_data(request, step_id, plan)
        answer["summary"] = plan_summary(plan, batch_settings.PARTITION_RETRY_LIMIT)
        return Response(answer)

    @endpoint(
        operation_id="create_partition_plan",
        summary="Create the step's partition plan (all or nothing)",
        permission=RUN_BATCH,
        request=s.PartitionPlanInput,
        ok={201: s.PlanOutput},
        errors={
            400: ("empty_partition_plan", "partition_plan_too_large", "duplicate_partition_key"),
            404: ("step_execution_not_found",),
            409: ("execution_owned", "partition_parent_not_active", "partition_plan_exists"),
        },
        body=True,
        path_ids=True,
        tags=["partitions"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        data = self.read(s.PartitionPlanInput, request.data)
        with self.unit_of_work(data.owner_token_value()) as uow:
            plan = uow.create_step_partition_plan(step_id, data.to_domain())
            control = uow.write_control()
            uow.commit()
        answer = partitions_data(request, step_id, plan, control)
        return Response(answer, status=http.HTTP_201_CREATED)


class PartitionRestartView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="restart_partition_plan",
        summary="Carry a stopped or failed attempt's plan into this restarted step",
        description=(
            "COMPLETED partitions are carried with their worker and not rerun. Without "
            "`source_step_execution_id` the source is the newest step of the same node in "
            "an earlier attempt of the instance (the step this one took over from). A source "
            "step of another node or job instance is `invalid_request` on "
            "`source_step_execution_id` (`partition_restart_mismatch`); a source job "
            "execution that is not STOPPED or FAILED is `not_restartable`; a source "
            "step without a plan is `restart_state_not_found`; a carried context that "
            "does not verify is `fault_state_corrupt`."
        ),
        permission=RUN_BATCH,
        request=s.PlanRestartInput,
        ok={201: s.PlanOutput},
        errors={
            404: ("step_execution_not_found",),
            409: (
                "execution_owned",
                "not_restartable",
                "partition_parent_not_active",
                "partition_plan_exists",
                "restart_state_not_found",
                "partition_state_corrupt",
                "fault_state_corrupt",
            ),
        },
        body=True,
        path_ids=True,
        tags=["partitions"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        data = self.read(s.PlanRestartInput, request.data)
        with self.unit_of_work(data.owner_token_value()) as uow:
            with at("source_step_execution_id"):  # the node/instance pairing, checked there
                plan = uow.restart_step_partition_plan(data.to_domain(), step_id)
            control = uow.write_control()
            uow.commit()
        answer = partitions_data(request, step_id, plan, control)
        return Response(answer, status=http.HTTP_201_CREATED)


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
                "execution_owned",
                "stale_version",
                "version_ahead",
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
        data = self.read(s.PartitionCasInput, request.data)
        expected, worker = data.to_domain()
        with self.unit_of_work(data.owner_token_value()) as uow:
            partition = uow.assign_step_partition(partition_id, expected, worker)
            control = uow.write_control()
            uow.commit()
        return Response(partition_data(request, partition, control))


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
                "execution_owned",
                "stale_version",
                "version_ahead",
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
        data = self.read(s.PartitionCasInput, request.data)
        expected, worker = data.to_domain()
        with self.unit_of_work(data.owner_token_value()) as uow:
            partition = uow.complete_step_partition(partition_id, expected, worker)
            control = uow.write_control()
            uow.commit()
        return Response(partition_data(request, partition, control))


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
                "execution_owned",
                "stale_version",
                "version_ahead",
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
        data = self.read(s.AggregateInput, request.data)
        with self.unit_of_work(data.owner_token_value()) as uow:
            step = uow.aggregate_step_partitions(step_id, data.to_domain())
            control = uow.write_control(step.job_execution_id)
            uow.commit()
        return Response(render.step_write_data(step, control))


class PartitionClaimView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="claim_partition",
        summary="Claim the next partition of a running partitioned step (remote workers)",
        description=(
            "Issue 43: assigns the next claimable partition in key byte order (never "
            "assigned, or FAILED with retries left) to a new STARTED worker step owned by "
            "the caller's own `owner_token`, in one transaction; concurrent claimants skip "
            "each other's partition (`SKIP LOCKED`) instead of waiting. The caller must be "
            "the execution's claimant user. Nothing to claim is 200 with `claimed: false` "
            "and a `reason`."
        ),
        permission=RUN_BATCH,
        request=s.PartitionClaimInput,
        ok={200: s.PartitionClaimOutput},
        errors={
            404: ("step_execution_not_found",),
            409: (
                "execution_owned",
                "partition_parent_not_active",
                "partition_state_corrupt",
                "fault_state_corrupt",
            ),
        },
        body=True,
        path_ids=True,
        tags=["partitions"],
    )
    def post(self, request: Request, step_id: int) -> Response:
        data = self.read(s.PartitionClaimInput, request.data)
        token = data.owner_token_value()
        with self.unit_of_work(token) as uow:
            # The Django adapter's own operation (decision 460): row locks the
            # port's in-memory fake has no equivalent of.
            claims = cast(ClaimOperations, uow)
            claim = claims.claim_step_partition(step_id, token, worker=data.worker_value())
            control = uow.write_control()
            uow.commit()
        return Response(claim_data(request, claim, control))


def claim_data(
    request: Request, claim: PartitionClaim, control: WriteControl | None
) -> dict[str, Any]:
    """A claim's answer (``PartitionClaimOutput``)."""
    answer: dict[str, Any] = {"claimed": claim.claimed}
    if claim.partition is not None and claim.worker_step is not None:
        assert claim.lease_ttl is not None
        assert claim.lease_expires_at is not None
        answer.update(
            partition=partition_data(request, claim.partition),
            worker_step=render.step_data(claim.worker_step),
            checkpoint=None if claim.checkpoint is None else claim.checkpoint.as_json(),
            context=None if claim.context is None else claim.context.as_json(),
            lease={
                "ttl_seconds": int(claim.lease_ttl.total_seconds()),
                "expires_at": format_instant(claim.lease_expires_at),
            },
        )
    else:
        assert claim.reason is not None
        answer.update(reason=claim.reason.value, step=render.step_data(claim.parent))
    if control is not None:
        answer["control"] = render.control_data(control)
    return answer
