"""Every route of the API with the permission its view declares, read from the
URL conf (not from a hand list), so a new endpoint is covered automatically."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.urls import URLPattern

from oxide_batch.api import urls
from oxide_batch.api.views import BatchView
from oxide_batch.roles import OPERATOR_PERMISSIONS

PUBLIC = "public"  # as tests/api/test_permissions.py spells it
LOGIN = "login"  # a method the view does not list: any authenticated user
METHODS = ("get", "post", "put", "patch", "delete")


@dataclass(frozen=True)
class Route:
    name: str
    method: str
    permission: str
    pattern: URLPattern
    view: type[Any]

    @property
    def kwargs(self) -> list[str]:
        """The path's parameters (``execution_id``, …)."""
        return list(self.pattern.pattern.converters)

    @property
    def schema_path(self) -> str:
        """The path as the OpenAPI document writes it."""
        route = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", str(self.pattern.pattern))
        return "/api/v1/" + route


def _permission(pattern: URLPattern, view: type[Any], method: str) -> str:
    if issubclass(view, BatchView):
        return view.required_permissions.get(method, LOGIN)
    initkwargs = getattr(pattern.callback, "view_initkwargs", {})
    if initkwargs.get("permission_classes", view.permission_classes) == []:
        return PUBLIC
    return LOGIN


def api_routes() -> list[Route]:
    found = []
    for pattern in urls.urlpatterns:
        assert isinstance(pattern, URLPattern), pattern
        view = pattern.callback.view_class  # type: ignore[attr-defined]
        for method in METHODS:
            if hasattr(view, method):
                upper = method.upper()
                found.append(
                    Route(
                        str(pattern.name), upper, _permission(pattern, view, upper), pattern, view
                    )
                )
    return found


def operator_routes() -> list[Route]:
    return [route for route in api_routes() if route.permission in OPERATOR_PERMISSIONS]
