"""Notification rules: a list and a detail page showing what a rule matches
and where it sends — the destination's kind and its mask (``https://host/…``,
``2 addresses``), never the sealed URL, secret or addresses — with its change
audit. Who manages notifications adds a rule (:mod:`.rule_form`), and
disables, enables, tests or removes one behind a confirmation page
(:mod:`.rule_actions`, :mod:`.confirm`): the services the command and the
API use."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import linked_rows
from oxide_batch.admin.display import when
from oxide_batch.admin.notify.base import NotifyAdmin
from oxide_batch.admin.notify.rule_actions import ACTIONS, with_counts
from oxide_batch.admin.notify.rule_form import add_rule_view
from oxide_batch.admin.pages.common import moment

AUDIT_HEADERS = ("when", "change", "by", "details")


@admin.register(models.NotificationRule)
class NotificationRuleAdmin(NotifyAdmin):
    list_display = ("name", "jobs", "events", "sends_to", "state", "deliveries", "changed")
    list_filter = ("enabled", "destination")
    search_fields = ("name",)
    search_help_text = "A rule's name."
    ordering = ("name",)
    add_link = ("oxide_batch_notificationrule_new", "Add a notification rule")
    fields = (
        "name",
        "jobs",
        "events",
        "sends_to",
        "state",
        "pending",
        "dead",
        "created",
        "changed",
        "audit",
    )
    created = moment("created_at", "created")
    changed = moment("updated_at", "changed")

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.NotificationRule]:
        rows: QuerySet[models.NotificationRule] = super().get_queryset(request)
        return rows.defer("destination_sealed").annotate(
            pending_count=Count("deliveries", filter=Q(deliveries__state="pending")),
            dead_count=Count("deliveries", filter=Q(deliveries__state="dead")),
        )

    def get_urls(self) -> list[URLPattern]:
        act = self.admin_site.admin_view(self.act_view)
        add = self.admin_site.admin_view(self.new_view)
        return [
            path("new/", add, name="oxide_batch_notificationrule_new"),
            path("<int:object_id>/act/<str:action>/", act, name="oxide_batch_notificationrule_act"),
            *super().get_urls(),
        ]

    def new_view(self, request: HttpRequest) -> HttpResponse:
        back = reverse("admin:oxide_batch_notificationrule_changelist")
        return add_rule_view(request, self.console_context(request, back=back))

    def act_view(self, request: HttpRequest, object_id: int, action: str) -> HttpResponse:
        chosen = ACTIONS.get(action)
        if chosen is None:
            raise Http404(f"There is no action {action[:20]!r} on a rule.")
        found = with_counts(models.NotificationRule.objects.filter(pk=object_id)).first()
        return self.act_on(
            request,
            found,
            chosen,
            subject=found.name if found else "",
            back=reverse("admin:oxide_batch_notificationrule_change", args=[object_id]),
            missing=(f"rule #{object_id}", "removed"),
            listing=reverse("admin:oxide_batch_notificationrule_changelist"),
        )

    @admin.display(description="jobs")
    def jobs(self, obj: models.NotificationRule) -> SafeString:
        return format_html_join(" ", "<code>{}</code>", ((p,) for p in obj.job_patterns))

    @admin.display(description="events")
    def events(self, obj: models.NotificationRule) -> SafeString:
        return format_html_join(", ", "{}", ((k,) for k in obj.kinds))

    @admin.display(description="sends to", ordering="destination")
    def sends_to(self, obj: models.NotificationRule) -> SafeString:
        return format_html(
            '{}<br><code class="ob-hint">{}</code>', obj.destination, obj.destination_hint
        )

    @admin.display(description="state", ordering="enabled")
    def state(self, obj: models.NotificationRule) -> SafeString:
        tone = "ok" if obj.enabled else "muted"
        text = "ENABLED" if obj.enabled else "DISABLED"
        return format_html('<span class="ob-badge ob-{}">{}</span>', tone, text)

    @admin.display(description="deliveries")
    def deliveries(self, obj: Any) -> SafeString:
        return format_html("{} pending<br>{} dead", self.pending(obj), self.dead(obj))

    @admin.display(description="pending")
    def pending(self, obj: Any) -> SafeString:
        return self._deliveries(obj, "pending", getattr(obj, "pending_count", 0))

    @admin.display(description="dead")
    def dead(self, obj: Any) -> SafeString:
        return self._deliveries(obj, "dead", getattr(obj, "dead_count", 0))

    @staticmethod
    def _deliveries(obj: Any, state: str, count: int) -> SafeString:
        url = reverse("admin:oxide_batch_notificationdelivery_changelist")
        return format_html('<a href="{}?rule={}&amp;state={}">{}</a>', url, obj.pk, state, count)

    @admin.display(description="change audit (newest first)")
    def audit(self, obj: models.NotificationRule) -> SafeString:
        changes = models.NotificationRuleChange.objects.filter(rule_id=obj.pk).order_by("-id")
        return linked_rows(
            AUDIT_HEADERS,
            (
                (when(c.changed_at), c.action, c.actor, audit_details(c.details))
                for c in changes[:51]
            ),
            model="notificationrule",
            query=f"q={obj.name}",
        )

    def action_links(self, request: HttpRequest, pk: int) -> list[tuple[str, str]]:
        """Disable or enable, test, remove."""
        enabled = models.NotificationRule.objects.filter(pk=pk).values_list("enabled", flat=True)
        switch = "disable" if next(iter(enabled), False) else "enable"
        labels = {
            switch: f"{switch.capitalize()} this rule…",
            "test": "Send a test message…",
            "remove": "Remove this rule…",
        }
        return [
            (reverse("admin:oxide_batch_notificationrule_act", args=[pk, name]), label)
            for name, label in labels.items()
        ]


def audit_details(details: dict[str, Any]) -> SafeString:
    return format_html_join("; ", "{}={}", ((key, value) for key, value in sorted(details.items())))
