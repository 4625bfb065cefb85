"""The API's contract, carried by its views rather than read from the host's
``REST_FRAMEWORK`` (decision 117).

A Django project that installs the app has its own DRF configuration —
another authentication, ``AllowAny``, page-number pagination, a browsable API,
its own exception handler, a versioning scheme. Every class DRF would take
from those settings is named here, so the endpoints under ``oxide_batch.urls``
answer the same in any host: token (then session) authentication with 401 for
anonymous callers, the strict JSON parser (contract §4.5), JSON out, keyset pages,
and application/problem+json for every error, a defect's 500 included. The
host's own DRF views keep the host's settings: nothing here is global.

What DRF still reads from the global settings is harmless here:
``UNAUTHENTICATED_USER`` (the permission checks accept ``None`` and an
anonymous user alike) and ``NON_FIELD_ERRORS_KEY`` (the error mapping reads it,
``oxide_batch.api.errors.flatten_validation``); the API's own fields format
their instants themselves."""

from __future__ import annotations

from collections.abc import Iterable

from django.core.signals import got_request_exception
from django.utils.log import log_response
from rest_framework.authentication import SessionAuthentication
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import APISettings
from rest_framework.views import APIView, set_rollback

from oxide_batch.api.authentication import BatchTokenAuthentication
from oxide_batch.api.errors import problem
from oxide_batch.api.parsers import StrictJSONParser
from oxide_batch.api.schema import BatchSchema
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE

# DRF's defaults, whatever the host's REST_FRAMEWORK says: what a view reads
# through ``self.settings`` (the exception handler, the format suffix and
# override names) and the content negotiation's settings. Not empty: DRF reads
# the project's REST_FRAMEWORK when the user settings are falsy.
API_SETTINGS = APISettings(
    user_settings={"EXCEPTION_HANDLER": "oxide_batch.api.errors.exception_handler"}
)


class ApiJSONRenderer(JSONRenderer):
    """DRF's JSON renderer with its defaults fixed (DRF reads ``UNICODE_JSON``,
    ``COMPACT_JSON`` and ``STRICT_JSON`` once, from the host's settings):
    UTF-8 text, compact separators, and no NaN or Infinity."""

    ensure_ascii = False
    compact = True
    strict = True


class ApiContentNegotiation(DefaultContentNegotiation):
    settings = API_SETTINGS  # type: ignore[assignment]  # the stubs name a private type

    #: What every runtime sends: no ``Accept`` (``None``), anything, or exactly JSON.
    PLAIN_ACCEPTS = frozenset({None, "*/*", "application/json"})

    def select_renderer(
        self,
        request: Request,
        renderers: Iterable[BaseRenderer],
        format_suffix: str | None = None,
    ) -> tuple[BaseRenderer, str]:
        """DRF's choice, without parsing and ranking the ``Accept`` header for a
        view with one renderer asked for plainly (no ``?format=``; no ``Accept``
        header, or exactly ``*/*`` or ``application/json``): DRF would pick that
        renderer with its own media type. Anything else — an empty ``Accept``
        (406 from DRF) included — goes through DRF."""
        renderers = list(renderers)
        accept = request.META.get("HTTP_ACCEPT")
        if (
            len(renderers) == 1
            and not format_suffix
            and accept in self.PLAIN_ACCEPTS
            and "format" not in request.query_params
        ):
            return renderers[0], str(renderers[0].media_type)
        chosen: tuple[BaseRenderer, str] = super().select_renderer(
            request, renderers, format_suffix
        )
        return chosen


class ApiContract(APIView):
    """The classes every view of the API carries (decision 117); a view that
    answers otherwise (the docs pages, the schema) overrides one of them."""

    authentication_classes = [
        # DRF's TokenAuthentication against hashed tokens (oxide_batch.models.ApiToken),
        # first: an anonymous request gets 401 with WWW-Authenticate, not 403.
        BatchTokenAuthentication,
        SessionAuthentication,
    ]
    permission_classes = [IsAuthenticated]
    parser_classes = [StrictJSONParser]
    renderer_classes = [ApiJSONRenderer]
    throttle_classes = []
    content_negotiation_class = ApiContentNegotiation
    versioning_class = None
    metadata_class = None
    schema = BatchSchema()
    settings = API_SETTINGS

    def handle_exception(self, exc: Exception) -> Response:
        """The problem for ``exc``; an exception nobody mapped (a defect) is a
        500 problem too, logged as Django logs one — on the API's URLs the
        host's 500 page never answers."""
        try:
            return super().handle_exception(exc)
        except Exception as defect:
            # What Django's handler does for an uncaught exception: the test
            # client re-raises it from this signal; the log has its traceback,
            # once (log_response marks the response logged).
            got_request_exception.send(sender=type(self), request=self.request)
            set_rollback()
            response = Response(
                problem(500, "internal_error", "an unexpected error occurred"),
                status=500,
                content_type=PROBLEM_CONTENT_TYPE,
            )
            log_response(
                "Internal Server Error: %s",
                self.request.path,
                response=response,
                request=self.request,
                exception=defect,
            )
            return response
