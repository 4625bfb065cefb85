"""JSON Schemas of the request members the domain reads as free JSON (manifests,
parameter maps, flow targets), stated from the domain's own rules and limits so
that a schema-valid member is one the domain accepts.

The document is OpenAPI 3.0, whose ``integer`` is a number without a fraction
(``1.0`` is not one, as the API reads it; in 3.1 it would be). What 3.0 cannot
state is said in the member's description instead: the rule for a map's keys
(``propertyNames`` is 3.1), rules across members (a manifest's ``job`` equals
the body's ``job_name``; a flow graph's ``entry`` and transitions name declared
nodes, node ids are unique; a parameter name is in one of the two maps only)
and the limits counted over a whole document (a manifest ≤ 64 KiB canonical,
nesting ≤ 64 levels).
"""

from __future__ import annotations

from typing import Any

from oxide_batch.api.patterns import name_pattern
from oxide_batch.domain.definitions import SUPPORTED_FORMATS
from oxide_batch.domain.flow import (
    MAX_NODES,
    MAX_START_LIMIT,
    MAX_TRANSITIONS,
    NodeKind,
    TerminalKind,
)
from oxide_batch.domain.names import NameKind
from oxide_batch.domain.parameters import (
    I64_MAX,
    I64_MIN,
    MAX_STRING_PARAMETER_BYTES,
    U64_MAX,
    ParameterType,
)


def name_schema(kind: NameKind) -> dict[str, Any]:
    """What ``validate_name`` accepts, as far as JSON Schema can say it."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": kind.max_bytes,
        "pattern": name_pattern(kind.max_bytes),
    }


def _closed(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


FLOW_TARGET: dict[str, Any] = {
    "oneOf": [
        _closed(["node"], node=name_schema(NameKind.NODE)),
        _closed(["terminal"], terminal={"type": "string", "enum": [k.value for k in TerminalKind]}),
    ]
}

# A string parameter: at most 64 KiB of UTF-8, no NUL (decision 224). JSON Schema
# counts characters, not bytes: maxLength is the bound every refused string
# breaks (more than 65,536 characters is more than 65,536 bytes), so the schema
# never forbids what the server takes; the byte rule is stated in words.
_PARAMETER_STRING: dict[str, Any] = {
    "type": "string",
    "maxLength": MAX_STRING_PARAMETER_BYTES,
    "pattern": "^[^\\x00]*$",
    "description": f"At most {MAX_STRING_PARAMETER_BYTES:,} UTF-8 bytes (maxLength "
    "counts characters; a string of fewer characters but more bytes is refused "
    "too, `parameter_string_too_long`), no NUL.",
}
_TYPED_VALUES: dict[ParameterType, dict[str, Any]] = {
    ParameterType.STRING: _PARAMETER_STRING,
    ParameterType.I64: {"type": "integer", "minimum": I64_MIN, "maximum": I64_MAX},
    ParameterType.U64: {"type": "integer", "minimum": 0, "maximum": U64_MAX},
    ParameterType.BOOL: {"type": "boolean"},
}
PARAMETER_VALUE: dict[str, Any] = {
    "anyOf": [
        _PARAMETER_STRING,
        {"type": "boolean"},
        {"type": "integer", "minimum": I64_MIN, "maximum": U64_MAX},
        *(
            _closed(["type", "value"], type={"type": "string", "enum": [type_.value]}, value=value)
            for type_, value in _TYPED_VALUES.items()
        ),
    ]
}


NAME_KEYS = (
    "(a name: 1–{bytes} UTF-8 bytes, no control or invisible character (Unicode Cf, Zl, "
    "Zp), no surrounding whitespace)"
)

# Parameter name → value (``JobParameter.from_json``).
PARAMETER_MAP: dict[str, Any] = {
    "type": "object",
    "additionalProperties": PARAMETER_VALUE,
    "description": "Keys are parameter names "
    + NAME_KEYS.format(bytes=NameKind.PARAMETER.max_bytes)
    + ".",
}


# Any JSON value but a float (a manifest's own members; canonical JSON has no floats).
_NO_FLOAT_SCALARS: list[dict[str, Any]] = [
    {"type": "boolean"},
    {"type": "integer"},
    {"type": "string", "pattern": "^[^\\x00]*$", "nullable": True},
]
NO_FLOAT_VALUE: dict[str, Any] = {
    "anyOf": [
        *_NO_FLOAT_SCALARS,
        {"type": "array", "items": {"anyOf": _NO_FLOAT_SCALARS}},
        {"type": "object", "additionalProperties": {"anyOf": _NO_FLOAT_SCALARS}},
    ]
}

_NODE = _closed(
    ["id", "kind"],
    id=name_schema(NameKind.NODE),
    kind={"type": "string", "enum": [k.value for k in NodeKind]},
    step=name_schema(NameKind.STEP),
    start_limit={"type": "integer", "minimum": 1, "maximum": MAX_START_LIMIT},
    allow_start_if_complete={"type": "boolean"},
)
_TRANSITION = _closed(
    ["source", "pattern", "target"],
    source=name_schema(NameKind.NODE),
    pattern=name_schema(NameKind.EXIT_CODE),
    target=FLOW_TARGET,
)
_FLOW_FORMATS = sorted(SUPPORTED_FORMATS - {1})


def _manifest_format(formats: list[int], **members: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "format": {"type": "integer", "enum": formats},
            "job": name_schema(NameKind.JOB),
            **members,
        },
        "required": ["format", "job", *members],
        "additionalProperties": NO_FLOAT_VALUE,
    }


MANIFEST: dict[str, Any] = {
    "description": (
        "A JSON object without floats, at most 64 KiB canonical and 64 levels deep "
        "(the schema states two). `job` equals the request's `job_name`. Format 1 is "
        f"any such object; formats {', '.join(map(str, _FLOW_FORMATS))} are flow "
        "graphs: `entry` and every transition's `source` and `target.node` name a "
        "declared node, and node ids are unique."
    ),
    "oneOf": [
        _manifest_format([1]),
        _manifest_format(
            _FLOW_FORMATS,
            entry=name_schema(NameKind.NODE),
            nodes={"type": "array", "items": _NODE, "minItems": 1, "maxItems": MAX_NODES},
            transitions={"type": "array", "items": _TRANSITION, "maxItems": MAX_TRANSITIONS},
        ),
    ],
}
