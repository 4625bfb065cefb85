"""Notification deliveries: one per (event, rule), listed newest first and
filtered by state (pending, retrying — pending after a failed attempt —,
dead, delivered), by rule and by execution, with their attempts, next attempt
and last error; a dead one offers "deliver again" (the service behind
``batch_notifications redeliver``) behind a confirmation page."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import link, parse_id
from oxide_batch.admin.display import when
from oxide_batch.admin.notify.base import NotifyAdmin
from oxide_batch.admin.notify.confirm import NotifyAction, change_by
from oxide_batch.admin.pages.common import moment
from oxide_batch.services.notify_rules import NotificationRules

TONES = {"pending": "run", "retrying": "warn", "dead": "bad", "delivered": "ok"}


def state_of(delivery: models.NotificationDelivery) -> str:
    """``retrying``: pending after at least one failed attempt."""
    if delivery.state == "pending" and delivery.attempts > 0 and delivery.last_error:
        return "retrying"
    return delivery.state


def state_badge(delivery: models.NotificationDelivery) -> SafeString:
    shown = state_of(delivery)
    return format_html(
        '<span class="ob-badge ob-{}">{}</span>', TONES.get(shown, "muted"), shown.upper()
    )


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s, s) for s in ("pending", "retrying", "dead", "delivered")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "pending":
            return queryset.filter(state="pending", last_error="")
        if value == "retrying":
            return queryset.filter(state="pending").exclude(last_error="")
        if value in {"dead", "delivered"}:
            return queryset.filter(state=value)
        return queryset


class IdFilter(admin.SimpleListFilter):
    """A filter by an id given in the URL (from a rule's or a case file's link)."""

    field = ""

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # Offered only as given (a filter with no choice would not be applied).
        raw = self.value()
        if raw is None:
            return []
        value = parse_id(raw)
        return [(raw, f"#{value}" if value is not None else "no such id")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() is None:
            return queryset
        value = parse_id(self.value())
        return queryset.none() if value is None else queryset.filter(**{self.field: value})


class RuleFilter(IdFilter):
    title = "rule"
    parameter_name = "rule"
    field = "rule_id"


class ExecutionFilter(IdFilter):
    title = "execution"
    parameter_name = "execution"
    field = "event__job_execution_id"


def _redeliver(request: HttpRequest, delivery: models.NotificationDelivery) -> str:
    NotificationRules().redeliver(delivery.pk, by=change_by(request))
    return (
        f"Delivery {delivery.webhook_id} is pending again from its first attempt, with the "
        "same id (audited on its rule); the notifier attempts it on its next pass."
    )


REDELIVER = NotifyAction(
    name="redeliver",
    title=lambda d: f"Deliver {d.webhook_id} again",
    explains=(
        "The dead delivery becomes pending again with its attempts reset; the notifier "
        "sends it with the same webhook-id (a receiver that has it already can drop it)."
    ),
    done=lambda d: None if d.state == "dead" else f"Delivery {d.webhook_id} is {state_of(d)}",
    observed=lambda d: f"{d.state}:{d.attempts}:{d.settled_at and d.settled_at.isoformat()}",
    apply=_redeliver,
)


@admin.register(models.NotificationDelivery)
class NotificationDeliveryAdmin(NotifyAdmin):
    list_display = (
        "webhook_id",
        "shown_state",
        "rule_link",
        "kind",
        "execution",
        "attempts",
        "next_attempt",
        "error",
    )
    list_filter = (StateFilter, RuleFilter, ExecutionFilter)
    list_select_related = ("rule", "event")
    search_fields = ("=webhook_id",)
    search_help_text = "A delivery's webhook-id (msg_…)."
    ordering = ("-id",)
    fields = (
        "webhook_id",
        "shown_state",
        "rule_link",
        "kind",
        "job",
        "execution",
        "attempts",
        "next_attempt",
        "last_error",
        "made",
        "settled",
    )
    made = moment("created_at", "made")
    settled = moment("settled_at", "settled")

    def get_queryset(self, request: HttpRequest) -> QuerySet[models.NotificationDelivery]:
        return (
            super()
            .get_queryset(request)
            .select_related("rule", "event")
            .defer("rule__destination_sealed", "event__data")
        )

    def get_urls(self) -> list[URLPattern]:
        act = self.admin_site.admin_view(self.act_view)
        return [
            path(
                "<int:object_id>/act/redeliver/",
                act,
                name="oxide_batch_notificationdelivery_act",
            ),
            *super().get_urls(),
        ]

    def act_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        found = models.NotificationDelivery.objects.filter(pk=object_id).first()
        return self.act_on(
            request,
            found,
            REDELIVER,
            subject=found.webhook_id if found else "",
            back=reverse("admin:oxide_batch_notificationdelivery_change", args=[object_id]),
            missing=(f"delivery #{object_id}", "purged"),
        )

    def action_links(self, request: HttpRequest, pk: int) -> list[tuple[str, str]]:
        """Deliver again, for a dead delivery."""
        if not models.NotificationDelivery.objects.filter(pk=pk, state="dead").exists():
            return []
        url = reverse("admin:oxide_batch_notificationdelivery_act", args=[pk])
        return [(url, "Deliver again…")]

    @admin.display(description="state", ordering="state")
    def shown_state(self, obj: models.NotificationDelivery) -> SafeString:
        return state_badge(obj)

    @admin.display(description="rule", ordering="rule__name")
    def rule_link(self, obj: models.NotificationDelivery) -> SafeString:
        return link("notificationrule", obj.rule_id, obj.rule.name)

    @admin.display(description="event")
    def kind(self, obj: models.NotificationDelivery) -> str:
        return obj.event.kind

    @admin.display(description="job")
    def job(self, obj: models.NotificationDelivery) -> str:
        return obj.event.job_name

    @admin.display(description="execution")
    def execution(self, obj: models.NotificationDelivery) -> SafeString:
        return link("jobexecution", obj.event.job_execution_id)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_attempt(self, obj: models.NotificationDelivery) -> SafeString:
        if obj.state != "pending":
            return format_html("{}", "—")
        return when(obj.next_attempt_at)

    @admin.display(description="last error")
    def error(self, obj: models.NotificationDelivery) -> str:
        text = obj.last_error or "—"
        return text if len(text) <= 80 else text[:79] + "…"
