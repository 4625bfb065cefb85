"""Notification rules, deliveries and job deadlines over HTTP (issue 41;
docs/contract.md §4.2 "Notifications"): the services the commands use, the same
validation, the secret answered once, every change audited with the
authenticated user, deliveries in keyset pages, a dead one delivered again."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.repository import FixedClock
from tests.api.support import Runtime, field_error, problem

RULE = {"name": "oncall", "jobs": ["nightly_*"], "events": ["execution.failed"]}
WEBHOOK = "https://hooks.example.com/oxide/T0/B0/secret-path"
SERIAL = itertools.count(1)


def changes(name: str) -> list[tuple[str, str]]:
    return list(
        models.NotificationRuleChange.objects.filter(rule_name=name)
        .order_by("id")
        .values_list("action", "actor")
    )


def test_a_webhook_rule_answers_its_generated_secret_once_and_never_shows_it_again(
    operator: Runtime,
) -> None:
    created = operator.post("notifications/rules", {**RULE, "webhook": WEBHOOK}, 201)
    assert created["secret"].startswith("whsec_")
    assert (created["name"], created["destination"], created["hint"]) == (
        "oncall",
        "webhook",
        "https://hooks.example.com/…",
    )
    listed = operator.get("notifications/rules")
    assert listed == {
        "rules": [
            {
                "name": "oncall",
                "jobs": ["nightly_*"],
                "events": ["execution.failed"],
                "destination": "webhook",
                "hint": "https://hooks.example.com/…",
                "enabled": True,
                "pending": 0,
                "dead": 0,
            }
        ]
    }
    # Sealed at rest: neither the URL nor the secret is stored in clear.
    sealed = models.NotificationRule.objects.get(name="oncall").destination_sealed
    assert created["secret"] not in sealed
    assert "secret-path" not in sealed
    assert changes("oncall") == [("ADD", "operator-user")]


def test_a_given_secret_is_not_answered_and_a_slack_or_email_rule_has_none(
    operator: Runtime,
) -> None:
    secret = "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldY"
    given = operator.post(
        "notifications/rules", {**RULE, "webhook": WEBHOOK, "secret": secret}, 201
    )
    assert given["secret"] is None
    slack = {**RULE, "name": "chat", "webhook": WEBHOOK, "format": "slack"}
    assert operator.post("notifications/rules", slack, 201)["secret"] is None
    mail_rule = {**RULE, "name": "mail", "email": ["oncall@example.com", "lead@example.com"]}
    created = operator.post("notifications/rules", mail_rule, 201)
    assert (created["destination"], created["hint"], created["secret"]) == (
        "email",
        "2 addresses",
        None,
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**RULE, "webhook": "http://hooks.example.com/x"}, "webhook"),
        ({**RULE, "webhook": WEBHOOK, "email": ["a@example.com"]}, "destination"),
        ({**RULE}, "destination"),
        ({**RULE, "jobs": [" nightly_*"], "webhook": WEBHOOK}, "jobs"),
        ({**RULE, "name": "-starts-badly", "webhook": WEBHOOK}, "name"),
        ({**RULE, "email": ["not-an-address"]}, "email"),
        ({**RULE, "webhook": WEBHOOK, "secret": "plain"}, "secret"),
        ({**RULE, "webhook": WEBHOOK, "format": "slack", "secret": "whsec_x"}, "secret"),
    ],
)
def test_a_rule_the_command_would_refuse_is_400_naming_the_member(
    operator: Runtime, body: dict[str, Any], field: str
) -> None:
    entry = field_error(operator.post("notifications/rules", body), field)
    assert entry["code"] == "notification_rule_invalid"
    assert not models.NotificationRule.objects.exists()


def test_an_unknown_event_kind_and_a_taken_name_are_400(operator: Runtime) -> None:
    field_error(
        operator.post("notifications/rules", {**RULE, "events": ["x.y"], "webhook": WEBHOOK}),
        "events.0",
    )
    operator.post("notifications/rules", {**RULE, "webhook": WEBHOOK}, 201)
    field_error(operator.post("notifications/rules", {**RULE, "webhook": WEBHOOK}), "name")
    assert models.NotificationRule.objects.count() == 1


def test_disable_enable_remove_are_audited_and_an_unknown_rule_is_404(
    operator: Runtime,
) -> None:
    operator.post("notifications/rules", {**RULE, "webhook": WEBHOOK}, 201)
    assert operator.post("notifications/rules/oncall/disable", {}, 200) == {
        "name": "oncall",
        "action": "disable",
    }
    assert operator.get("notifications/rules")["rules"][0]["enabled"] is False
    operator.post("notifications/rules/oncall/enable", {}, 200)
    assert operator.get("notifications/rules")["rules"][0]["enabled"] is True
    operator.delete("notifications/rules/oncall", {}, 200)
    assert operator.get("notifications/rules") == {"rules": []}
    assert [action for action, _ in changes("oncall")] == ["ADD", "DISABLE", "ENABLE", "REMOVE"]
    for path in ("oncall/disable", "oncall/enable", "oncall/test"):
        problem(
            operator.post(f"notifications/rules/{path}", {}), 404, "notification_rule_not_found"
        )
    problem(operator.delete("notifications/rules/oncall", {}), 404, "notification_rule_not_found")
    # A name the rules never take matches no route.
    problem(operator.post("notifications/rules/-x/disable", {}), 404, "not_found")


def test_a_test_message_reaches_the_destination_and_is_audited(operator: Runtime) -> None:
    operator.post("notifications/rules", {**RULE, "email": ["oncall@example.com"]}, 201)
    tested = operator.post("notifications/rules/oncall/test", {}, 200)
    assert (tested["name"], tested["outcome"]) == ("oncall", "delivered")
    (message,) = mail.outbox
    assert message.to == ["oncall@example.com"]
    assert [action for action, _ in changes("oncall")] == ["ADD", "TEST"]


def test_a_member_an_action_does_not_take_is_refused(operator: Runtime) -> None:
    operator.post("notifications/rules", {**RULE, "webhook": WEBHOOK}, 201)
    field_error(operator.post("notifications/rules/oncall/disable", {"enabled": True}), "enabled")
    assert models.NotificationRule.objects.get().enabled is True


# -- deliveries -----------------------------------------------------------------------


def delivery(rule: models.NotificationRule, state: str, execution_id: int | None = 7) -> int:
    now = FixedClock().now()
    event = models.NotificationEvent.objects.create(
        kind="execution.failed",
        job_name="nightly_load",
        job_instance_id=3,
        job_execution_id=execution_id,
        status="FAILED",
        occurred_at=now,
        data={},
        dispatched_at=now,
    )
    row = models.NotificationDelivery.objects.create(
        event=event,
        rule=rule,
        webhook_id=f"msg_{next(SERIAL)}",
        state=state,
        attempts=5 if state == "dead" else 0,
        next_attempt_at=now,
        last_error="HTTP 500" if state == "dead" else "",
        created_at=now,
    )
    return int(row.pk)


@pytest.fixture
def rule(operator: Runtime) -> models.NotificationRule:
    operator.post("notifications/rules", {**RULE, "webhook": WEBHOOK}, 201)
    return models.NotificationRule.objects.get(name="oncall")


def test_deliveries_filter_by_state_rule_and_execution_newest_first(
    operator: Runtime, rule: models.NotificationRule
) -> None:
    other = models.NotificationRule.objects.create(
        name="other",
        job_patterns=["*"],
        kinds=["execution.failed"],
        destination="webhook",
        destination_sealed="x",
        destination_hint="h",
        created_at=FixedClock().now(),
        updated_at=FixedClock().now(),
    )
    pending = delivery(rule, "pending")
    dead = delivery(rule, "dead", execution_id=8)
    elsewhere = delivery(other, "delivered")
    ids = lambda page: [row["id"] for row in page["results"]]  # noqa: E731
    assert ids(operator.get("notifications/deliveries")) == [elsewhere, dead, pending]
    assert ids(operator.get("notifications/deliveries", state="dead")) == [dead]
    assert ids(operator.get("notifications/deliveries", rule="other")) == [elsewhere]
    assert ids(operator.get("notifications/deliveries", job_execution_id=8)) == [dead]
    (shown,) = operator.get("notifications/deliveries", state="dead")["results"]
    assert shown["last_error"] == "HTTP 500"
    assert (shown["rule"], shown["kind"], shown["attempts"]) == ("oncall", "execution.failed", 5)
    first = operator.get("notifications/deliveries", page_size=2)
    assert ids(first) == [elsewhere, dead]
    (cursor,) = parse_qs(urlsplit(first["next"]).query)["cursor"]
    second = operator.get("notifications/deliveries", page_size=2, cursor=cursor)
    assert ids(second) == [pending]
    assert second["next"] is None


@pytest.mark.parametrize(
    ("param", "value"),
    [("state", "retrying"), ("rule", "-x"), ("job_execution_id", "0"), ("page_size", "0")],
)
def test_a_bad_deliveries_filter_is_400(operator: Runtime, param: str, value: str) -> None:
    problem(
        operator.get("notifications/deliveries", None, **{param: value}), 400, "invalid_request"
    )


def test_a_deliveries_page_is_one_query_whatever_its_size(
    operator: Runtime, rule: models.NotificationRule
) -> None:
    def counted() -> int:
        with CaptureQueriesContext(connection) as queries:
            operator.get("notifications/deliveries")
        return len(queries)

    delivery(rule, "dead")
    few = counted()
    for _ in range(5):
        delivery(rule, "pending")
    assert counted() == few


def test_a_dead_delivery_is_delivered_again_audited_and_a_live_one_is_404(
    operator: Runtime, rule: models.NotificationRule
) -> None:
    dead = delivery(rule, "dead")
    answer = operator.post(f"notifications/deliveries/{dead}/redeliver", {}, 200)
    assert answer == {"delivery": dead, "state": "pending"}
    row = models.NotificationDelivery.objects.get(pk=dead)
    assert (row.state, row.attempts) == ("pending", 0)
    assert changes("oncall")[-1] == ("REDELIVER", "operator-user")
    problem(
        operator.post(f"notifications/deliveries/{dead}/redeliver", {}),
        404,
        "notification_delivery_not_dead",
    )
    problem(
        operator.post(f"notifications/deliveries/{2**63}/redeliver", {}),
        400,
        "identifier_out_of_range",
    )


# -- deadlines ------------------------------------------------------------------------


def test_deadlines_set_list_and_clear_audited(operator: Runtime, fixed: FixedClock) -> None:
    body = {"job_name": "nightly_load", "max_duration": "2h", "expect_every": "1d", "by": "06:00"}
    body["tz"] = "Europe/Paris"
    answer = operator.put("notifications/deadlines", body, 200)
    assert answer == {
        "job_name": "nightly_load",
        "max_duration_seconds": 7200.0,
        "expect_every_seconds": 86400.0,
        "by": "06:00",
        "tz": "Europe/Paris",
        "set_at": "2026-01-01T00:00:00.000Z",
    }
    assert operator.get("notifications/deadlines") == {"deadlines": [answer]}
    fixed.advance(timedelta(hours=1))
    replaced = operator.put(
        "notifications/deadlines", {"job_name": "nightly_load", "max_duration": "1h"}, 200
    )
    assert replaced["expect_every_seconds"] is None
    assert operator.delete("notifications/deadlines", {"job_name": "nightly_load"}, 200) == {
        "job_name": "nightly_load",
        "cleared": True,
    }
    assert operator.get("notifications/deadlines") == {"deadlines": []}
    audit = models.JobDeadlineChange.objects.filter(job_name="nightly_load").order_by("id")
    assert [row.actor for row in audit] == ["operator-user"] * 3
    problem(
        operator.delete("notifications/deadlines", {"job_name": "nightly_load"}),
        404,
        "deadline_not_found",
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"job_name": "j"}, "deadline"),
        ({"job_name": "j", "max_duration": "soon"}, "max_duration"),
        ({"job_name": "j", "expect_every": "1d", "by": "25:00"}, "by"),
        ({"job_name": "j", "expect_every": "1d", "by": "06:00", "tz": "Mars/Base"}, "tz"),
        ({"job_name": "j", "max_duration": "1h", "tz": "UTC"}, "tz"),
        ({"job_name": "", "max_duration": "1h"}, "job_name"),
    ],
)
def test_a_deadline_the_command_would_refuse_is_400_naming_the_member(
    operator: Runtime, body: dict[str, Any], field: str
) -> None:
    field_error(operator.put("notifications/deadlines", body), field)
    assert not models.JobDeadline.objects.exists()
