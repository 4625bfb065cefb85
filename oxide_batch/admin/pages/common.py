"""What the console's inspection pages share: the short column names, the
time, count and status cells, search by id or job name, the job-name filter
and the filter by a parent's id."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import (
    QuerySet,
)
from django.http import HttpRequest
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import (
    parse_id,
)
from oxide_batch.admin.display import (
    badge,
    when,
)
from oxide_batch.selectors.job_names import JOB_NAMES_MAX, job_names
from oxide_batch.selectors.parameters import (
    PARAMETER_MATCHES_MAX,
    instances_with,
    is_searchable,
    parse_term,
)

COUNTS = models.COUNT_COLUMNS
SKIP_COUNTS = models.SKIP_COUNT_COLUMNS
SHORT = {
    "read_count": "read",
    "processed_count": "processed",
    "written_count": "written",
    "filtered_count": "filtered",
    "committed_count": "committed",
    "rolled_back_count": "rolled back",
    "read_skip_count": "read",
    "process_skip_count": "process",
    "write_skip_count": "write",
}


def moment(field: str, description: str) -> Any:
    """An admin column/field for a timestamp: relative and absolute UTC (never
    Django's locale default without a time zone), sortable by the field."""

    @admin.display(description=description, ordering=field)
    def show(self: Any, obj: Any) -> SafeString:
        return when(getattr(obj, field))

    return show


def exit_code_tells(obj: Any) -> bool:
    """Whether an exit code says more than the status beside it: not the
    default ``UNKNOWN`` (a FAILED or ABANDONED run usually keeps it), not
    ``EXECUTING``, not the status repeated."""
    code = obj.exit_code or ""
    return code not in {"", "UNKNOWN", "EXECUTING", obj.status}


def counts_text(obj: Any) -> str:
    return ", ".join(f"{SHORT[c]} {getattr(obj, c)}" for c in COUNTS if getattr(obj, c)) or "0"


def skipped(obj: Any) -> int:
    """A step's (or a partition's) skipped items, every phase."""
    return sum(getattr(obj, c) for c in SKIP_COUNTS)


def skips_text(obj: Any) -> str:
    """ "3 (read 1, process 2)" of a step or a partition; "0" when it skipped nothing."""
    total = skipped(obj)
    if not total:
        return "0"
    phases = ", ".join(f"{SHORT[c]} {getattr(obj, c)}" for c in SKIP_COUNTS if getattr(obj, c))
    return f"{total} ({phases})"


def counts_with_skips(obj: Any) -> str:
    """The counters and, when it skipped anything, the skips."""
    text = counts_text(obj)
    return text if not skipped(obj) else f"{text}; skipped {skips_text(obj)}"


class StatusColumns:
    """The status (a badge, sortable) and the counters, as every page of rows
    with a batch status and counts shows them (executions, steps, partitions)."""

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: Any) -> SafeString:
        return badge(obj.status)

    @admin.display(description="counters")
    def counts(self, obj: Any) -> str:
        return counts_text(obj)


class SearchByIdOrName:
    """``123`` → primary key; ``name=value`` → the instances whose visible
    parameter ``name`` has exactly that value (:mod:`oxide_batch.selectors.parameters`);
    anything else → the exact (indexed) job name."""

    name_field = "job_name"
    instance_field = "pk"

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip().lstrip("#")
        if not term:
            return queryset, False
        if term.isascii() and term.isdigit():
            pk = parse_id(term)
            return (queryset.filter(pk=pk) if pk else queryset.none()), False
        parameter = parse_term(term)
        if parameter is not None and is_searchable(parameter.name):
            found = instances_with(models.JobInstance, parameter)
            if found.truncated:
                messages.info(
                    request,
                    f"More than {PARAMETER_MATCHES_MAX} instances have "
                    f"{parameter.name}={parameter.value}; the newest "
                    f"{PARAMETER_MATCHES_MAX} are searched — add a job name filter.",
                )
            return queryset.filter(**{f"{self.instance_field}__in": list(found.ids)}), False
        if parameter is not None:
            # A job name may contain "=": the term is searched as one. A hidden
            # parameter is never searched (its value would be told by trial), and
            # the note is the same whatever value was typed.
            messages.info(
                request,
                f"{parameter.name!r} is not a visible parameter "
                "(OXIDE_BATCH_VISIBLE_PARAMETERS), so the search is for a job of that exact name.",
            )
        return queryset.filter(**{self.name_field: term}), False


class ParentFilter(admin.SimpleListFilter):
    """The rows of one parent (an instance, an execution, a step), by the id a
    detail page's "see all" link passes (``?execution=12``): that id is the one
    choice; a value that is no id (:func:`parse_id`) filters nothing. A
    subclass names the parameter and the ``field`` holding the parent's id."""

    field: str

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"#{value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: pk}) if (pk := parse_id(value)) else queryset


class JobNameFilter(admin.SimpleListFilter):
    """Every job name of the page's own table, whatever definition its jobs were
    launched on: one bounded index walk (:func:`oxide_batch.selectors.job_names.job_names`),
    never a DISTINCT or COUNT over the table. Beyond :data:`JOB_NAMES_MAX` names
    the list says it is truncated; a typed name (search, or ``?job_name=``)
    still filters, and is shown as the selected choice."""

    title = "job name"
    parameter_name = "job_name"
    template = "admin/oxide_batch/job_name_filter.html"
    truncated = False
    cap = JOB_NAMES_MAX

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        found = job_names(model_admin.model, limit=self.cap)
        self.truncated = found.truncated
        names = list(found.names)
        value = self.value()
        if value and value not in names:
            names.append(value)
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(job_name=value) if value else queryset
