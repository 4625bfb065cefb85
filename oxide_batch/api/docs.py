"""The API docs pages (Swagger UI at ``docs/``, Redoc at ``redoc/``), served
from this machine alone.

The bundles come from drf-spectacular-sidecar's static files; the templates
(``oxide_batch/templates/oxide_batch/api/``) leave out drf-spectacular's Google Fonts link; and each
page answers with a Content-Security-Policy that allows this origin only, so
what a bundle would still fetch from elsewhere at load (Redoc's sidebar logo on
``cdn.redoc.ly``) is refused by the browser before any request is sent."""

from __future__ import annotations

from typing import Any

from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import SPECTACULAR_DEFAULTS, patched_settings
from drf_spectacular.views import (
    SCHEMA_KWARGS,
    SpectacularAPIView,
    SpectacularRedocView,
    SpectacularSwaggerView,
)
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api.contract import ApiContract
from oxide_batch.api.openapi import SPECTACULAR
from oxide_batch.api.schema import extended

# drf-spectacular's defaults under the app's own settings, so a host's
# SPECTACULAR_SETTINGS changes neither the document nor the pages (the SERVE_*
# and generator settings are the views' attributes below instead).
SCHEMA_SETTINGS = {
    name: value
    for name, value in {**SPECTACULAR_DEFAULTS, **SPECTACULAR}.items()
    if not name.startswith("SERVE_") and name != "DEFAULT_GENERATOR_CLASS"
}

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


class SchemaView(ApiContract, SpectacularAPIView):
    """The OpenAPI document of this API alone, with the app's settings."""

    permission_classes = []
    renderer_classes = SpectacularAPIView.renderer_classes
    generator_class = SchemaGenerator
    serve_public = True
    urlconf = None
    custom_settings = SCHEMA_SETTINGS

    @extended(**SCHEMA_KWARGS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response: Response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]
        return response


class _SameOriginOnly(ApiContract):
    permission_classes = []
    renderer_classes = SpectacularSwaggerView.renderer_classes
    url_name = "oxide_batch:api:schema"
    title = SPECTACULAR["TITLE"]

    @extended(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # The page's data (bundles, UI settings) is read from the settings here.
        with patched_settings(SCHEMA_SETTINGS):
            response: Response = super().get(request, *args, **kwargs)  # type: ignore[misc]
        return response

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


class SwaggerDocsView(_SameOriginOnly, SpectacularSwaggerView):
    template_name = "oxide_batch/api/swagger_ui.html"


class RedocDocsView(_SameOriginOnly, SpectacularRedocView):
    template_name = "oxide_batch/api/redoc.html"


def schema_document() -> dict[str, Any]:
    """The OpenAPI document the schema view serves (public, this API's
    endpoints alone), generated outside a request — for tools and tests."""
    with patched_settings(SCHEMA_SETTINGS):
        generator = SchemaGenerator()  # type: ignore[no-untyped-call]
        document: dict[str, Any] = generator.get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    return document
