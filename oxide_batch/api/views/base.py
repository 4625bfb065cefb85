"""What every view of the API shares: :class:`BatchView` (per-method
permissions, path identifiers checked, one input serializer read), keyset
pages, the permission tables and the operator endpoints' audit contract."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from oxide_batch.api import deps
from oxide_batch.api import serializers as s
from oxide_batch.api.contract import ApiContract
from oxide_batch.api.pagination import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    KeysetPagination,
    RecordingOrderPagination,
)
from oxide_batch.api.permissions import BatchPermission, requires_operate
from oxide_batch.api.serializers.base import at
from oxide_batch.api.throttling import OperatorRateThrottle
from oxide_batch.domain.errors import IdentifierOutOfRange
from oxide_batch.domain.jobscope import check_scope, pattern_regex
from oxide_batch.domain.names import MAX_IDENTIFIER, IdentifierKind, validate_identifier
from oxide_batch.repository.port import JobRepository, UnitOfWork
from oxide_batch.roles import RUN_BATCH, VIEW_BATCH
from oxide_batch.selectors.scope import job_name_of
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Actor

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
STATE_ERRORS = {
    409: (
        "execution_owned",
        "stale_version",
        "version_ahead",
        "invalid_state",
        "version_exhausted",
    )
}
TRANSITION_ERRORS = (
    "execution_owned",
    "stale_version",
    "version_ahead",
    "illegal_transition",
    "restart_requires_new_attempt",
    "failed_transition_missing_failure",
    "invalid_transition_time",
    "count_exhausted",
    "version_exhausted",
)


class BatchView(ApiContract):
    """Base of every batch endpoint: the API's own DRF classes (whatever the
    host's settings), per-method permissions, path ids checked, the token's job
    scope applied (contract §4.1)."""

    permission_classes = [BatchPermission]
    # Counts only the operator actions' methods (oxide_batch.api.throttling).
    throttle_classes = [OperatorRateThrottle]
    required_permissions: ClassVar[Mapping[str, str]] = {}
    # Operator endpoints act for an operator, bound by no job scope (contract §4.1).
    job_scoped: ClassVar[bool] = True

    def get_throttles(self) -> list[Any]:
        # Only an operator action is throttled: any other request (a runtime's
        # hot write) builds no throttle and reads no cache.
        if not requires_operate(self.request, self):
            return []
        throttles: list[Any] = super().get_throttles()
        return throttles

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
        patterns = self.job_patterns()
        if patterns is None:
            return
        for key, value in kwargs.items():
            if key in PATH_IDS:
                # One indexed read, for a limited token only; an unknown id is the
                # view's 404, not a 403.
                job_name = job_name_of(key, value)
                if job_name is not None:
                    check_scope(patterns, job_name)

    def job_patterns(self) -> tuple[str, ...] | None:
        """The job names the request's token is limited to (``None``: every job,
        or an operator endpoint, or a session)."""
        if not self.job_scoped:
            return None
        return token_job_patterns(self.request)

    def check_job(self, job_name: str) -> None:
        """``JobNotPermitted`` (403) for a job outside the token's scope."""
        check_scope(self.job_patterns(), job_name)

    def scoped(self, queryset: Any) -> Any:
        """``queryset`` (of rows with a ``job_name``) limited to the token's jobs."""
        patterns = self.job_patterns()
        if patterns is None:
            return queryset
        return queryset.filter(job_name__regex=pattern_regex(patterns))

    @staticmethod
    def repository() -> JobRepository:
        return bootstrap.repository(deps.clock)

    def unit_of_work(self, owner_token: bytes | None = None) -> UnitOfWork:
        """A unit of work for the request's user: its claims record the user, and
        its runtime writes to an execution another user claimed are refused
        (contract §2.5.2); with the ``owner_token`` the write
        carries, a write to an execution that recorded another is refused too,
        and the answer's ``control.owner_matches`` compares the two."""
        return self.repository().begin(
            runtime_user_id=self.request.user.pk, owner_token=owner_token
        )

    @staticmethod
    def read(serializer_class: type[s.Input], data: Any) -> Any:
        serializer = serializer_class(data=data)
        serializer.is_valid(raise_exception=True)
        return serializer

    def page(
        self,
        request: Request,
        queryset: Any,
        output: type[s.Output],
        record: Callable[[Any], Any] | None = None,
        context: dict[str, Any] | None = None,
    ) -> Response:
        """One keyset page of ``queryset``, each row made a record by ``record``
        (default: the row as it is) and rendered with ``output`` (given ``context``)."""
        paginator, rows = paginate(self, request, queryset)
        records = rows if record is None else [record(row) for row in rows]
        data = output(records, many=True, context=context or {}).data
        return paginator.get_paginated_response(data)


def paginate(
    view: APIView, request: Request, queryset: Any, *, oldest_first: bool = False
) -> tuple[KeysetPagination, list[Any]]:
    """One keyset page of ``queryset``: newest first, or ``oldest_first``."""
    paginator = RecordingOrderPagination() if oldest_first else KeysetPagination()
    rows = paginator.paginate_queryset(queryset, request, view=view) or []
    return paginator, rows


PAGE_PARAMETERS = [
    OpenApiParameter("cursor", str, description="The `next`/`previous` link's cursor."),
    OpenApiParameter(
        "page_size",
        {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE},
        description=f"1–{MAX_PAGE_SIZE}, default {DEFAULT_PAGE_SIZE}.",
    ),
]


# ======================================================================== operator
#
# Each operator endpoint (.operator, .retention) makes ONE call of a service
# (oxide_batch/services), which audits it: the effect and its APPLIED row commit
# together; a refusal by a rule is the problem (409) and leaves a REJECTED row; the
# same request again (same action, operation id and request digest) answers the
# recorded outcome with the same status and ``replayed: true`` (a recorded refusal:
# the same problem, plus ``replayed: true``); another request under a used
# operation id is 409 ``operation_id_conflict``. The audited actor is the
# authenticated user.

REPLAY_DOC = (
    "Audited and idempotent: the same request again (same operation id and body) "
    "answers the recorded outcome with `replayed: true`; another body under a used "
    "operation id is `operation_id_conflict`; a refusal by a rule is recorded "
    "(REJECTED) and replays as the same problem."
)


def token_job_patterns(request: Request) -> tuple[str, ...] | None:
    """The job patterns of the request's API token (``None``: not limited). Only
    ``NULL`` means every job: an empty list (written by hand) permits none."""
    patterns = getattr(request.auth, "job_patterns", None)
    return None if patterns is None else tuple(patterns)


def actor_of(request: Request) -> Actor:
    """The authenticated user as the audited actor (never a client-supplied string)."""
    return Actor.for_user(request.user)
