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
their instants themselves.

The body is read by :class:`StrictJSONParser` — what JSON allows but the API
refuses (contract §4.5): repeated keys, NaN/Infinity, nesting deeper than 64
levels, invalid UTF-8 and lone surrogates are 400 ``invalid_request``
(``errors.body``); a body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is
refused by Django before parsing (413)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.core.signals import got_request_exception
from django.utils.log import log_response
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import ParseError
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import APISettings
from rest_framework.views import APIView, set_rollback

from oxide_batch.api.authentication import BatchTokenAuthentication
from oxide_batch.api.errors import problem
from oxide_batch.api.schema import BatchSchema
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE
from oxide_batch.domain.canonical import MAX_PARSE_DEPTH, CanonicalJsonError, parse_strict

# DRF's defaults, whatever the host's REST_FRAMEWORK says: what a view reads
# through ``self.settings`` (the exception handler, the format suffix and
# override names) and the content negotiation's settings. Not empty: DRF reads
# the project's REST_FRAMEWORK when the user settings are falsy.
API_SETTINGS = APISettings(
    user_settings={"EXCEPTION_HANDLER": "oxide_batch.api.errors.exception_handler"}
)


def _refusal(value: Any) -> ParseError | None:
    """What a parsed body breaks, in one walk: nesting deeper than
    ``MAX_PARSE_DEPTH`` first, then a key or string that is not UTF-8 (a lone
    surrogate); ``None`` for a body the API reads. Iterative, so hostile
    nesting cannot exhaust the Python stack."""
    unencodable = False
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, str):
            unencodable = unencodable or not _encodes(item)
        elif isinstance(item, dict | list):
            level += 1
            if level > MAX_PARSE_DEPTH:
                return ParseError(
                    f"JSON nested deeper than {MAX_PARSE_DEPTH} levels", code="too_deep"
                )
            if isinstance(item, dict):
                unencodable = unencodable or not all(_encodes(key) for key in item)
                stack.extend((child, level) for child in item.values())
            else:
                stack.extend((child, level) for child in item)
    if unencodable:
        return ParseError("a string contains a lone surrogate", code="invalid_unicode")
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class StrictJSONParser(JSONParser):
    """``application/json`` read with ``oxide_batch.domain.canonical.parse_strict``."""

    media_type = "application/json"

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        data = stream.read()
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else str(data)
        except UnicodeDecodeError:
            raise ParseError("the body is not valid UTF-8", code="invalid_encoding") from None
        try:
            value = parse_strict(text)
        except CanonicalJsonError as error:
            message = str(error)
            code = "malformed_json"
            if "repeats a key" in message:
                code = "repeated_key"
            elif "is not JSON" in message:
                code = "non_finite_number"
            raise ParseError(message, code=code) from None
        refusal = _refusal(value)
        if refusal is not None:
            raise refusal
        return value


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
