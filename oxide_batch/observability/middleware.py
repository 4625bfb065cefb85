"""The outermost middleware: the request id and the API request metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from oxide_batch.observability import events, metrics
from oxide_batch.observability.events import (
    REQUEST_ID_HEADER,
    REQUEST_ID_META,
    accept_request_id,
    bind_request_id,
    unbind_request_id,
)
from oxide_batch.observability.observer import safely


class RequestObservabilityMiddleware:
    """Sets ``X-Request-ID`` on every response — the client's value when it is
    1–128 characters of ``[A-Za-z0-9._:-]``, else a generated uuid4 hex — and
    binds it for the events of the request; counts the request by route template
    (the resolved URL pattern; ``static`` for a static file, ``unmatched`` for
    any other request no pattern answered), method and status class.

    List it first in ``MIDDLEWARE`` so every response, including those other
    middleware answer, carries the header.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        request_id = accept_request_id(request.META.get(REQUEST_ID_META))
        token = bind_request_id(request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            safely(lambda: self._observe(request, response, request_id, started))
            return response
        finally:
            unbind_request_id(token)

    @staticmethod
    def _observe(
        request: HttpRequest, response: HttpResponseBase, request_id: str, started: float
    ) -> None:
        response.headers[REQUEST_ID_HEADER] = request_id
        match = getattr(request, "resolver_match", None)
        route = getattr(match, "route", None) or metrics.unrouted_label(request.path_info)
        method = metrics.method_label(request.method)
        status = response.status_code
        safely(
            lambda: metrics.API_REQUESTS.labels(route, method, metrics.status_class(status)).inc()
        )
        level = events.ERROR if status >= 500 else events.DEBUG
        if events.enabled(level):
            events.emit(
                "api.request",
                {
                    "route": route,
                    "method": method,
                    "status": status,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                    "outcome": metrics.status_class(status),
                },
                level=level,
                request_id=request_id,
            )
