"""The skip ledger: a step's skipped items, an execution's (contract §2.3.3)."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import render
from oxide_batch.api import serializers as s
from oxide_batch.api.permissions import may_see_payloads
from oxide_batch.api.schema import endpoint
from oxide_batch.api.views.base import PAGE_PARAMETERS, READ, BatchView, paginate
from oxide_batch.domain.errors import JobExecutionNotFound, StepExecutionNotFound
from oxide_batch.roles import VIEW_BATCH
from oxide_batch.selectors.executions import execution_exists
from oxide_batch.selectors.skips import execution_skips, skip_from_row, step_skips
from oxide_batch.selectors.steps import step_exists

SKIPS_DOC = (
    "The skip ledger's rows in recording order (oldest first, keyset pages): each "
    "skipped item with its phase, item, failure category, the chunk that recorded it "
    "(the step's committed count after it) and its failure detail as kept — type and "
    "message for a payload reader (runtimes, operators), `type` alone for a viewer."
)


def _page(view: BatchView, request: Request, queryset: Any) -> tuple[Any, list[Any]]:
    return paginate(view, request, queryset, oldest_first=True)


def _answer(paginator: Any, rows: list[Any], request: Request) -> Response:
    full = may_see_payloads(request)
    data = [render.skip_data(skip_from_row(row), full=full) for row in rows]
    answer: Response = paginator.get_paginated_response(data)
    return answer


class StepSkipsView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="list_step_skips",
        summary="The step's skipped items (the skip ledger)",
        description=SKIPS_DOC,
        permission=VIEW_BATCH,
        ok={200: s.SkipPageOutput},
        errors={404: ("step_execution_not_found",)},
        path_ids=True,
        listing=True,
        parameters=PAGE_PARAMETERS,
        tags=["steps"],
    )
    def get(self, request: Request, step_id: int) -> Response:
        paginator, rows = _page(self, request, step_skips(step_id))
        if not rows and not step_exists(step_id):
            raise StepExecutionNotFound(id=step_id)
        return _answer(paginator, rows, request)


class ExecutionSkipsView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="list_execution_skips",
        summary="The execution's skipped items, all its steps' (the skip ledger)",
        description=SKIPS_DOC,
        permission=VIEW_BATCH,
        ok={200: s.SkipPageOutput},
        errors={404: ("job_execution_not_found",)},
        path_ids=True,
        listing=True,
        parameters=PAGE_PARAMETERS,
        tags=["executions"],
    )
    def get(self, request: Request, execution_id: int) -> Response:
        paginator, rows = _page(self, request, execution_skips(execution_id))
        if not rows and not execution_exists(execution_id):
            raise JobExecutionNotFound(id=execution_id)
        return _answer(paginator, rows, request)
