"""Job instances: list, select or create, read one."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import serializers as s
from oxide_batch.api.filters import InstanceFilter, apply_filters
from oxide_batch.api.permissions import may_see_payloads
from oxide_batch.api.schema import endpoint
from oxide_batch.api.shapes import name_schema
from oxide_batch.api.views.base import PAGE_PARAMETERS, READ, READ_RUN, BatchView
from oxide_batch.domain.names import NameKind
from oxide_batch.roles import RUN_BATCH, VIEW_BATCH
from oxide_batch.selectors.instances import instance_record, instance_record_from_row, instances


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
            OpenApiParameter(
                "job_name", name_schema(NameKind.JOB), description="Only instances of this job."
            ),
            *PAGE_PARAMETERS,
        ],
        tags=["instances"],
    )
    def get(self, request: Request) -> Response:
        queryset = self.scoped(apply_filters(InstanceFilter, request, instances()))
        return self.page(
            request,
            queryset,
            s.InstanceOutput,
            instance_record_from_row,
            context={"payloads": may_see_payloads(request)},
        )

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
        self.check_job(key.job_name)
        with self.unit_of_work() as uow:
            selection = uow.select_or_create_job_instance(key)
            record = instance_record(selection.instance.id)
            uow.commit()
        return Response(
            s.InstanceOutput(record, context={"payloads": may_see_payloads(request)}).data,
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
        record = instance_record(instance_id)
        context = {"payloads": may_see_payloads(request)}
        return Response(s.InstanceOutput(record, context=context).data)
