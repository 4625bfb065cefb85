"""What every serializer of the API shares: :class:`Input` (unknown members
refused, :meth:`Input.to_domain` builds the domain values), :class:`Output`
(read-only rendering), the page envelope, and the helpers that validate one
member under :func:`at` so a domain error names its field."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from oxide_batch.api.errors import InvalidInput
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import DomainError, IdentifierOutOfRange
from oxide_batch.domain.names import (
    IdentifierKind,
    NameKind,
    OperatorStringKind,
    validate_identifier,
    validate_new_name,
    validate_operator_string,
)
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope, StateLimits

if TYPE_CHECKING:
    _Serializer = serializers.Serializer[Any]
else:
    _Serializer = serializers.Serializer

K = IdentifierKind
REASON_CODE = OperatorStringKind.REASON_CODE
OPERATION_ID = OperatorStringKind.OPERATION_ID


@contextmanager
def at(path: str) -> Iterator[None]:
    """Attribute a domain error raised inside the block to the input field ``path``."""
    try:
        yield
    except (DomainError, IdentifierOutOfRange) as error:
        raise InvalidInput({path: [error]}) from None


def state_limits() -> StateLimits:
    return StateLimits(
        batch_settings.STATE_MAX_BYTES,
        batch_settings.STATE_MAX_DEPTH,
        bytes_set_by="OXIDE_BATCH_STATE_MAX_BYTES",
        depth_set_by="OXIDE_BATCH_STATE_MAX_DEPTH",
    )


def identifier(path: str, kind: IdentifierKind, value: int) -> int:
    with at(path):
        return validate_identifier(kind, value)


def name(path: str, kind: NameKind, value: str) -> str:
    """A name the request writes or names: the seed's rule and no invisible
    character (decision 201)."""
    with at(path):
        return validate_new_name(value, kind)


def envelope(path: str, raw: Any, kind: EnvelopeKind, limits: StateLimits) -> StateEnvelope | None:
    if raw is None:
        return None
    with at(path):
        return StateEnvelope.from_json(raw, kind=kind, limits=limits)


def operator_string(path: str, kind: OperatorStringKind, value: str) -> str:
    with at(path):
        return validate_operator_string(value, kind)


# The bound fields of each input class (see ``Input.fields``).
_BOUND_FIELDS: dict[type[Any], Any] = {}


class Input(_Serializer):
    """Refuses members it does not declare (a typo must not be ignored). A
    subclass must not change its fields per instance (``get_fields`` may add
    fields, the same for every instance): see ``fields``."""

    # Its fields are built once per class, not per request: DRF gives every
    # serializer instance a deep copy of each declared field (re-running every
    # field's ``__init__``, nested serializers included) so that one instance may
    # change its own fields — which no input does. Validating reads the fields and
    # never writes to them (values and errors live on the serializer instance and
    # in local variables), so one bound set per class serves every request and
    # thread; for a chunk commit that copy was a tenth of the request's CPU
    # (docs/performance.md).
    @property
    def fields(self) -> Any:
        cls = type(self)
        fields = _BOUND_FIELDS.get(cls)
        if fields is None:
            # DRF's own ``fields`` of one prototype instance, kept for the class.
            prototype = cls()
            fields = _BOUND_FIELDS[cls] = super(Input, prototype).fields
        return fields

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = [key for key in data if key not in self.fields]
            if unknown:
                raise serializers.ValidationError(
                    {
                        str(key)[:128]: [ErrorDetail("unknown member", code="unknown_member")]
                        for key in unknown
                    }
                )
        return super().to_internal_value(data)

    def to_domain(self) -> Any:
        return self.validated_data

    # Inputs are never saved through the serializer.
    def create(self, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def update(self, instance: Any, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


class Output(_Serializer):
    # Read-only rendering; never validates or saves.

    def create(self, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def update(self, instance: Any, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


class PageOutput(Output):
    next = serializers.URLField(allow_null=True, help_text="The next page, or null at the end.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page, or null.")


@extend_schema_field(
    {
        "type": "string",
        "pattern": "^(APPLIED|REPLAYED)$",
        "description": "APPLIED now, or REPLAYED: the recorded outcome answered again.",
    }
)
class ResponseOutcomeField(serializers.CharField):
    """``APPLIED`` or ``REPLAYED`` (a pattern, not an enum: the audit rows'
    ``outcome`` is another choice set under the same name)."""


def name_components() -> None:
    """OpenAPI component names without the ``Input``/``Output`` suffix
    (``ExecutionOutput`` → ``Execution``; request bodies get ``Request`` appended).
    Run once every serializer module is imported (the package's ``__init__`` does)."""
    pending: list[type[Any]] = [Input, Output]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        for suffix in ("Input", "Output", "Query"):
            if cls.__name__.endswith(suffix) and cls.__name__ != suffix:
                cls.Meta = type("Meta", (), {"ref_name": cls.__name__.removesuffix(suffix)})
