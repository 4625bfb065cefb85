"""The OpenAPI document's drf-spectacular settings, the app's own.

The schema and docs views apply them per request (``custom_settings``, over
drf-spectacular's defaults), so a host's ``SPECTACULAR_SETTINGS`` changes
neither the document nor the pages; the standalone service also names them as
its ``SPECTACULAR_SETTINGS`` (``manage.py spectacular``, the tests' generator).
No import of DRF here: ``project/settings.py`` imports this module."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oxide_batch.api.converters import IdentifierConverter, NodeIdConverter, RuleNameConverter


def only_this_api(endpoints: Sequence[Any], **kwargs: Any) -> list[Any]:
    """drf-spectacular's preprocessing hook: the endpoints of this app's views
    only — a host's own API is not documented as oxide_batch's."""
    return [
        endpoint
        for endpoint in endpoints
        if getattr(getattr(endpoint[3], "cls", None), "__module__", "").startswith("oxide_batch.")
    ]


SPECTACULAR: dict[str, Any] = {
    "TITLE": "oxide_batch API",
    "DESCRIPTION": (
        "The durable job repository of a batch framework: runtimes record launches, "
        "steps, chunk checkpoints, partitions and flow decisions; every mutation is a "
        "compare-and-swap on a version. Errors are application/problem+json."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # A regular expression: the API's root under whatever prefix the host mounts it.
    "SCHEMA_PATH_PREFIX": r"/(?:[^/]+/)*?api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "PREPROCESSING_HOOKS": ["oxide_batch.api.openapi.only_this_api"],
    "ENUM_NAME_OVERRIDES": {
        "BatchStatusEnum": "oxide_batch.domain.status.BatchStatus",
        "FailureCategoryEnum": "oxide_batch.domain.status.FailureCategory",
        "FlowTransitionKindEnum": "oxide_batch.domain.flow.FlowTransitionKind",
        "TerminalKindEnum": "oxide_batch.domain.flow.TerminalKind",
        "ParameterTypeEnum": "oxide_batch.domain.parameters.ParameterType",
    },
    "PATH_CONVERTER_OVERRIDES": {
        # What the views accept after the converters (oxide_batch/api/converters.py).
        "batch_id": IdentifierConverter.schema,
        "node_id": NodeIdConverter.schema,
        "rule_name": RuleNameConverter.schema,
    },
    # Served offline from drf-spectacular-sidecar's static files, no CDN; the
    # pages fetch nothing from elsewhere (oxide_batch/api/docs.py).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No badge from validator.swagger.io. No deep links: Swagger UI puts each
    # operation's link inside the button that opens it (axe nested-interactive).
    "SWAGGER_UI_SETTINGS": {"deepLinking": False, "validatorUrl": None},
    # The local sans-serif instead of Montserrat/Roboto, which only a web font
    # from Google would provide.
    "REDOC_UI_SETTINGS": {
        "theme": {
            "typography": {
                "fontFamily": "system-ui, sans-serif",
                "headings": {"fontFamily": "system-ui, sans-serif"},
            }
        }
    },
}
