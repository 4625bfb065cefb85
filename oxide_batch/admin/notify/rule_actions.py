"""A rule's actions behind the confirmation page (:mod:`.confirm`): disable,
enable, remove and send a test — each the service ``manage.py
batch_notifications`` calls (``NotificationRules``), audited there with the
logged-in user as the actor.

Removing a rule does what the command and the API do: the rule goes with all
its deliveries (pending ones are never attempted, dead and delivered ones are
forgotten); its events stay for the other rules, and its change audit keeps a
``REMOVE`` row with what the rule was. The confirmation page counts what goes.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from django.contrib import messages
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.display import human_short
from oxide_batch.admin.notify.confirm import NotifyAction, change_by
from oxide_batch.conf import batch_settings
from oxide_batch.services.notify_rules import NotificationRules


def with_counts(rules: QuerySet[models.NotificationRule]) -> QuerySet[models.NotificationRule]:
    """The rules with their deliveries counted by shown state (one query;
    each rule's own deliveries, never a whole table)."""
    pending = Q(deliveries__state="pending")
    return rules.defer("destination_sealed").annotate(
        pending_count=Count("deliveries", filter=pending),
        retrying_count=Count("deliveries", filter=pending & ~Q(deliveries__last_error="")),
        dead_count=Count("deliveries", filter=Q(deliveries__state="dead")),
        delivered_count=Count("deliveries", filter=Q(deliveries__state="delivered")),
    )


def _observed(rule: models.NotificationRule) -> str:
    return f"{rule.enabled}:{rule.updated_at.isoformat()}"


def _set(enabled: bool, request: HttpRequest, rule: models.NotificationRule) -> str:
    service = NotificationRules()
    (service.enable if enabled else service.disable)(rule.name, by=change_by(request))
    return f"Rule {rule.name!r} {'enabled' if enabled else 'disabled'} (audited)."


def _switch(enabled: bool) -> NotifyAction:
    verb = "Enable" if enabled else "Disable"
    return NotifyAction(
        name=verb.lower(),
        title=lambda rule: f"{verb} rule {rule.name}",
        explains=(
            "An enabled rule gets a delivery for each matching event from the next "
            "notifier pass on."
            if enabled
            else "A disabled rule gets no delivery for events from now on; its "
            "deliveries already made are still attempted."
        ),
        done=lambda rule: (
            f"Rule {rule.name!r} is {'enabled' if enabled else 'disabled'} already"
            if rule.enabled == enabled
            else None
        ),
        observed=_observed,
        apply=partial(_set, enabled),
    )


def _what_goes(rule: Any) -> str:
    pending, retrying = rule.pending_count, rule.retrying_count
    return (
        f"The rule is deleted with all its deliveries: {pending} pending "
        f"({retrying} of them retrying) are never attempted again, {rule.dead_count} dead "
        f"and {rule.delivered_count} delivered are forgotten. One being attempted at this "
        "very moment may still reach its destination. The events stay for the other "
        "rules; the rule's change audit keeps a REMOVE row with what it was. "
        "To stop it for a while instead, disable it."
    )


def _remove(request: HttpRequest, rule: models.NotificationRule) -> str:
    NotificationRules().remove(rule.name, by=change_by(request))
    return f"Rule {rule.name!r} removed with its deliveries (audited)."


def _test(request: HttpRequest, rule: models.NotificationRule) -> tuple[int, str]:
    attempt = NotificationRules().test(rule.name, by=change_by(request))
    level = messages.SUCCESS if attempt.verdict == "delivered" else messages.WARNING
    return level, f"Test of rule {rule.name!r}: {attempt.verdict} — {attempt.detail} (audited)."


def _test_explains(rule: models.NotificationRule) -> str:
    timeout = human_short(batch_settings.NOTIFY_TIMEOUT)
    return (
        f"One message of type notification.test goes to the rule's {rule.destination} "
        f"destination now, as a real one would (signed, for a webhook), enabled or not: one "
        f"attempt of at most {timeout}, never retried. Its outcome is shown here and "
        "recorded in the rule's change audit (TEST)."
    )


ACTIONS = {
    "disable": _switch(False),
    "enable": _switch(True),
    "remove": NotifyAction(
        name="remove",
        title=lambda rule: f"Remove rule {rule.name}",
        explains=_what_goes,
        done=lambda rule: None,
        observed=_observed,
        apply=_remove,
        leaves=True,
    ),
    "test": NotifyAction(
        name="test",
        title=lambda rule: f"Send a test message for rule {rule.name}",
        explains=_test_explains,
        done=lambda rule: None,
        observed=_observed,
        apply=_test,
    ),
}
