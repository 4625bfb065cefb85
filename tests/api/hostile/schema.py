"""The operations, enumerated from the generated OpenAPI schema (as
``test_schema.py`` does), so a new endpoint is attacked as soon as it is routed."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from oxide_batch.api.docs import schema_document

PREFIX = "/api/v1/"
INPUT_DIGEST = "ab" * 32


@cache
def schema() -> dict[str, Any]:
    document: dict[str, Any] = schema_document()
    return document


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with ``$ref`` and a single-entry ``allOf`` inlined (``nullable`` kept)."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return resolve({**schema()["components"]["schemas"][name], **_without(node, "$ref")})
    if len(node.get("allOf", ())) == 1:
        return resolve({**node["allOf"][0], **_without(node, "allOf")})
    return node


def _without(node: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k != key}


@dataclass(frozen=True)
class Operation:
    method: str
    template: str  # "executions/{execution_id}/transition"
    operation_id: str
    body: dict[str, Any] | None  # the resolved request schema
    query: tuple[dict[str, Any], ...]
    path_names: tuple[str, ...]

    def __str__(self) -> str:
        return self.operation_id

    def path(self, values: dict[str, Any]) -> str:
        return self.template.format(**{name: values[name] for name in self.path_names})

    @property
    def mutating(self) -> bool:
        return self.body is not None


def operations() -> list[Operation]:
    found = []
    for template, item in schema()["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            parameters = operation.get("parameters", [])
            found.append(
                Operation(
                    method=method.upper(),
                    template=template.removeprefix(PREFIX),
                    operation_id=operation["operationId"],
                    body=resolve(body["schema"]) if body else None,
                    query=tuple(p for p in parameters if p["in"] == "query"),
                    path_names=tuple(p["name"] for p in parameters if p["in"] == "path"),
                )
            )
    return sorted(found, key=str)


OPERATIONS = operations()
BODY_OPERATIONS = [op for op in OPERATIONS if op.mutating]
QUERY_OPERATIONS = [op for op in OPERATIONS if op.query]
PATH_OPERATIONS = [op for op in OPERATIONS if op.path_names]


def example(node: dict[str, Any]) -> Any:
    """A plausible value of a schema (used where no recipe knows better)."""
    node = resolve(node)
    if "enum" in node:
        return node["enum"][0]
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        return {name: example(child) for name, child in node["properties"].items()}
    if kind == "object":
        return {}
    if kind == "array":
        return [example(node.get("items", {}))]
    if kind == "integer":
        return max(int(node.get("minimum", 1)), 1)
    if kind == "boolean":
        return False
    if kind == "string":
        if node.get("format") == "date-time":
            return "2025-12-31T00:00:00Z"
        if node.get("pattern") == "^[0-9a-f]{64}$":
            return INPUT_DIGEST
        return "x"
    return {}
