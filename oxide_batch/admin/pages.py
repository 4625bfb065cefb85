"""Inspection pages (read-only): instances, executions, steps, partitions,
definitions, flow decisions and the audit rows, with drill-down tables bounded
to :data:`LINKED_ROWS` rows and a constant number of queries per page."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from django.contrib import admin, messages
from django.db.models import (
    BooleanField,
    Exists,
    ExpressionWrapper,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.http import HttpRequest
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models, selectors  # noqa: TID251 (the model layer)
from oxide_batch.admin import casefile
from oxide_batch.admin.actions import ExecutionActions, InstanceActions, action_choices
from oxide_batch.admin.base import (
    LINKED_ROWS,
    ReadOnlyAdmin,
    bounded,
    can_view_payload,
    link,
    parse_id,
    table,
)
from oxide_batch.admin.dashboard import NO_CATEGORY, dashboard_view
from oxide_batch.admin.display import (
    ago,
    badge,
    duration,
    fate,
    human_short,
    inactivity,
    latest,
    parameters,
    recorded_by_decision,
    when,
    when_short,
    yes_no,
)
from oxide_batch.admin.display import failure as render_failure
from oxide_batch.admin.eligibility import decision_reason, recorded_evidence
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.domain.status import FailureCategory
from oxide_batch.job_names import JOB_NAMES_MAX, job_names
from oxide_batch.parameter_search import (
    PARAMETER_MATCHES_MAX,
    instances_with,
    is_searchable,
    parse_term,
)
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.repository.control import newest_step_write

COUNTS = models.COUNT_COLUMNS
SHORT = {
    "read_count": "read",
    "processed_count": "processed",
    "written_count": "written",
    "filtered_count": "filtered",
    "committed_count": "committed",
    "rolled_back_count": "rolled back",
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


def _counts(obj: Any) -> str:
    return ", ".join(f"{SHORT[c]} {getattr(obj, c)}" for c in COUNTS if getattr(obj, c)) or "0"


class SearchByIdOrName:
    """``123`` → primary key; ``name=value`` → the instances whose visible
    parameter ``name`` has exactly that value (:mod:`oxide_batch.parameter_search`);
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


class JobNameFilter(admin.SimpleListFilter):
    """Every job name of the page's own table, whatever definition its jobs were
    launched on: one bounded index walk (:func:`oxide_batch.job_names.job_names`),
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


@admin.register(models.JobInstance)
class JobInstanceAdmin(SearchByIdOrName, InstanceActions, ReadOnlyAdmin):
    list_display = ("id", "job_name", "run_parameters", "hold", "created")
    list_filter = (JobNameFilter,)
    search_fields = ("job_name",)
    search_help_text = (
        "An instance id, an exact job name, or name=value for a visible parameter "
        "(e.g. business_date=2026-11-30)."
    )
    ordering = ("-id",)
    fields = (
        "id",
        "job_name",
        "run_parameters",
        "key_digest",
        "created",
        "hold",
        "hold_detail",
        "attempts",
        "operator_actions",
    )

    @admin.display(description="parameters")
    def run_parameters(self, obj: models.JobInstance) -> SafeString:
        return parameters(obj.identifying_parameters)

    @admin.display(description="hold")
    def hold(self, obj: models.JobInstance) -> SafeString:
        return yes_no(obj.hold_placed_at is not None, "HOLD", "no hold")

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: models.JobInstance) -> SafeString:
        return when(obj.created_at)

    @admin.display(description="hold detail")
    def hold_detail(self, obj: models.JobInstance) -> Any:
        if obj.hold_placed_at is None:
            return "—"
        return format_html(
            "by {} ({}) {}", obj.hold_actor, obj.hold_reason_code, when(obj.hold_placed_at)
        )

    @admin.display(description="attempts")
    def attempts(self, obj: models.JobInstance) -> SafeString:
        rows, more = bounded(
            models.JobExecution.objects.filter(job_instance_id=obj.pk)
            .order_by("-attempt")
            .only("id", "attempt", "status", "created_at", "started_at", "ended_at", "version")[
                : LINKED_ROWS + 1
            ]
        )
        return table(
            ("attempt", "execution", "status", "created", "duration", "version"),
            (
                (
                    e.attempt,
                    link("jobexecution", e.pk),
                    badge(e.status),
                    when(e.created_at),
                    duration(e.started_at, e.ended_at, e.status),
                    e.version,
                )
                for e in rows
            ),
            more=more,
            more_url=reverse("admin:oxide_batch_jobexecution_changelist") + f"?instance={obj.pk}",
        )

    @admin.display(description="actions")
    def operator_actions(self, obj: models.JobInstance) -> SafeString:
        note = casefile.read_only_note(getattr(obj, "console_request", None), action_choices(obj))
        return note if note is not None else self.action_links(obj)


class InstanceFilter(admin.SimpleListFilter):
    title = "instance"
    parameter_name = "instance"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"#{value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(job_instance_id=pk) if (pk := parse_id(value)) else queryset


class TriageFilter(admin.SimpleListFilter):
    """What needs a look: the unresolved executions (UNKNOWN, or active and
    inactive longer than ``OXIDE_BATCH_RECOVERY_STALE_AFTER`` — the dashboard's
    and the API's ``unresolved_for`` rule, on the partial index
    ``ob_execution_unresolved``) and the executions that failed in the last 24
    hours, whatever became of them since (``failed_at``, kept when an abandon
    follows: a range on the partial index ``ob_execution_failed``)."""

    title = "needs attention"
    parameter_name = "triage"
    FAILED_WITHIN = selectors.FAILED_WITHIN

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        threshold = human_short(batch_settings.RECOVERY_STALE_AFTER)
        return [
            (
                "unresolved",
                f"unresolved (UNKNOWN, a lease expired, or unclaimed and inactive > {threshold})",
            ),
            ("failed24h", "failed in the last 24 h (also if abandoned or rerun since)"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        if self.value() == "unresolved":
            unresolved = selectors.needs_attention_queryset(
                now=now,
                stale_after=batch_settings.RECOVERY_STALE_AFTER,
                lease_ttl=batch_settings.LEASE_TTL,
            )
            return queryset.filter(pk__in=unresolved.values("pk"))
        if self.value() == "failed24h":
            return queryset.filter(failed_at__gte=now - self.FAILED_WITHIN)
        return queryset


class FailureCategoryFilter(admin.SimpleListFilter):
    """The failure category (the dashboard's categories link here, with the
    24 h triage filter); the choices are the fixed categories, no query."""

    title = "failure category"
    parameter_name = "failure_category"
    #: The failures recorded without a category (the dashboard's "no category" row).
    NONE = NO_CATEGORY

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            *((category.value, category.value) for category in FailureCategory),
            (self.NONE, "no category"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in {category.value for category in FailureCategory}:
            return queryset.filter(failure_category=value)
        if value == self.NONE:
            return queryset.filter(Q(failure_category__isnull=True) | Q(failure_category=""))
        return queryset


def triage_links(request: HttpRequest) -> list[dict[str, Any]]:
    """The "needs attention" choices as links for above the list (on a phone
    the filter sidebar sits below the whole list): each keeps the page's other
    filters and says whether it is the one applied."""
    current = request.GET.get(TriageFilter.parameter_name)
    links = []
    for value, label in (
        (None, "all executions"),
        ("unresolved", "unresolved"),
        ("failed24h", "failed in the last 24 h"),
    ):
        query = request.GET.copy()
        query.pop("p", None)
        query.pop(TriageFilter.parameter_name, None)
        if value is not None:
            query[TriageFilter.parameter_name] = value
        links.append({"url": f"?{query.urlencode()}", "label": label, "selected": current == value})
    return links


@admin.register(models.JobExecution)
class JobExecutionAdmin(SearchByIdOrName, ExecutionActions, ReadOnlyAdmin):
    # What triage reads first comes first and stays on a phone's screen (status,
    # stale); owner, stop and what became of a failure share one "marks" cell;
    # the attempt and the creation time are under the job name (the list is in
    # creation order); the duration is on the page. Seven columns fit 1440 px
    # beside the navigation and the filters.
    list_display = (
        "id",
        "status_badge",
        "inactivity",
        "job",
        "run_parameters",
        "activity",
        "marks",
    )
    list_filter = (
        TriageFilter,
        "status",
        JobNameFilter,
        FailureCategoryFilter,
        "created_at",
        InstanceFilter,
    )
    search_fields = ("job_name",)
    search_help_text = (
        "An execution id, an exact job name, or name=value for a visible parameter "
        "(e.g. business_date=2026-11-30)."
    )
    instance_field = "job_instance_id"
    ordering = ("-created_at", "-id")
    # Status, job, parameters, activity, owner, stop and failure are in the case
    # file above the fields (casefile.py); the fields hold the rest of the row.
    fields = (
        "id",
        "instance",
        "exit_code",
        "created",
        "started",
        "ended",
        "took",
        "version",
        "step_counts",
        "steps",
        "flow_decisions",
        "audit",
        "operator_actions",
    )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        """The exit code only when it says more than the status (not the
        default UNKNOWN, not EXECUTING, not the status repeated)."""
        fields = super().get_fields(request, obj)
        if obj is not None and not exit_code_tells(obj):
            return [field for field in fields if field != "exit_code"]
        return fields

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        context = {**(extra_context or {}), "triage_links": triage_links(request)}
        return super().changelist_view(request, context)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> Any:
        if obj is not None:
            # One proposal read per page, for the case file and the actions field
            # (rendered later, from the object: readonly fields see no request).
            obj.console_proposal = casefile.proposal_for(obj)
            context["case_file"] = casefile.render(request, obj, obj.console_proposal)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(partial(dashboard_view, self.admin_site))
        return [path("dashboard/", view, name="oxide_batch_dashboard"), *super().get_urls()]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = (
            super()
            .get_queryset(request)
            .defer("owner_token")
            .annotate(
                has_owner=ExpressionWrapper(
                    Q(owner_token__isnull=False), output_field=BooleanField()
                ),
                # The instance's parameters in the page's one query (a scalar
                # subquery, not a join: the paginator's count then skips it).
                instance_parameters=Subquery(
                    models.JobInstance.objects.filter(pk=OuterRef("job_instance_id")).values(
                        "identifying_parameters"
                    )[:1]
                ),
                # The newest runtime write of a step (chunk, checkpoint,
                # transition) also counts as activity (contract §2.5.3) — never the
                # steps' updated_at, which a recovery moves; for the page's rows.
                newest_step_write=newest_step_write(),
                # What became of a failure (abandoned, rerun), for failed rows.
                **selectors.failure_fate_annotations(),
                failure_id_given=selectors.failure_id_given(),
            )
        )
        return queryset

    @admin.display(description="parameters")
    def run_parameters(self, obj: Any) -> SafeString:
        return parameters(obj.instance_parameters)

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: models.JobExecution) -> SafeString:
        return badge(obj.status)

    @admin.display(description="duration")
    def took(self, obj: models.JobExecution) -> str:
        return duration(obj.started_at, obj.ended_at, obj.status)

    @admin.display(description="counters")
    def counts(self, obj: Any) -> str:
        return _counts(obj)

    @admin.display(description="job", ordering="job_name")
    def job(self, obj: Any) -> SafeString:
        return format_html(
            "{}<br><small>attempt {} · created {}</small>",
            obj.job_name,
            obj.attempt,
            ago(obj.created_at),
        )

    @admin.display(description="marks")
    def marks(self, obj: Any) -> SafeString:
        """Owner recorded, a stop requested (how long ago), and for a failure
        what became of it — one cell, empty when there is nothing to say."""
        now = timezone.now()
        parts: list[SafeString] = []
        if getattr(obj, "has_owner", False):
            parts.append(format_html('<span class="ob-badge ob-muted">{}</span>', "owner"))
        if obj.stop_requested_at is not None:
            parts.append(
                format_html(
                    '<span class="ob-badge ob-warn">{}</span> {}',
                    "STOP REQUESTED",
                    ago(obj.stop_requested_at, now),
                )
            )
        if obj.failed_at is not None:
            parts.append(fate(obj, now, compact=True))
        if not parts:
            return format_html("{}", "—")
        return format_html_join(SafeString("<br>"), "{}", ((part,) for part in parts))

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Any) -> SafeString:
        return when(obj.created_at)

    @admin.display(description="started")
    def started(self, obj: Any) -> SafeString:
        return when(obj.started_at)

    @admin.display(description="ended")
    def ended(self, obj: Any) -> SafeString:
        return when(obj.ended_at)

    @admin.display(description="last activity")
    def last_activity(self, obj: models.JobExecution) -> SafeString:
        return when(obj.last_activity_at)

    @admin.display(description="last activity")
    def activity(self, obj: Any) -> SafeString:
        return when_short(latest(obj.last_activity_at, getattr(obj, "newest_step_write", None)))

    @admin.display(description="inactivity")
    def inactivity(self, obj: Any) -> SafeString:
        # An owned execution is stale once its owner's lease expired (contract §2.5.3).
        owned = bool(getattr(obj, "has_owner", False))
        return inactivity(
            obj.status,
            latest(obj.last_activity_at, getattr(obj, "newest_step_write", None)),
            threshold=batch_settings.LEASE_TTL if owned else batch_settings.RECOVERY_STALE_AFTER,
            compact=True,
        )

    @admin.display(description="instance")
    def instance(self, obj: models.JobExecution) -> SafeString:
        return link("jobinstance", obj.job_instance_id)

    @admin.display(description="failure")
    def failure(self, obj: models.JobExecution) -> SafeString:
        return render_failure(
            obj.failure_category,
            obj.failure_id,
            execution_id=obj.pk,
            job_name=obj.job_name,
            decision_id=recorded_by_decision(obj.recovery_decision_id, obj.failed_at),
            given=bool(getattr(obj, "failure_id_given", False)),
        )

    @admin.display(description="records (the steps' totals)")
    def step_counts(self, obj: models.JobExecution) -> str:
        """The steps' counts summed with each record once: a partition worker's
        counts are in its partition and, once aggregated, in the manager step,
        so worker steps are left out (the job-level counters are not shown:
        only a terminal rollback moves them). One query."""
        is_worker = models.StepPartition.objects.filter(worker_step_execution_id=OuterRef("pk"))
        sums = (
            models.StepExecution.objects.filter(job_execution_id=obj.pk)
            .exclude(Exists(is_worker))
            .aggregate(**{c: Sum(c) for c in COUNTS})
        )
        text = ", ".join(f"{SHORT[c]} {sums[c] or 0:,}" for c in COUNTS if sums[c]) or "none yet"
        return f"{text} — a partitioned step counts its partitions once it has aggregated them"

    @admin.display(description="steps")
    def steps(self, obj: models.JobExecution) -> SafeString:
        rows, more = bounded(
            models.StepExecution.objects.filter(job_execution_id=obj.pk)
            .order_by("id")
            .only("id", "step_name", "status", *COUNTS, "started_at", "ended_at", "version")[
                : LINKED_ROWS + 1
            ]
        )
        return table(
            ("step", "status", "counts", "duration", "version"),
            (
                (
                    link("stepexecution", s.pk, s.step_name),
                    badge(s.status),
                    _counts(s),
                    duration(s.started_at, s.ended_at, s.status, parent_status=obj.status),
                    s.version,
                )
                for s in rows
            ),
            more=more,
            more_url=reverse("admin:oxide_batch_stepexecution_changelist") + f"?execution={obj.pk}",
        )

    @admin.display(description="flow decisions")
    def flow_decisions(self, obj: models.JobExecution) -> SafeString:
        rows, more = bounded(
            models.FlowDecision.objects.filter(job_execution_id=obj.pk)
            .order_by("sequence")
            .only(
                "id",
                "sequence",
                "source_node_id",
                "kind",
                "observed_outcome",
                "target_node_id",
                "terminal",
            )[: LINKED_ROWS + 1]
        )
        return table(
            ("#", "from", "outcome", "kind", "to"),
            (
                (
                    link("flowdecision", d.pk, d.sequence),
                    d.source_node_id,
                    d.observed_outcome,
                    d.kind,
                    d.target_node_id or d.terminal or "—",
                )
                for d in rows
            ),
            more=more,
            more_url=reverse("admin:oxide_batch_flowdecision_changelist") + f"?execution={obj.pk}",
        )

    @admin.display(description="operator audit")
    def audit(self, obj: models.JobExecution) -> SafeString:
        rows = list(
            models.OperatorRequest.objects.filter(job_execution_id=obj.pk).order_by("-id")[:20]
        )
        return table(
            ("request", "action", "actor", "outcome", "result", "when"),
            (
                (
                    link("operatorrequest", r.pk),
                    r.action,
                    r.actor,
                    r.rejection_code or r.outcome,
                    badge(r.result_status),
                    when(r.requested_at),
                )
                for r in rows
            ),
        )

    @admin.display(description="actions")
    def operator_actions(self, obj: Any) -> SafeString:
        """The actions the user may take; for a user who may take none of
        those that apply, only the read-only sentence (which permission)."""
        proposal = getattr(obj, "console_proposal", None)
        note = casefile.read_only_note(
            getattr(obj, "console_request", None), action_choices(obj, proposal=proposal)
        )
        return note if note is not None else self.action_links(obj, proposal=proposal)


class ExecutionFilter(admin.SimpleListFilter):
    title = "execution"
    parameter_name = "execution"
    field = "job_execution_id"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"#{value}")] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: pk}) if (pk := parse_id(value)) else queryset


class StepFilter(ExecutionFilter):
    title = "step"
    parameter_name = "step"
    field = "step_execution_id"


@admin.register(models.StepExecution)
class StepExecutionAdmin(ReadOnlyAdmin):
    list_display = ("id", "execution", "step_name", "status_badge", "took", "counts", "created")
    list_filter = ("status", "created_at", ExecutionFilter)
    search_fields = ("=id",)
    search_help_text = "A step execution id."
    ordering = ("-id",)
    fields = (
        "id",
        "execution",
        "step_name",
        "node_id",
        "status_badge",
        "exit_code",
        "failure",
        "created",
        "started",
        "ended",
        "took",
        "version",
        "counts",
        "partitions",
        "checkpoint_viewer",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset: QuerySet[Any] = (
            super()
            .get_queryset(request)
            .defer("checkpoint", "context")
            # A step of a finished execution never reads "running". A scalar
            # subquery, not a join: the paginator's count then skips it.
            .annotate(
                execution_status=Subquery(
                    models.JobExecution.objects.filter(pk=OuterRef("job_execution_id")).values(
                        "status"
                    )[:1]
                ),
                failure_id_given=selectors.failure_id_given(),
            )
        )
        return queryset

    status_badge = JobExecutionAdmin.status_badge
    counts = JobExecutionAdmin.counts
    created = JobExecutionAdmin.created
    started = JobExecutionAdmin.started
    ended = JobExecutionAdmin.ended

    @admin.display(description="duration")
    def took(self, obj: Any) -> str:
        return duration(
            obj.started_at,
            obj.ended_at,
            obj.status,
            parent_status=getattr(obj, "execution_status", None),
        )

    @admin.display(description="failure")
    def failure(self, obj: models.StepExecution) -> SafeString:
        if not obj.failure_category:
            return render_failure(None, None, execution_id=obj.job_execution_id, job_name="")
        # The job name only when the link uses it (one read of the execution).
        uses_name = "{job_name}" in batch_settings.FAILURE_URL_TEMPLATE
        return render_failure(
            obj.failure_category,
            obj.failure_id,
            execution_id=obj.job_execution_id,
            job_name=obj.job_execution.job_name if uses_name else "",
            decision_id=recorded_by_decision(obj.recovery_decision_id, step=True),
            given=bool(getattr(obj, "failure_id_given", False)),
        )

    @admin.display(description="execution")
    def execution(self, obj: models.StepExecution) -> SafeString:
        return link("jobexecution", obj.job_execution_id)

    @admin.display(description="partitions")
    def partitions(self, obj: models.StepExecution) -> SafeString:
        rows, more = bounded(
            models.StepPartition.objects.filter(step_execution_id=obj.pk)
            .order_by("ordinal")
            .only("id", "partition_key", "ordinal", "status", *COUNTS, "version")[: LINKED_ROWS + 1]
        )
        return table(
            ("#", "partition", "status", "counts", "version"),
            (
                (
                    p.ordinal,
                    link("steppartition", p.pk, p.partition_key),
                    badge(p.status),
                    _counts(p),
                    p.version,
                )
                for p in rows
            ),
            more=more,
            more_url=reverse("admin:oxide_batch_steppartition_changelist") + f"?step={obj.pk}",
        )

    def checkpoint_viewer_context(
        self, request: HttpRequest, obj: models.StepExecution
    ) -> dict[str, Any]:
        raw: dict[str, Any] = dict(
            models.StepExecution.objects.filter(pk=obj.pk)
            .values("checkpoint", "checkpoint_checksum")
            .first()
            or {},
        )
        text = raw.get("checkpoint")
        info: dict[str, Any] = {"present": text is not None, "size": len(text or "")}
        if text is None:
            return info
        try:
            with DjangoJobRepository().begin() as uow:
                state = uow.step_state(obj.pk)
        except OxideBatchError as error:
            info.update(state="corrupt", error=error.code)
            return info
        envelope = state.checkpoint
        info["state"] = "verified" if raw.get("checkpoint_checksum") else "no checksum"
        if envelope is not None:
            info.update(schema=envelope.schema, version=envelope.schema_version)
            if can_view_payload(request):
                info["payload"] = json.dumps(envelope.payload, indent=2, sort_keys=True)
        return info

    @admin.display(description="checkpoint")
    def checkpoint_viewer(self, obj: models.StepExecution) -> SafeString:
        info: dict[str, Any] = getattr(obj, "_checkpoint", {})
        if not info.get("present"):
            return format_html("{}", "No checkpoint.")
        if info.get("state") == "corrupt":
            return format_html(
                '<span class="ob-badge ob-bad">corrupt</span> {} bytes; {}',
                info["size"],
                info["error"],
            )
        payload = (
            format_html('<pre class="ob-payload">{}</pre>', info["payload"])
            if "payload" in info
            else format_html("<p>{}</p>", "The payload is shown only with view_batch_payload.")
        )
        return format_html(
            "schema <code>{}</code> version {} · {} bytes · checksum "
            '<span class="ob-badge ob-ok">{}</span>{}',
            info.get("schema", "?"),
            info.get("version", "?"),
            info["size"],
            info["state"],
            payload,
        )

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        obj = super().get_object(request, object_id, from_field)
        if obj is not None:
            obj._checkpoint = self.checkpoint_viewer_context(request, obj)
        return obj


@admin.register(models.StepPartition)
class StepPartitionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "step",
        "partition_key",
        "ordinal",
        "status_badge",
        "worker",
        "counts",
        "version",
    )
    list_filter = ("status", StepFilter)
    search_fields = ("=id",)
    ordering = ("-id",)
    fields = (
        "id",
        "step",
        "partition_key",
        "ordinal",
        "status_badge",
        "worker",
        "exit_code",
        "counts",
        "version",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).defer("context")

    status_badge = JobExecutionAdmin.status_badge
    counts = JobExecutionAdmin.counts

    @admin.display(description="step")
    def step(self, obj: models.StepPartition) -> SafeString:
        return link("stepexecution", obj.step_execution_id)

    @admin.display(description="worker step")
    def worker(self, obj: models.StepPartition) -> SafeString:
        if obj.worker_step_execution_id is None:
            return format_html("{}", "not assigned")
        return link("stepexecution", obj.worker_step_execution_id)


@admin.register(models.FlowDecision)
class FlowDecisionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "execution",
        "sequence",
        "source_node_id",
        "kind",
        "observed_outcome",
        "target_node_id",
        "terminal",
        "decided",
    )
    list_filter = ("kind", ExecutionFilter)
    search_fields = ("=id",)
    ordering = ("-id",)
    fields = (
        "id",
        "execution",
        "sequence",
        "source_node_id",
        "kind",
        "observed_outcome",
        "target_node_id",
        "terminal",
        "plan_fingerprint",
        "input_digest",
        "decided",
    )
    execution = StepExecutionAdmin.execution
    decided = moment("decided_at", "decided")


@admin.register(models.JobDefinition)
class JobDefinitionAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "revision", "manifest_format", "manifest_digest")
    search_fields = ("job_name", "=manifest_digest")
    ordering = ("-id",)
    fields = (
        "id",
        "job_name",
        "revision",
        "manifest_format",
        "manifest_digest",
        "manifest",
        "registered",
    )
    registered = moment("registered_at", "registered")


@admin.register(models.DefinitionUpgrade)
class DefinitionUpgradeAdmin(ReadOnlyAdmin):
    list_display = ("id", "job_name", "upgrade_key", "from_definition_id", "to_definition_id")
    ordering = ("-id",)
    fields = (
        "id",
        "job_name",
        "upgrade_key",
        "from_definition_id",
        "to_definition_id",
        "step_mapping",
        "registered",
    )
    registered = moment("registered_at", "registered")


@admin.register(models.RecoveryDecision)
class RecoveryDecisionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "execution",
        "prior_status",
        "resulting_status",
        "reason_code",
        "allowed",
        "actor",
        "decided",
    )
    list_filter = ("resulting_status",)
    search_fields = ("=job_execution_id",)
    ordering = ("-decided_at", "-id")
    fields = (
        "id",
        "execution",
        "execution_version",
        "prior_status",
        "resulting_status",
        "reason_code",
        "allowed_why",
        "evidence_taken",
        "note",
        "actor",
        "operator_user_id",
        "decided",
        "resolved_steps",
        "operator_request",
    )
    execution = StepExecutionAdmin.execution
    decided = moment("decided_at", "decided")

    @admin.display(description="allowed because", ordering="eligibility")
    def allowed(self, obj: models.RecoveryDecision) -> SafeString:
        """Why the recovery was allowed (the lease expired, inactive, UNKNOWN),
        or that an operator's override allowed it, with its note (cut)."""
        return decision_reason(obj.eligibility, obj.override_note)

    @admin.display(description="allowed because")
    def allowed_why(self, obj: models.RecoveryDecision) -> SafeString:
        """:meth:`allowed` on the decision's page, whose next field is the note."""
        return decision_reason(obj.eligibility, obj.override_note, note=0)

    @admin.display(description="evidence it was taken on")
    def evidence_taken(self, obj: models.RecoveryDecision) -> SafeString:
        """The evidence the decision recorded, with its times, read against the
        decision's own time (never now: what the operator or watchdog saw)."""
        return recorded_evidence(obj.evidence, obj.decided_at)

    @admin.display(description="override note")
    def note(self, obj: models.RecoveryDecision) -> str:
        return obj.override_note or "— (no override)"

    @admin.display(description="actor", ordering="operator_reference")
    def actor(self, obj: models.RecoveryDecision) -> str:
        """The audited operator, named as on every audit row (the column keeps
        its first name, ``operator_reference``)."""
        return obj.operator_reference

    @admin.display(description="operator request")
    def operator_request(self, obj: models.RecoveryDecision) -> SafeString:
        """The audited request that made this decision (one indexed query)."""
        request = (
            models.OperatorRequest.objects.filter(
                job_execution_id=obj.job_execution_id,
                action="RECOVER",
                outcome="APPLIED",
                observed_version=obj.execution_version,
            )
            .order_by("id")
            .values_list("id", flat=True)
            .first()
        )
        return link("operatorrequest", request)

    @admin.display(description="resolved steps (→ FAILED)")
    def resolved_steps(self, obj: models.RecoveryDecision) -> SafeString:
        ids = obj.resolved_step_ids or []
        if not ids:
            return format_html("{}", "none")
        return format_html_join(", ", "{}", ((link("stepexecution", pk),) for pk in ids))


@admin.register(models.OperatorRequest)
class OperatorRequestAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "action",
        "actor",
        "execution",
        "outcome",
        "rejection_code",
        "result_status",
        "requested",
    )
    list_filter = ("action", "outcome")
    search_fields = ("=job_execution_id",)
    ordering = ("-requested_at", "-id")
    fields = (
        "id",
        "action",
        "operation_id",
        "actor",
        "actor_user_id",
        "reason_code",
        "execution",
        "observed_version",
        "prior_status",
        "result_status",
        "outcome",
        "changed",
        "rejection_code",
        "requested",
        "decision",
    )
    requested = moment("requested_at", "requested")

    @admin.display(description="execution")
    def execution(self, obj: models.OperatorRequest) -> SafeString:
        return link("jobexecution", obj.job_execution_id)

    @admin.display(description="recovery decision")
    def decision(self, obj: models.OperatorRequest) -> SafeString:
        """The decision an applied recovery wrote (one query on its unique key)."""
        if (
            obj.action != "RECOVER"
            or obj.outcome != "APPLIED"
            or obj.job_execution_id is None
            or obj.observed_version is None
        ):
            return format_html("{}", "—")
        decision = (
            models.RecoveryDecision.objects.filter(
                job_execution_id=obj.job_execution_id, execution_version=obj.observed_version
            )
            .values("id", "eligibility", "override_note")
            .first()
        )
        if decision is None:
            return link("recoverydecision", None)
        return format_html(
            "{} — allowed because: {}",
            link("recoverydecision", decision["id"]),
            decision_reason(decision["eligibility"], decision["override_note"], note=None),
        )


@admin.register(models.RetentionRecord)
class RetentionRecordAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "action",
        "actor",
        "instance",
        "reason_code",
        "outcome",
        "rejection_code",
        "changed",
        "applied",
    )
    list_filter = ("action", "outcome")
    search_fields = ("=job_instance_id",)
    ordering = ("-applied_at", "-id")
    fields = (
        "id",
        "action",
        "operation_id",
        "actor",
        "actor_user_id",
        "reason_code",
        "instance",
        "outcome",
        "rejection_code",
        "changed",
        "plan_digest",
        "deleted_job_executions",
        "deleted_job_instances",
        "applied",
    )
    applied = moment("applied_at", "applied")

    @admin.display(description="instance")
    def instance(self, obj: models.RetentionRecord) -> SafeString:
        return link("jobinstance", obj.job_instance_id)
