"""``/healthz``, ``/readyz`` and ``/metrics``: unauthenticated (``/metrics`` is
restrictable by setting), cheap, and never a 500."""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_PREFIX
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import OxideBatchError, Unavailable
from oxide_batch.observability import metrics
from oxide_batch.observability.database import bounded_cursor
from oxide_batch.observability.events import current_request_id
from oxide_batch.repository.faults import translate
from oxide_batch.repository.schema import (
    SUPPORTED_SCHEMA_VERSION,
    check_schema_version,
    read_schema_version,
)

log = logging.getLogger(__name__)
RETRY_AFTER_SECONDS = 5
READINESS_DETAIL = {
    "unavailable": "the database cannot be reached in time",
    "schema_uninitialized": "the database schema is not initialised: run migrate",
    "migration_required": "the database schema is behind this code: run migrate",
    "newer_schema": "the database schema is newer than this code: deploy the newer code",
}
TITLES = {401: "Not authenticated", 403: "Permission denied", 503: "Service unavailable"}


def problem_response(
    status: int, code: str, detail: str, headers: dict[str, str] | None = None, **members: Any
) -> JsonResponse:
    document = {
        "type": PROBLEM_TYPE_PREFIX + code,
        "title": TITLES.get(status, "Error"),
        "status": status,
        "code": code,
        "detail": detail,
        **members,
        "request_id": current_request_id(),
    }
    return JsonResponse(document, status=status, content_type=PROBLEM_CONTENT_TYPE, headers=headers)


@never_cache
@require_safe
def healthz(request: HttpRequest) -> HttpResponse:
    """The process is alive and serving (no database access)."""
    return JsonResponse({"status": "ok"})


def readiness_problem(using: str = "default") -> str | None:
    """``None`` when the database answers within ``OXIDE_BATCH_METRICS_DB_TIMEOUT``
    and the schema is at the supported version, else the reason code."""
    try:
        with bounded_cursor(using):
            found = read_schema_version(using)
        check_schema_version(found)
        return None
    except OxideBatchError as error:
        return error.code
    except DatabaseError as error:
        mapped = translate(error)
        return mapped.code if mapped is not None else Unavailable.code
    except Exception:  # a probe never answers 500
        log.warning("readiness check failed unexpectedly", exc_info=True)
        return Unavailable.code


@never_cache
@require_safe
def readyz(request: HttpRequest) -> HttpResponse:
    """200 when this instance can serve: the database is reachable within a short
    timeout and the schema is at the supported version; else 503 problem+json
    with the reason (``unavailable``, ``schema_uninitialized``,
    ``migration_required``, ``newer_schema``)."""
    reason = readiness_problem()
    if reason is None:
        return JsonResponse({"status": "ready", "schema_version": SUPPORTED_SCHEMA_VERSION})
    if reason not in READINESS_DETAIL:
        reason = Unavailable.code
    return problem_response(
        503,
        reason,
        READINESS_DETAIL[reason],
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        supported_schema_version=SUPPORTED_SCHEMA_VERSION,
    )


def _remote_allowed(request: HttpRequest, allowed: tuple[str, ...]) -> bool:
    if not allowed or "*" in allowed:
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    for network in allowed:
        try:
            if address in ipaddress.ip_network(network, strict=False):
                return True
        except ValueError:
            continue
    return False


def _token_matches(request: HttpRequest, token: str) -> bool:
    scheme, _, presented = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )


@never_cache
@require_safe
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text exposition of the app's registry.

    ``OXIDE_BATCH_METRICS_ALLOWED_IPS`` (addresses or networks; default localhost
    only; ``*`` any) is checked first (403), then ``OXIDE_BATCH_METRICS_TOKEN``
    when set (``Authorization: Bearer <token>``, else 401)."""
    allowed = batch_settings.METRICS_ALLOWED_IPS
    if not _remote_allowed(request, allowed):
        return problem_response(403, "permission_denied", "metrics are not served to this address")
    token = batch_settings.METRICS_TOKEN
    if token and not _token_matches(request, token):
        return problem_response(
            401,
            "not_authenticated",
            "metrics need the bearer token",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    try:
        body = metrics.exposition()
    except Exception:  # never a 500
        log.warning("metrics exposition failed", exc_info=True)
        return problem_response(
            503, "unavailable", "metrics cannot be rendered now", {"Retry-After": "5"}
        )
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
