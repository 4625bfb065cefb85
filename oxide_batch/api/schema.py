"""OpenAPI documentation helpers: every operation lists its success body and
each problem it can answer, by status, with the error codes by name."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from drf_spectacular.drainage import has_override
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import force_instance
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.serializers import ListSerializer

from oxide_batch.api.serializers import Input, ProblemOutput
from oxide_batch.client.wire import PROBLEM_CONTENT_TYPE

AUTH_ERRORS: Mapping[int, Sequence[str]] = {
    401: ("not_authenticated", "authentication_failed"),
    403: ("permission_denied", "job_not_permitted"),
}
BODY_ERRORS: Mapping[int, Sequence[str]] = {
    400: ("invalid_request",),
    413: ("request_too_large",),
    415: ("unsupported_media_type",),
}
# An id beyond the range is refused by the view; one that is not a number at
# all matches no route, answered by the site's problem 404 (``api/errors.py``).
PATH_ID_ERRORS: Mapping[int, Sequence[str]] = {
    400: ("invalid_request", "identifier_out_of_range"),
    404: ("not_found",),
}
LIST_ERRORS: Mapping[int, Sequence[str]] = {400: ("invalid_request",)}
INFRA_ERRORS: Mapping[int, Sequence[str]] = {
    503: (
        "unavailable",
        "commit_outcome_unknown",
        "schema_uninitialized",
        "migration_required",
        "newer_schema",
    )
}


def _merge(*tables: Mapping[int, Sequence[str]]) -> dict[int, list[str]]:
    merged: dict[int, list[str]] = {}
    for table in tables:
        for status, codes in table.items():
            found = merged.setdefault(status, [])
            found.extend(code for code in codes if code not in found)
    return merged


def endpoint(
    *,
    operation_id: str,
    summary: str,
    permission: str | None,
    ok: Mapping[int, Any],
    errors: Mapping[int, Sequence[str]] | None = None,
    request: Any = None,
    body: bool = False,
    path_ids: bool = False,
    listing: bool = False,
    parameters: Sequence[OpenApiParameter | type[Any]] | None = None,
    description: str = "",
    tags: Sequence[str] = (),
) -> Callable[[Any], Any]:
    """``extend_schema`` for one operation of the API."""
    tables = [AUTH_ERRORS, errors or {}, INFRA_ERRORS]
    if body:
        tables.append(BODY_ERRORS)
    if path_ids:
        tables.append(PATH_ID_ERRORS)
    if listing:
        tables.append(LIST_ERRORS)
    responses: dict[Any, Any] = dict(ok)
    for status, codes in sorted(_merge(*tables).items()):
        responses[(status, PROBLEM_CONTENT_TYPE)] = OpenApiResponse(
            response=ProblemOutput, description="codes: " + ", ".join(f"`{c}`" for c in codes)
        )
    needs = f"Requires the `{permission}` permission." if permission else "Requires a login."
    return extended(
        operation_id=operation_id,
        summary=summary,
        description=(description + "\n\n" + needs).strip(),
        request=request,
        responses=responses,
        parameters=list(parameters or ()),
        tags=list(tags),
    )


def extended(**kwargs: Any) -> Callable[[Any], Any]:
    """``extend_schema(**kwargs)`` for a view method, built on :class:`BatchSchema`:
    drf-spectacular builds on the method's own schema class when it has one,
    else on the project's ``DEFAULT_SCHEMA_CLASS`` — in a host project, maybe
    DRF's own, which cannot document an operation."""

    def decorate(method: Any) -> Any:
        method.schema = BatchSchema
        return extend_schema(**kwargs)(method)

    return decorate


class BatchSchema(AutoSchema):
    """The API's schema class (every view's, ``oxide_batch.api.contract``): the
    document states what the inputs enforce, from the same declarations.

    - An :class:`Input` refuses members it does not declare, so its object is
      ``additionalProperties: false``.
    - A field documented with its own schema (``extend_schema_field`` or
      :func:`~oxide_batch.api.fields.document_as`: names, operator strings,
      identifiers, envelopes) is documented by that alone; drf-spectacular would
      otherwise add an empty-string alternative for ``allow_blank`` fields, whose
      empty value the domain refuses (``empty_name``).
    - A component's description is its serializer's own docstring, written for
      the API's users; drf-spectacular would otherwise fall back on a base
      class's, which speaks of the implementation (``Input``'s).
    - drf-spectacular documents request bodies of PUT, PATCH and POST only; the
      hold release (``DELETE instances/{id}/hold``) carries one too (reason code
      and operation id, contract §4.2), so a DELETE is documented like a POST."""

    def _map_basic_serializer(self, serializer: Any, direction: str) -> Any:
        schema = super()._map_basic_serializer(serializer, direction)  # type: ignore[no-untyped-call]
        if isinstance(serializer, Input) or (
            isinstance(serializer, type) and issubclass(serializer, Input)
        ):
            schema["additionalProperties"] = False
        own = type(force_instance(serializer)).__dict__.get("__doc__")  # type: ignore[no-untyped-call]
        schema.pop("description", None)
        if own:
            schema["description"] = inspect.cleandoc(own)
        fields = force_instance(serializer).fields  # type: ignore[no-untyped-call]
        for name, field in fields.items():
            # A ListSerializer's bounds (partition plans) are not documented upstream.
            if isinstance(field, ListSerializer) and name in schema.get("properties", {}):
                for attribute, keyword in (("min_length", "minItems"), ("max_length", "maxItems")):
                    bound = getattr(field, attribute, None)
                    if bound is not None:
                        schema["properties"][name][keyword] = bound
                if name in getattr(serializer, "unique_items", ()):
                    schema["properties"][name]["uniqueItems"] = True
        return schema

    def _get_request_body(self, direction: str = "request") -> Any:
        if self.method != "DELETE":
            return super()._get_request_body(direction)  # type: ignore[no-untyped-call]
        self.method = "POST"
        try:
            return super()._get_request_body(direction)  # type: ignore[no-untyped-call]
        finally:
            self.method = "DELETE"

    def _insert_field_validators(self, field: Any, schema: dict[str, Any]) -> None:
        if has_override(field, "field"):
            return
        super()._insert_field_validators(field, schema)  # type: ignore[no-untyped-call]
