"""The API docs pages (Swagger UI at ``docs/``, Redoc at ``redoc/``), served
from this machine alone.

The bundles come from drf-spectacular-sidecar's static files; the templates
(``templates/api/``) leave out drf-spectacular's Google Fonts link; and each
page answers with a Content-Security-Policy that allows this origin only, so
what a bundle would still fetch from elsewhere at load (Redoc's sidebar logo on
``cdn.redoc.ly``) is refused by the browser before any request is sent."""

from __future__ import annotations

from typing import Any

from drf_spectacular.views import SpectacularRedocView, SpectacularSwaggerView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

DOCS_CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        # Each page starts its bundle with an inline script.
        "script-src 'self' 'unsafe-inline'",
        # Redoc's styled-components and Swagger UI's style attributes.
        "style-src 'self' 'unsafe-inline'",
        # The bundles' icons are data: URIs; Redoc's search runs in a blob: worker.
        "img-src 'self' data:",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
    )
)


class _SameOriginOnly(APIView):
    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


class SwaggerDocsView(_SameOriginOnly, SpectacularSwaggerView):
    template_name = "api/swagger_ui.html"


class RedocDocsView(_SameOriginOnly, SpectacularRedocView):
    template_name = "api/redoc.html"
