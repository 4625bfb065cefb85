"""The OpenAPI document (``schema/``) and the API docs pages (Swagger UI at
``docs/``, Redoc at ``redoc/``), served from this machine alone.

drf-spectacular reads its settings from one process-wide object, which a host
project configures for its own API. The document is generated with the app's
settings (``SCHEMA_SETTINGS``) applied for the generation only, one
generation at a time, once per process (decision 117); the pages read nothing
from drf-spectacular's settings at all: their bundles, icon and UI settings
are the app's (``oxide_batch.api.openapi``).

The bundles come from drf-spectacular-sidecar's static files; the templates
(``oxide_batch/templates/oxide_batch/api/``) leave out drf-spectacular's
Google Fonts link; and each page answers with a Content-Security-Policy that
allows this origin only, so what a bundle would still fetch from elsewhere at
load (Redoc's sidebar logo on ``cdn.redoc.ly``) is refused by the browser
before any request is sent."""

from __future__ import annotations

import json
import threading
from functools import cache
from typing import Any

from django.conf import settings
from django.templatetags.static import static
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import SPECTACULAR_DEFAULTS, patched_settings
from drf_spectacular.views import SpectacularAPIView
from rest_framework.renderers import TemplateHTMLRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api.contract import ApiContract
from oxide_batch.api.openapi import SPECTACULAR
from oxide_batch.api.schema import extended

# drf-spectacular's defaults under the app's own settings, so a host's
# SPECTACULAR_SETTINGS does not change the document.
SCHEMA_SETTINGS = {
    name: value
    for name, value in {**SPECTACULAR_DEFAULTS, **SPECTACULAR}.items()
    if not name.startswith("SERVE_") and name != "DEFAULT_GENERATOR_CLASS"
}
_GENERATING = threading.Lock()

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


def schema_document() -> dict[str, Any]:
    """The OpenAPI document of this API's endpoints alone (public), with the
    app's settings. Generations are serialised, so a patch of the shared
    settings is always undone before the next one is applied."""
    with _GENERATING, patched_settings(SCHEMA_SETTINGS):
        generator = SchemaGenerator()  # type: ignore[no-untyped-call]
        document: dict[str, Any] = generator.get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    return document


@cache
def served_document() -> dict[str, Any]:
    """:func:`schema_document`, generated once per process: the document
    depends on the code alone."""
    return schema_document()


def _sidecar(path: str) -> str:
    return static(f"drf_spectacular_sidecar/{path}")


class SchemaView(ApiContract):
    """The OpenAPI document: JSON by default (any language parses it without a
    package), YAML on request (``?format=yaml`` or ``Accept: application/yaml``);
    its ``servers`` entry is this site's root, where the paths begin."""

    permission_classes = []
    # drf-spectacular's renderers, JSON first: the first is the default.
    renderer_classes = [
        *(r for r in SpectacularAPIView.renderer_classes if r.format == "json"),
        *(r for r in SpectacularAPIView.renderer_classes if r.format != "json"),
    ]

    @extended(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        renderer = request.accepted_renderer
        # The paths carry the API's prefix (/api/v1/…, or a host project's):
        # the server is the site itself, as the client reached it.
        document = {
            **served_document(),
            "servers": [{"url": request.build_absolute_uri("/"), "description": "this server"}],
        }
        return Response(
            document,
            headers={
                "Content-Disposition": f'inline; filename="{SPECTACULAR["TITLE"]}.'
                f'{renderer.format}"'
            },
        )


class _SameOriginOnly(ApiContract):
    permission_classes = []
    renderer_classes = [TemplateHTMLRenderer]
    title = SPECTACULAR["TITLE"]
    template_name: str

    def page(self, data: dict[str, Any]) -> Response:
        return Response(
            data={"title": self.title, "schema_url": reverse("oxide_batch:api:schema"), **data},
            template_name=self.template_name,
        )

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        response = super().finalize_response(request, response, *args, **kwargs)
        response["Content-Security-Policy"] = DOCS_CONTENT_SECURITY_POLICY
        return response


class SwaggerDocsView(_SameOriginOnly):
    template_name = "oxide_batch/api/swagger_ui.html"

    @extended(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        csrf_header = settings.CSRF_HEADER_NAME.removeprefix("HTTP_").replace("_", "-")
        response = self.page(
            {
                "swagger_ui_css": _sidecar("swagger-ui-dist/swagger-ui.css"),
                "swagger_ui_bundle": _sidecar("swagger-ui-dist/swagger-ui-bundle.js"),
                "swagger_ui_standalone": _sidecar(
                    "swagger-ui-dist/swagger-ui-standalone-preset.js"
                ),
                "favicon_href": _sidecar("swagger-ui-dist/favicon-32x32.png"),
                "settings": json.dumps(SPECTACULAR["SWAGGER_UI_SETTINGS"], indent=2),
                "oauth2_config": json.dumps({}),
                # drf-spectacular's script, which starts Swagger UI with the above.
                "template_name_js": "drf_spectacular/swagger_ui.js",
                "script_url": None,
                "csrf_header_name": csrf_header,
                # The document is public: no authentication scheme to offer.
                "schema_auth_names": json.dumps([]),
            },
        )
        response["Cross-Origin-Opener-Policy"] = "unsafe-none"
        return response


class RedocDocsView(_SameOriginOnly):
    template_name = "oxide_batch/api/redoc.html"

    @extended(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.page(
            {
                "redoc_standalone": _sidecar("redoc/bundles/redoc.standalone.js"),
                "settings": json.dumps(SPECTACULAR["REDOC_UI_SETTINGS"], indent=2),
            },
        )
