"""The job executions' pages: the triage list (needs attention, failed in
the last 24 h, failure category), the detail page's case file, timeline and
steps, and the dashboard's URL."""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib import admin
from django.db.models import (
    Q,
    QuerySet,
)
from django.http import HttpRequest
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin import casefile
from oxide_batch.admin.actions.executions import ExecutionActions
from oxide_batch.admin.applicable import action_choices
from oxide_batch.admin.base import (
    LINKED_ROWS,
    ReadOnlyAdmin,
    can_view_payload,
    link,
    linked_rows,
    table,
)
from oxide_batch.admin.dashboard import NO_CATEGORY, dashboard_view
from oxide_batch.admin.display import (
    ago,
    badge,
    duration,
    execution_failure,
    execution_place,
    fate,
    human_short,
    inactivity,
    logs_url,
    parameters,
    when,
    when_short,
)
from oxide_batch.admin.failure_detail import failure_line
from oxide_batch.admin.lost_write import URL_NAME as LOST_WRITE_URL
from oxide_batch.admin.lost_write import resolve_lost_write_view
from oxide_batch.admin.pages.common import (
    COUNTS,
    SHORT,
    SKIP_COUNTS,
    JobNameFilter,
    ParentFilter,
    SearchByIdOrName,
    StatusColumns,
    counts_with_skips,
    exit_code_tells,
)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.evidence import granted_ttl, unresolved_lost_write
from oxide_batch.domain.names import escape_invisible
from oxide_batch.domain.status import FailureCategory
from oxide_batch.selectors import console, pages
from oxide_batch.selectors.failure_details import (
    failure_detail_annotations,
    recent_failure_types,
    with_failure_type,
)
from oxide_batch.selectors.failures import FAILED_WITHIN
from oxide_batch.selectors.unresolved import needs_attention_queryset


class InstanceFilter(ParentFilter):
    title = "instance"
    parameter_name = "instance"
    field = "job_instance_id"


class TriageFilter(admin.SimpleListFilter):
    """What needs a look: the unresolved executions (UNKNOWN, or active and
    inactive longer than ``OXIDE_BATCH_RECOVERY_STALE_AFTER`` — the dashboard's
    and the API's ``unresolved_for`` rule, on the partial index
    ``ob_execution_unresolved``) and the executions that failed in the last 24
    hours, whatever became of them since (``failed_at``, kept when an abandon
    follows: a range on the partial index ``ob_execution_failed``)."""

    title = "needs attention"
    parameter_name = "triage"
    FAILED_WITHIN = FAILED_WITHIN

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
            unresolved = needs_attention_queryset(
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


class FailureTypeFilter(admin.SimpleListFilter):
    """The exception type of a failure's detail (its own or a step's; exact):
    the choices are the types of the newest details (one bounded query), and
    any type may be given in the URL (``?failure_type=ValueError``)."""

    title = "exception type"
    parameter_name = "failure_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in recent_failure_types()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return with_failure_type(queryset, value) if value else queryset


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


def _logs_link(obj: Any) -> SafeString | None:
    """ "Open the logs" of a failure the runtime logged (decision 316), from
    the row's own columns (no query); ``None`` without a template, a failure,
    or for a failure a recovery decision wrote (no log holds its id)."""
    if not obj.failure_id or obj.recovery_decision_id is not None:
        return None
    url = logs_url(
        obj.failure_id, execution_id=obj.pk, job_name=obj.job_name, place=execution_place(obj)
    )
    if url is None:
        return None
    return format_html('<a href="{}" rel="noopener" class="ob-logs">{}</a>', url, "Open the logs")


@admin.register(models.JobExecution)
class JobExecutionAdmin(SearchByIdOrName, StatusColumns, ExecutionActions, ReadOnlyAdmin):
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
        FailureTypeFilter,
        "created_at",
        InstanceFilter,
    )
    search_fields = ("job_name",)
    search_help_text = (
        "An execution id, an exact job name, name=value for a visible parameter "
        "(e.g. business_date=2026-11-30), host:NAME or worker:NAME for who ran it."
    )
    instance_field = "job_instance_id"
    ordering = ("-created_at", "-id")
    # Status, job, parameters, activity, owner, stop and failure are in the case
    # file above the fields (admin/casefile/); the fields hold the rest of the row.
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

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """``host:NAME`` and ``worker:NAME`` search who ran it (decision 311);
        any other term as :class:`SearchByIdOrName` reads it."""
        found = console.worker_search(queryset, search_term.strip())
        if found is not None:
            return found, False
        return super().get_search_results(request, queryset, search_term)

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

    def change_form_context(self, request: HttpRequest, context: dict[str, Any], obj: Any) -> None:
        # One proposal read per page, for the case file and the actions field
        # (rendered later, from the object: readonly fields see no request).
        obj.console_proposal = casefile.proposal_for(obj)
        context["case_file"] = casefile.render(request, obj, obj.console_proposal)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(partial(dashboard_view, self.admin_site))
        resolve = self.admin_site.admin_view(partial(resolve_lost_write_view, self.admin_site))
        return [
            path("dashboard/", view, name="oxide_batch_dashboard"),
            path("<int:object_id>/lost-write/resolve/", resolve, name=LOST_WRITE_URL),
            *super().get_urls(),
        ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # The failure's type for everyone; its message's first line only for
        # whoever may read payloads (contract §4.3, as the API shows it).
        listed: QuerySet[Any] = console.execution_list(super().get_queryset(request))
        shown: QuerySet[Any] = listed.annotate(
            **failure_detail_annotations(with_message=can_view_payload(request))
        )
        return shown

    @admin.display(description="parameters")
    def run_parameters(self, obj: Any) -> SafeString:
        return parameters(obj.instance_parameters)

    @admin.display(description="duration")
    def took(self, obj: models.JobExecution) -> str:
        return duration(obj.started_at, obj.ended_at, obj.status)

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
        """Owner recorded (the claimant's username), a stop requested (how
        long ago), and for a failure what became of it — one cell, empty
        when there is nothing to say."""
        now = timezone.now()
        parts: list[SafeString] = []
        if getattr(obj, "owner_recorded", False):
            parts.append(
                format_html(
                    '<span class="ob-badge ob-muted">{}</span> {}{}',
                    "owner",
                    getattr(obj, "owner_name", None) or "",
                    # The host it runs on (decision 311): the list is searched by it.
                    f" on {escape_invisible(obj.worker_host)}" if obj.worker_host else "",
                )
            )
        if obj.stop_requested_at is not None:
            parts.append(
                format_html(
                    '<span class="ob-badge ob-warn">{}</span> {}',
                    "STOP REQUESTED",
                    ago(obj.stop_requested_at, now),
                )
            )
        shown = failure_line(
            getattr(obj, "failure_type", None), getattr(obj, "failure_message_head", None)
        )
        if shown:
            parts.append(shown)
        if obj.failed_at is not None:
            parts.append(fate(obj, now, compact=True))
        logs = _logs_link(obj)
        if logs is not None:
            parts.append(logs)
        if unresolved_lost_write(obj.lost_write, obj.lost_write_resolution):
            # contract §2.5.14: nothing restarts it until a person resolves it.
            parts.append(format_html('<span class="ob-badge ob-warn">{}</span>', "LOST WRITE"))
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
        return when_short(console.execution_activity(obj))

    @admin.display(description="inactivity")
    def inactivity(self, obj: Any) -> SafeString:
        # An owned execution is stale once its owner's lease expired (contract §2.5.3).
        owned = bool(getattr(obj, "owner_recorded", False))
        return inactivity(
            obj.status,
            console.execution_activity(obj),
            # The TTL its claim was granted, not this process's (contract §2.5.3).
            threshold=granted_ttl(obj.lease_ttl, batch_settings.LEASE_TTL)
            if owned
            else batch_settings.RECOVERY_STALE_AFTER,
            compact=True,
        )

    @admin.display(description="instance")
    def instance(self, obj: models.JobExecution) -> SafeString:
        return link("jobinstance", obj.job_instance_id)

    @admin.display(description="failure")
    def failure(self, obj: models.JobExecution) -> SafeString:
        return execution_failure(obj)

    @admin.display(description="records (the steps' totals)")
    def step_counts(self, obj: models.JobExecution) -> str:
        """The steps' counts summed with each record once: a partition worker's
        counts are in its partition and, once aggregated, in the manager step,
        so worker steps are left out (the job-level counters are not shown:
        only a terminal rollback moves them). One query."""
        sums = pages.step_totals(obj.pk)
        text = ", ".join(f"{SHORT[c]} {sums[c] or 0:,}" for c in COUNTS if sums[c]) or "none yet"
        skips = ", ".join(f"{SHORT[c]} {sums[c]:,}" for c in SKIP_COUNTS if sums[c])
        if skips:
            text = f"{text}; skipped {skips}"
        return f"{text} — a partitioned step counts its partitions once it has aggregated them"

    @admin.display(description="steps")
    def steps(self, obj: models.JobExecution) -> SafeString:
        return linked_rows(
            ("step", "status", "counts", "duration", "version"),
            (
                (
                    link("stepexecution", s.pk, s.step_name),
                    badge(s.status),
                    counts_with_skips(s),
                    duration(s.started_at, s.ended_at, s.status, parent_status=obj.status),
                    s.version,
                )
                for s in pages.execution_steps(obj.pk, limit=LINKED_ROWS + 1)
            ),
            model="stepexecution",
            query=f"execution={obj.pk}",
        )

    @admin.display(description="flow decisions")
    def flow_decisions(self, obj: models.JobExecution) -> SafeString:
        return linked_rows(
            ("#", "from", "outcome", "kind", "to"),
            (
                (
                    link("flowdecision", d.pk, d.sequence),
                    d.source_node_id,
                    d.observed_outcome,
                    d.kind,
                    d.target_node_id or d.terminal or "—",
                )
                for d in pages.flow_decisions(obj.pk, limit=LINKED_ROWS + 1)
            ),
            model="flowdecision",
            query=f"execution={obj.pk}",
        )

    @admin.display(description="operator audit")
    def audit(self, obj: models.JobExecution) -> SafeString:
        rows = pages.operator_requests(obj.pk)
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
