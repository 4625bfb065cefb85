"""The notification tables' writes (issue 41): rules with their audit, the
fan-out of outbox events to deliveries, and the claims of due deliveries.

A claim is a lease: a short transaction picks due deliveries (``SELECT … FOR
UPDATE SKIP LOCKED`` on PostgreSQL, so concurrent notifiers never wait on nor
take the same row; SQLite's ``BEGIN IMMEDIATE`` serializes them), stamps
``claimed_until`` and a claim token and counts the attempt, and commits; the
attempt runs outside any transaction; its outcome is written only while the
claim is still the caller's (:func:`settle`). A notifier killed mid-attempt
leaves its claim to expire, and the delivery is attempted again with the same
``webhook_id``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q

from oxide_batch import models as tables  # noqa: TID251 (the model layer)
from oxide_batch.domain.notifications import NotificationRuleInvalid, NotificationRuleNotFound


@dataclass(frozen=True)
class ChangeBy:
    """Who changed a rule (the audit's actor)."""

    actor: str
    user_id: int | None = None


def _audit(
    using: str,
    rule: tables.NotificationRule | None,
    name: str,
    action: str,
    by: ChangeBy,
    now: datetime,
    details: Mapping[str, Any],
) -> None:
    tables.NotificationRuleChange.objects.using(using).create(
        rule_id=None if rule is None else rule.pk,
        rule_name=name,
        action=action,
        actor=by.actor,
        actor_user_id=by.user_id,
        details=dict(details),
        changed_at=now,
    )


def rule_details(rule: tables.NotificationRule) -> dict[str, Any]:
    """What the audit and a listing may show of a rule: never its sealed destination."""
    return {
        "jobs": list(rule.job_patterns),
        "events": list(rule.kinds),
        "destination": rule.destination,
        "hint": rule.destination_hint,
        "enabled": rule.enabled,
    }


def insert_rule(
    using: str,
    *,
    name: str,
    patterns: Sequence[str],
    kinds: Sequence[str],
    destination: str,
    sealed: str,
    hint: str,
    by: ChangeBy,
    now: datetime,
) -> tables.NotificationRule:
    """A new rule and its audit row, together; a taken name → ``NotificationRuleInvalid``."""
    try:
        with transaction.atomic(using=using):
            rule = tables.NotificationRule.objects.using(using).create(
                name=name,
                job_patterns=list(patterns),
                kinds=list(kinds),
                destination=destination,
                destination_sealed=sealed,
                destination_hint=hint,
                created_at=now,
                updated_at=now,
            )
            _audit(using, rule, name, "ADD", by, now, rule_details(rule))
    except IntegrityError:
        raise NotificationRuleInvalid(
            field="name", reason=f"a rule named {name!r} exists"
        ) from None
    return rule


def _locked_rule(using: str, name: str) -> tables.NotificationRule:
    rule = (
        tables.NotificationRule.objects.using(using).select_for_update().filter(name=name).first()
    )
    if rule is None:
        raise NotificationRuleNotFound(name=name)
    return rule


def set_rule_enabled(
    using: str, name: str, *, enabled: bool, by: ChangeBy, now: datetime
) -> tables.NotificationRule:
    """Enable or disable a rule (audited, also when it already was)."""
    with transaction.atomic(using=using):
        rule = _locked_rule(using, name)
        rule.enabled = enabled
        rule.updated_at = now
        rule.save(update_fields=["enabled", "updated_at"])
        _audit(using, rule, name, "ENABLE" if enabled else "DISABLE", by, now, rule_details(rule))
    return rule


def delete_rule(using: str, name: str, *, by: ChangeBy, now: datetime) -> None:
    """Remove a rule with its deliveries (audited: the audit row outlives it)."""
    with transaction.atomic(using=using):
        rule = _locked_rule(using, name)
        details = rule_details(rule)
        _audit(using, rule, name, "REMOVE", by, now, details)
        tables.NotificationDelivery.objects.using(using).filter(rule_id=rule.pk).delete()
        rule.delete()


def record_rule_test(using: str, name: str, *, by: ChangeBy, now: datetime, outcome: str) -> None:
    """A test message sent to the rule's destination (audited with its outcome)."""
    with transaction.atomic(using=using):
        rule = _locked_rule(using, name)
        _audit(using, rule, name, "TEST", by, now, {"outcome": outcome[:200]})


def reseal_rules(using: str, reseal: Callable[[str], str], *, by: ChangeBy, now: datetime) -> int:
    """Every rule's destination sealed again under the first key (rotation)."""
    with transaction.atomic(using=using):
        rules = list(tables.NotificationRule.objects.using(using).select_for_update())
        for rule in rules:
            rule.destination_sealed = reseal(rule.destination_sealed)
            rule.save(update_fields=["destination_sealed"])
            _audit(using, rule, rule.name, "ROTATE", by, now, {})
    return len(rules)


# -- fan-out -------------------------------------------------------------------------------


def dispatch_events(
    using: str,
    *,
    now: datetime,
    wants: Callable[[tables.NotificationEvent], list[int]],
    limit: int = 500,
) -> tuple[int, int]:
    """Make each undispatched event's deliveries — one per rule ``wants`` names,
    each with its stable id — and mark it dispatched; an event no rule wants is
    settled at once. ``(events, deliveries)`` made."""
    with transaction.atomic(using=using):
        events = list(
            tables.NotificationEvent.objects.using(using)
            .select_for_update(skip_locked=True)
            .filter(dispatched_at__isnull=True)
            .order_by("id")[:limit]
        )
        deliveries = [
            tables.NotificationDelivery(
                event_id=event.pk,
                rule_id=rule_id,
                webhook_id=f"msg_{uuid.uuid4().hex}",
                state="pending",
                next_attempt_at=now,
                created_at=now,
            )
            for event in events
            for rule_id in wants(event)
        ]
        tables.NotificationDelivery.objects.using(using).bulk_create(
            deliveries, ignore_conflicts=True
        )
        tables.NotificationEvent.objects.using(using).filter(
            pk__in=[event.pk for event in events]
        ).update(dispatched_at=now)
    return len(events), len(deliveries)


# -- claims --------------------------------------------------------------------------------


def claim_due(
    using: str,
    *,
    now: datetime,
    lease: timedelta,
    limit: int,
    per_rule: int | None = None,
    busy: Mapping[int, int] | None = None,
) -> tuple[str, list[tables.NotificationDelivery]]:
    """Claim up to ``limit`` due deliveries (pending, due, not claimed by a live
    lease) for ``lease``; each claim counts an attempt. With ``per_rule``, no
    rule (one destination) gets more than ``per_rule`` claims less the ones
    ``busy`` says are already in flight — a slow destination's backlog never
    takes every slot. The claim token, and the claimed deliveries with their
    event and rule."""
    token = uuid.uuid4().hex
    in_flight = dict(busy or {})
    full = [rule_id for rule_id, count in in_flight.items() if per_rule and count >= per_rule]
    window = limit if per_rule is None else limit * 4
    with transaction.atomic(using=using):
        candidates = list(
            tables.NotificationDelivery.objects.using(using)
            .select_for_update(skip_locked=True)
            .filter(state="pending", next_attempt_at__lte=now)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .exclude(rule_id__in=full)
            .order_by("next_attempt_at", "id")
            .values_list("id", "rule_id")[:window]
        )
        ids: list[int] = []
        for delivery_id, rule_id in candidates:
            if len(ids) == limit:
                break
            if per_rule is not None and in_flight.get(rule_id, 0) >= per_rule:
                continue
            in_flight[rule_id] = in_flight.get(rule_id, 0) + 1
            ids.append(delivery_id)
        if ids:
            tables.NotificationDelivery.objects.using(using).filter(pk__in=ids).update(
                claimed_until=now + lease, claim=token, attempts=F("attempts") + 1
            )
    claimed = list(
        tables.NotificationDelivery.objects.using(using)
        .select_related("event", "rule")
        .filter(pk__in=ids, claim=token)
        .order_by("id")
    )
    return token, claimed


def settle(
    using: str,
    delivery_id: int,
    token: str,
    *,
    state: str,
    now: datetime,
    error: str = "",
    next_attempt_at: datetime | None = None,
) -> bool:
    """Write an attempt's outcome while the claim is still ``token``'s: ``state``
    ``delivered`` or ``dead`` settles it, ``pending`` schedules the next attempt
    at ``next_attempt_at``. ``False``: the claim was lost (nothing written)."""
    values: dict[str, Any] = {"state": state, "claimed_until": None, "claim": ""}
    if error:
        values["last_error"] = error[:500]
    if state == "pending":
        assert next_attempt_at is not None
        values["next_attempt_at"] = next_attempt_at
    else:
        values["settled_at"] = now
    changed = (
        tables.NotificationDelivery.objects.using(using)
        .filter(pk=delivery_id, claim=token, state="pending")
        .update(**values)
    )
    return changed == 1


def redeliver(using: str, delivery_id: int, *, by: ChangeBy, now: datetime) -> bool:
    """A dead delivery pending again, at once, with its attempts reset (audited
    on its rule). ``False`` when it is not dead."""
    with transaction.atomic(using=using):
        delivery = (
            tables.NotificationDelivery.objects.using(using)
            .select_for_update()
            .select_related("rule")
            .filter(pk=delivery_id, state="dead")
            .first()
        )
        if delivery is None:
            return False
        tables.NotificationDelivery.objects.using(using).filter(pk=delivery_id).update(
            state="pending", attempts=0, next_attempt_at=now, settled_at=None
        )
        _audit(
            using,
            delivery.rule,
            delivery.rule.name,
            "REDELIVER",
            by,
            now,
            {"webhook_id": delivery.webhook_id},
        )
    return True
