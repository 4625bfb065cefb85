"""``POST executions/{id}/lost-write/resolve``: an operator's decision on a lost
write (contract §2.5.14; audited and idempotent: :mod:`.base`)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import deps
from oxide_batch.api import serializers as s
from oxide_batch.api.schema import endpoint
from oxide_batch.api.serializers.lost_write import ResolveLostWriteInput
from oxide_batch.api.throttling import THROTTLED
from oxide_batch.api.views.base import REPLAY_DOC, BatchView, actor_of
from oxide_batch.api.views.operator import operator_response
from oxide_batch.roles import RECOVER_EXECUTION


class ResolveLostWriteView(BatchView):
    required_permissions = {"POST": RECOVER_EXECUTION}
    job_scoped = False  # an operator endpoint (contract §4.1)

    @endpoint(
        operation_id="resolve_lost_write",
        summary="Resolve the execution's lost-write marker (a human's decision)",
        description=(
            "Whatever the execution's status. Until it is resolved, the marker counts as "
            "an unknown commit and a launch or restart of the instance is "
            "`lost_write_unresolved`: check the target system first (what the runtime did "
            "after the stored checkpoint may have happened). No marker, or one already "
            "resolved: a no-op (`changed: false`). " + REPLAY_DOC
        ),
        permission=RECOVER_EXECUTION,
        request=ResolveLostWriteInput,
        ok={200: s.OperatorResponseOutput},
        errors={
            404: ("job_execution_not_found",),
            409: ("operation_id_conflict", "concurrent_modification"),
            **THROTTLED,
        },
        body=True,
        path_ids=True,
        tags=["operator"],
    )
    def post(self, request: Request, execution_id: int) -> Response:
        reason_code, note, operation_id = self.read(ResolveLostWriteInput, request.data).to_domain()
        result = deps.operator_service().resolve_lost_write(
            execution_id,
            reason_code=reason_code,
            note=note,
            actor=actor_of(request),
            operation_id=operation_id,
        )
        return operator_response(result)
