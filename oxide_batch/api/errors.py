"""Every error the API answers, as ``application/problem+json`` — mapped here, in one place.

``{type, title, status, code, detail, …fields}``: ``code`` is the typed
error's durable code (``stale_version``, ``job_execution_not_found``, …) or
``invalid_request`` for input that fails validation, with ``errors`` mapping
each field (a dotted path such as ``counts.read`` or ``entries.3.key``) to a
list of ``{code, message, …fields}``. The typed error's structured fields
(``expected``, ``actual``, …) follow as members (see ``oxide_batch.client.wire``
for the renaming of ``status``). A refusal an operator endpoint replays from its
audit row (same action, operation id and request digest) is the same problem
plus ``replayed: true``.

Statuses: input → 400 (the input-shaped repository variants keep their own
code), not found → 404, a rule or conflict → 409 (``*_corrupt`` included),
the database unavailable, a commit outcome unknown or a schema that does not
match → 503 with ``Retry-After``. DRF's own exceptions map to 400/401/403/
404/405/406/413/415. An exception nobody mapped is a defect: the view answers
a 500 problem and logs it (``oxide_batch.api.contract``). Under the API's
prefix, what no view answers is a problem too: an unknown path
(``oxide_batch.urls``), and in the standalone service Django's 400/403/404/500
handlers (``project/urls.py``); outside it, a 403 is the console's page.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import DatabaseError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import NoReverseMatch, reverse
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from rest_framework import exceptions
from rest_framework.exceptions import ErrorDetail
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import set_rollback

from oxide_batch.client.wire import (
    ERROR_ENTRY_MEMBERS,
    INVALID_REQUEST,
    PROBLEM_CONTENT_TYPE,
    PROBLEM_TYPE_PREFIX,
    problem_member,
)
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    DomainError,
    DuplicatePartitionKey,
    EmptyPartitionPlan,
    IdentifierOutOfRange,
    JobNotPermitted,
    LifecycleError,
    MigrationRequired,
    NewerSchema,
    NotFound,
    OxideBatchError,
    PartitionPlanTooLarge,
    RepositoryError,
    SchemaUninitialized,
    SkipNotEligible,
    Unavailable,
    UnsupportedManifestVersion,
)
from oxide_batch.observability.events import current_request_id
from oxide_batch.repository.faults import translate

RETRY_AFTER_SECONDS = 1
NON_FIELD = "non_field_errors"

# The one table of typed errors → HTTP status; the first matching class wins.
STATUS_BY_CLASS: tuple[tuple[type[OxideBatchError], int], ...] = (
    # Input-shaped repository variants (contract §4.6): 400 with their own code.
    (IdentifierOutOfRange, 400),
    (EmptyPartitionPlan, 400),
    (PartitionPlanTooLarge, 400),
    (DuplicatePartitionKey, 400),
    (SkipNotEligible, 400),
    (UnsupportedManifestVersion, 400),
    # Domain values that could not be built from the input: 400 invalid_request.
    (DomainError, 400),
    (NotFound, 404),
    # A token limited to other jobs (contract §4.1): forbidden, naming the job.
    (JobNotPermitted, 403),
    # The repository cannot answer now: retry later (a commit outcome: re-read first).
    (Unavailable, 503),
    (CommitOutcomeUnknown, 503),
    (SchemaUninitialized, 503),
    (MigrationRequired, 503),
    (NewerSchema, 503),
    # Rules and conflicts: stale versions, lifecycle, corrupt state, lost races.
    (LifecycleError, 409),
    (RepositoryError, 409),
    (OxideBatchError, 409),
)

TITLES: Mapping[int, str] = {
    400: "Invalid request",
    401: "Not authenticated",
    403: "Permission denied",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    409: "Conflict",
    413: "Request body too large",
    415: "Unsupported media type",
    429: "Too many requests",
    500: "Internal server error",
    503: "Service unavailable",
}


class InvalidInput(Exception):
    """Input that failed a domain check, by field path (rendered as ``invalid_request``)."""

    def __init__(self, errors: Mapping[str, list[OxideBatchError]]) -> None:
        super().__init__("invalid request")
        self.errors = dict(errors)


def status_for(error: OxideBatchError) -> int:
    for cls, status in STATUS_BY_CLASS:
        if isinstance(error, cls):
            return status
    return 409  # pragma: no cover - OxideBatchError is the last row


def problem(status: int, code: str, detail: str, **members: Any) -> dict[str, Any]:
    """A problem document."""
    return {
        "type": PROBLEM_TYPE_PREFIX + code,
        "title": TITLES.get(status, "Error"),
        "status": status,
        "code": code,
        "detail": detail,
        "request_id": current_request_id(),
        **members,
    }


def error_entry(error: OxideBatchError) -> dict[str, Any]:
    """One ``errors`` entry of a typed error: its code, message and fields."""
    fields = {
        problem_member(name, ERROR_ENTRY_MEMBERS): value for name, value in error.details().items()
    }
    return {"code": error.code, "message": error.message, **fields}


def typed_problem(error: OxideBatchError) -> tuple[int, dict[str, Any]]:
    status = status_for(error)
    if isinstance(error, DomainError):
        return status, invalid_request({NON_FIELD: [error_entry(error)]})
    fields = {problem_member(name): value for name, value in error.details().items()}
    if getattr(error, "replayed", False):
        # A recorded refusal answered again (contract §2.5.9): the same problem, marked.
        fields["replayed"] = True
    return status, problem(status, error.code, error.message, **fields)


def invalid_request(errors: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    first = next((entries[0] for entries in errors.values() if entries), None)
    detail = "the request is invalid"
    if first is not None:
        detail = str(first.get("message", detail))
    return problem(400, INVALID_REQUEST, detail, errors=dict(errors))


def flatten_validation(detail: Any, path: str = "") -> dict[str, list[dict[str, Any]]]:
    """DRF's nested validation detail as ``{dotted path: [{code, message}]}``."""
    found: dict[str, list[dict[str, Any]]] = {}
    # DRF files an object's own errors under the host's NON_FIELD_ERRORS_KEY.
    own = {NON_FIELD, api_settings.NON_FIELD_ERRORS_KEY}

    def visit(item: Any, where: str) -> None:
        if isinstance(item, Mapping):
            for key, value in item.items():
                if key in own:  # a nested object's own errors belong to its path
                    visit(value, where)
                else:
                    visit(value, f"{where}.{key}" if where else str(key))
        elif isinstance(item, list | tuple):
            for index, value in enumerate(item):
                if isinstance(value, Mapping | list | tuple):
                    visit(value, f"{where}.{index}" if where else str(index))
                else:
                    visit(value, where)
        else:
            code = getattr(item, "code", None) or "invalid"
            found.setdefault(where or NON_FIELD, []).append({"code": code, "message": str(item)})

    visit(detail, path)
    return found


def _drf_problem(exc: exceptions.APIException) -> tuple[int, dict[str, Any]]:
    status = exc.status_code
    if isinstance(exc, exceptions.ValidationError):
        return 400, invalid_request(flatten_validation(exc.detail))
    detail = exc.detail
    message = str(detail) if isinstance(detail, str) else "the request is invalid"
    code = detail.code if isinstance(detail, ErrorDetail) and detail.code else exc.default_code
    if isinstance(exc, exceptions.ParseError):
        return 400, invalid_request({"body": [{"code": str(code), "message": message}]})
    members: dict[str, Any] = {}
    permission = getattr(exc, "permission", None)
    if isinstance(permission, str):  # the permission and the groups that grant it
        members = {"permission": permission, "groups": list(getattr(exc, "groups", ()))}
    return status, problem(status, str(code), message, **members)


def too_large() -> dict[str, Any]:
    """413: the body is over the limit Django reads bodies up to, named with the
    setting that sets it (``max_bytes`` is the limit)."""
    limit = django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    if limit is None:  # pragma: no cover - Django raises nothing without a limit
        return problem(413, "request_too_large", "the request body is too large")
    return problem(
        413,
        "request_too_large",
        f"the request body is larger than the limit of {limit} bytes "
        "(the setting DATA_UPLOAD_MAX_MEMORY_SIZE sets it): send less in one request",
        max_bytes=limit,
    )


def problem_for(exc: BaseException) -> tuple[int, dict[str, Any], dict[str, str]] | None:
    """(status, problem, headers) for an exception the API maps, else ``None``."""
    headers: dict[str, str] = {}
    if isinstance(exc, DatabaseError):
        mapped = translate(exc)
        if mapped is None:
            return None
        exc = mapped
    if isinstance(exc, OxideBatchError):
        status, document = typed_problem(exc)
    elif isinstance(exc, InvalidInput):
        errors = {
            path: [error_entry(error) for error in found] for path, found in exc.errors.items()
        }
        status, document = 400, invalid_request(errors)
    elif isinstance(exc, RequestDataTooBig):
        status, document = 413, too_large()
    elif isinstance(exc, SuspiciousOperation):
        status, document = 400, problem(400, "suspicious_request", "the request was refused")
    elif isinstance(exc, Http404):
        status, document = 404, problem(404, "not_found", "not found")
    elif isinstance(exc, DjangoPermissionDenied):
        status = 403
        document = problem(403, "permission_denied", "you may not perform this action")
    elif isinstance(exc, exceptions.APIException):
        status, document = _drf_problem(exc)
        auth_header = getattr(exc, "auth_header", None)
        if auth_header:
            headers["WWW-Authenticate"] = str(auth_header)
        wait = getattr(exc, "wait", None)
        if wait:
            headers["Retry-After"] = str(int(wait))
    else:
        return None
    if status == 503:
        headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return status, document, headers


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``: a problem+json response, or ``None`` (a defect: 500)."""
    mapped = problem_for(exc)
    if mapped is None:
        return None
    status, document, headers = mapped
    set_rollback()
    return Response(document, status=status, headers=headers, content_type=PROBLEM_CONTENT_TYPE)


# -- Django's handlers (project/urls.py): problem+json under the API's prefix
# (``api/`` where oxide_batch.urls is included), Django's pages elsewhere.


def _is_api(request: HttpRequest) -> bool:
    try:
        root = reverse("oxide_batch:api-not-found").removesuffix("v1/")
    except NoReverseMatch:  # the project did not include oxide_batch.urls
        return False
    return request.path.startswith(root)


def _problem_response(status: int, code: str, detail: str) -> HttpResponse:
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else None
    return JsonResponse(
        problem(status, code, detail),
        status=status,
        content_type=PROBLEM_CONTENT_TYPE,
        headers=headers,
    )


@csrf_exempt  # as the API's views are: a POST to a wrong path is a 404, not a CSRF 403
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """A path under the API's prefix that no route matched (``oxide_batch.urls``)."""
    return _problem_response(404, "not_found", "no such resource")


def handler400(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        mapped = problem_for(exception) if exception is not None else None
        if mapped is not None:
            status, document, headers = mapped
            return JsonResponse(
                document, status=status, content_type=PROBLEM_CONTENT_TYPE, headers=headers
            )
        return _problem_response(400, INVALID_REQUEST, "the request is invalid")
    return defaults.bad_request(request, exception or Exception())


def handler403(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """Under the API's prefix a problem; elsewhere the console's 403 page, in the
    admin's frame and naming the permission needed (``oxide_batch.admin_site``),
    or Django's page where the project serves no admin site."""
    if _is_api(request):
        return _problem_response(403, "permission_denied", "you may not perform this action")
    from oxide_batch.admin_site import refusal_response

    try:
        return refusal_response(request, exception)
    except NoReverseMatch:  # no admin site in the project's URLs
        return defaults.permission_denied(request, exception or Exception())


def handler404(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return _problem_response(404, "not_found", "no such resource")
    return defaults.page_not_found(request, exception or Exception())


def handler500(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return _problem_response(500, "internal_error", "an unexpected error occurred")
    return defaults.server_error(request)
