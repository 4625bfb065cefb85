"""List filters (django-filter), SPEC §9: ``status`` (repeatable), ``job_name``,
``created_after``/``created_before``, ``ended_after``/``ended_before``,
``unresolved_for`` (seconds: UNKNOWN, or active without activity for that long).

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

from oxide_batch import selectors as batch_selectors
from oxide_batch.api import deps
from oxide_batch.domain.errors import DomainError
from oxide_batch.domain.names import NameKind, validate_name
from oxide_batch.domain.status import BatchStatus


def _job_name(value: str) -> None:
    try:
        validate_name(value, NameKind.JOB)
    except DomainError as error:
        raise DjangoValidationError(error.message, code=error.code) from None


MAX_UNRESOLVED_SECONDS = 10 * 365 * 24 * 3600
_SECONDS = re.compile(r"[0-9]{1,9}")


def _seconds(value: str) -> None:
    if _SECONDS.fullmatch(value) is None or int(value) > MAX_UNRESOLVED_SECONDS:
        raise DjangoValidationError(
            f"a number of seconds from 0 to {MAX_UNRESOLVED_SECONDS}", code="invalid"
        )


class InstantFormField(IsoDateTimeField):  # type: ignore[misc]
    """An RFC 3339 / ISO 8601 instant, converted to UTC (out of range → invalid)."""

    def to_python(self, value: Any) -> datetime | None:
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
        method="filter_unresolved", validators=[_seconds], strip=False
    )

    def filter_unresolved(self, queryset: Any, name: str, value: str) -> Any:
        unresolved = batch_selectors.unresolved_executions_queryset(
            now=deps.clock.now(), inactive_for=timedelta(seconds=int(value))
        )
        return queryset.filter(pk__in=unresolved.values("pk"))


class InstanceFilter(django_filters.FilterSet):  # type: ignore[misc]
    job_name = django_filters.CharFilter(field_name="job_name", validators=[_job_name], strip=False)


def apply_filters(
    filterset_class: type[django_filters.FilterSet], request: Any, queryset: Any
) -> Any:
    """The filtered queryset, or 400 ``invalid_request`` with the form's errors by parameter."""
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
