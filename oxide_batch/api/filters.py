"""List filters (django-filter), contract §4.4: ``status`` (repeatable), ``job_name``,
``created_after``/``created_before``, ``ended_after``/``ended_before``,
``unresolved_for`` (seconds or a duration such as ``15m``: UNKNOWN, or active
without activity for that long);
the audit lists filter by ``job_execution_id``, ``job_instance_id``, ``action``,
``outcome`` and ``operation_id``.

``*_after`` is inclusive and ``*_before`` exclusive (a half-open range); an
instant without an offset is UTC. Every value is validated (an unknown status,
a bad name or instant → 400 ``invalid_request`` naming the parameter).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import django_filters
from django.core.exceptions import ValidationError as DjangoValidationError
from django_filters.fields import IsoDateTimeField
from rest_framework.exceptions import ErrorDetail, ValidationError

from oxide_batch.api import deps
from oxide_batch.domain.durations import MAX_AGE, parse_age
from oxide_batch.domain.errors import DomainError
from oxide_batch.domain.names import (
    MAX_IDENTIFIER,
    NameKind,
    OperatorStringKind,
    is_control,
    validate_name,
    validate_operator_string,
)
from oxide_batch.domain.operator import OperatorAction, RecordOutcome
from oxide_batch.domain.retention import RetentionAction
from oxide_batch.domain.status import BatchStatus
from oxide_batch.selectors.unresolved import unresolved_executions_queryset


def _job_name(value: str) -> None:
    try:
        validate_name(value, NameKind.JOB)
    except DomainError as error:
        raise DjangoValidationError(error.message, code=error.code) from None


MAX_UNRESOLVED_SECONDS = int(MAX_AGE.total_seconds())


def unresolved_age(value: str) -> timedelta:
    """``unresolved_for``: seconds (``900``) or a duration (``15m``, contract §4.4),
    0 to ten years — :func:`~oxide_batch.domain.durations.parse_age`, the very
    syntax of ``batch_executions --unresolved-for``."""
    try:
        return parse_age(value)
    except ValueError:
        raise DjangoValidationError(
            f"seconds (0 to {MAX_UNRESOLVED_SECONDS}) or a duration such as 90s, 15m, 1h, 30d",
            code="invalid",
        ) from None


# What ``unresolved_age`` accepts, as far as a pattern can say "at most ten years":
# seconds of up to 8 digits, ms/s/m amounts of up to 5 digits, hours of up to 4 and
# days of up to 3 (every match is accepted; the largest values above are beyond it).
UNRESOLVED_FOR_SCHEMA = {
    "type": "string",
    "pattern": "^(?:[0-9]{1,8}|[0-9]{1,5}(?:ms|s|m)|[0-9]{1,4}h|[0-9]{1,3}d)$",
}


def _unresolved_age(value: str) -> None:
    unresolved_age(value)


class InstantFormField(IsoDateTimeField):  # type: ignore[misc]
    """An RFC 3339 / ISO 8601 instant, converted to UTC (out of range → invalid)."""

    def to_python(self, value: Any) -> datetime | None:
        # Django's parse_datetime tries datetime.fromisoformat first, which
        # (CPython 3.11) stops at a NUL: "…Z\x00anything" would parse.
        if isinstance(value, str) and any(is_control(character) for character in value):
            raise DjangoValidationError("not a valid instant", code="invalid")
        try:
            result = super().to_python(value)
            return None if result is None else result.astimezone(UTC)
        except (OverflowError, ValueError):
            raise DjangoValidationError("not a valid instant", code="invalid") from None


class InstantFilter(django_filters.IsoDateTimeFilter):  # type: ignore[misc]
    field_class = InstantFormField


class ExecutionFilter(django_filters.FilterSet):  # type: ignore[misc]
    status = django_filters.MultipleChoiceFilter(
        field_name="status",
        choices=[(status.value, status.value) for status in BatchStatus],
        help_text="Durable status codes; repeat the parameter for several.",
    )
    job_name = django_filters.CharFilter(field_name="job_name", validators=[_job_name], strip=False)
    created_after = InstantFilter(field_name="created_at", lookup_expr="gte")
    created_before = InstantFilter(field_name="created_at", lookup_expr="lt")
    ended_after = InstantFilter(field_name="ended_at", lookup_expr="gte")
    ended_before = InstantFilter(field_name="ended_at", lookup_expr="lt")
    unresolved_for = django_filters.CharFilter(
        method="filter_unresolved", validators=[_unresolved_age], strip=False
    )

    def filter_unresolved(self, queryset: Any, name: str, value: str) -> Any:
        unresolved = unresolved_executions_queryset(
            now=deps.clock.now(), inactive_for=unresolved_age(value)
        )
        return queryset.filter(pk__in=unresolved.values("pk"))


class InstanceFilter(django_filters.FilterSet):  # type: ignore[misc]
    job_name = django_filters.CharFilter(field_name="job_name", validators=[_job_name], strip=False)


# -- audit lists ----------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[0-9]{1,19}")


def _identifier(value: str) -> None:
    if _IDENTIFIER.fullmatch(value) is None or not 1 <= int(value) <= MAX_IDENTIFIER:
        raise DjangoValidationError(
            f"an identifier from 1 to {MAX_IDENTIFIER}", code="invalid_identifier"
        )


def _operation_id(value: str) -> None:
    try:
        validate_operator_string(value, OperatorStringKind.OPERATION_ID)
    except DomainError as error:
        raise DjangoValidationError(error.message, code=error.code) from None


def id_filter(field_name: str) -> django_filters.CharFilter:
    return django_filters.CharFilter(field_name=field_name, validators=[_identifier], strip=False)


def operation_id_filter() -> django_filters.CharFilter:
    return django_filters.CharFilter(
        field_name="operation_id", validators=[_operation_id], strip=False
    )


class RecoveryDecisionFilter(django_filters.FilterSet):  # type: ignore[misc]
    job_execution_id = id_filter("job_execution_id")
    job_instance_id = id_filter("job_instance_id")


class OperatorRequestFilter(django_filters.FilterSet):  # type: ignore[misc]
    job_execution_id = id_filter("job_execution_id")
    job_instance_id = id_filter("job_instance_id")
    action = django_filters.ChoiceFilter(
        field_name="action", choices=[(action.value, action.value) for action in OperatorAction]
    )
    outcome = django_filters.ChoiceFilter(
        field_name="outcome", choices=[(outcome.value, outcome.value) for outcome in RecordOutcome]
    )
    operation_id = operation_id_filter()


class RetentionRecordFilter(django_filters.FilterSet):  # type: ignore[misc]
    job_instance_id = id_filter("job_instance_id")
    action = django_filters.ChoiceFilter(
        field_name="action", choices=[(action.value, action.value) for action in RetentionAction]
    )
    outcome = django_filters.ChoiceFilter(
        field_name="outcome", choices=[(outcome.value, outcome.value) for outcome in RecordOutcome]
    )
    operation_id = operation_id_filter()


def apply_filters(
    filterset_class: type[django_filters.FilterSet], request: Any, queryset: Any
) -> Any:
    """The filtered queryset, or 400 ``invalid_request`` with the form's errors by
    parameter. A filter given an empty value (``?job_name=``, as an unset shell
    variable gives) is refused: django-filter would skip it and list everything."""
    empty = {
        name: [ErrorDetail("must not be empty", code="blank")]
        for name in filterset_class.base_filters
        if any(value == "" for value in request.query_params.getlist(name))
    }
    if empty:
        raise ValidationError(empty)
    filterset = filterset_class(request.query_params, queryset=queryset)
    if not filterset.is_valid():
        errors = {
            name: [
                ErrorDetail(" ".join(error.messages), code=error.code or "invalid")
                for error in found
            ]
            for name, found in filterset.form.errors.as_data().items()
        }
        raise ValidationError(errors)
    return filterset.qs
