"""The console shows the notifications (issue 41 point 6): rules with a
masked destination and their audit, disabled/enabled by who manages
notifications; deliveries by state, rule and execution, a dead one delivered
again through the service ``batch_notifications redeliver`` uses; the jobs'
deadlines; every page a constant number of queries."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.notify_rules import NotificationRules, new_rule

pytestmark = pytest.mark.django_db
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SECRET_PATH = "services/T000/B000/very-secret-path"


def make_rule(name: str = "oncall") -> models.NotificationRule:
    made = new_rule(
        name=name,
        jobs=["nightly_*"],
        events=["execution.failed"],
        webhook=f"https://hooks.example.com/{SECRET_PATH}",
        format="slack",
    )
    NotificationRules().add(made, by=ChangeBy("setup"))
    return models.NotificationRule.objects.get(name=name)


def make_delivery(
    rule: models.NotificationRule,
    *,
    state: str = "dead",
    attempts: int = 5,
    error: str = "HTTP 500 from the receiver",
    execution_id: int | None = 7,
) -> models.NotificationDelivery:
    event = models.NotificationEvent.objects.create(
        kind="execution.failed",
        job_name="nightly_import",
        job_execution_id=execution_id,
        status="FAILED",
        occurred_at=AT,
        dispatched_at=AT,
    )
    return models.NotificationDelivery.objects.create(
        event=event,
        rule=rule,
        webhook_id=f"msg_{event.pk:032x}",
        state=state,
        attempts=attempts,
        next_attempt_at=AT + timedelta(minutes=1),
        last_error=error,
        created_at=AT,
        settled_at=None if state == "pending" else AT + timedelta(minutes=5),
    )


def rule_url(rule: models.NotificationRule) -> str:
    return reverse("admin:oxide_batch_notificationrule_change", args=[rule.pk])


def act_url(rule: models.NotificationRule, action: str) -> str:
    return reverse("admin:oxide_batch_notificationrule_act", args=[rule.pk, action])


def redeliver_url(delivery: models.NotificationDelivery) -> str:
    return reverse("admin:oxide_batch_notificationdelivery_act", args=[delivery.pk])


def observed(page: str) -> str:
    found = re.search(r'name="observed" value="([^"]*)"', page)
    assert found, page
    return found.group(1).replace("&#x27;", "'").replace("&quot;", '"')


# -- rules ---------------------------------------------------------------------------------


def test_a_viewer_reads_rules_with_a_masked_destination_and_cannot_act(viewer_client):
    rule = make_rule()
    listing = viewer_client.get(reverse("admin:oxide_batch_notificationrule_changelist"))
    detail = viewer_client.get(rule_url(rule))
    for page in (listing, detail):
        assert page.status_code == 200
        text = page.content.decode()
        assert "oncall" in text
        assert "nightly_*" in text
        assert "slack" in text
        assert "https://hooks.example.com/…" in text
        assert SECRET_PATH not in text
        assert rule.destination_sealed not in text
    assert "ENABLED" in detail.content.decode()
    assert "ADD" in detail.content.decode()  # the change audit
    assert "/act/" not in detail.content.decode()
    assert viewer_client.get(act_url(rule, "disable")).status_code == 403
    assert viewer_client.post(act_url(rule, "disable"), {"observed": "x"}).status_code == 403
    rule.refresh_from_db()
    assert rule.enabled


def test_an_operator_disables_and_enables_a_rule_audited_and_idempotent(operator_client):
    rule = make_rule()
    detail = operator_client.get(rule_url(rule)).content.decode()
    assert act_url(rule, "disable") in detail
    confirm = operator_client.get(act_url(rule, "disable"))
    assert confirm.status_code == 200
    seen = observed(confirm.content.decode())
    done = operator_client.post(act_url(rule, "disable"), {"observed": seen}, follow=True)
    assert "disabled (audited)" in done.content.decode()
    rule.refresh_from_db()
    assert not rule.enabled
    audit = models.NotificationRuleChange.objects.filter(rule_id=rule.pk).order_by("id")
    assert [(c.action, c.actor) for c in audit] == [("ADD", "setup"), ("DISABLE", "otto")]
    # The same confirmation sent again changes and records nothing.
    again = operator_client.post(act_url(rule, "disable"), {"observed": seen}, follow=True)
    assert "disabled already: nothing changed" in again.content.decode()
    assert audit.count() == 2
    assert act_url(rule, "enable") in operator_client.get(rule_url(rule)).content.decode()
    seen = observed(operator_client.get(act_url(rule, "enable")).content.decode())
    operator_client.post(act_url(rule, "enable"), {"observed": seen})
    rule.refresh_from_db()
    assert rule.enabled
    assert audit.last().action == "ENABLE"  # type: ignore[union-attr]


def test_a_stale_tab_is_refused_and_changes_nothing(operator_client):
    rule = make_rule()
    seen = observed(operator_client.get(act_url(rule, "disable")).content.decode())
    # Meanwhile someone else disables and enables it again.
    NotificationRules().disable("oncall", by=ChangeBy("other"))
    NotificationRules().enable("oncall", by=ChangeBy("other"))
    before = models.NotificationRuleChange.objects.count()
    page = operator_client.post(act_url(rule, "disable"), {"observed": seen}, follow=True)
    assert "Refused (stale)" in page.content.decode()
    rule.refresh_from_db()
    assert rule.enabled
    assert models.NotificationRuleChange.objects.count() == before


def test_an_unknown_rule_or_action_is_a_404(operator_client):
    rule = make_rule()
    assert operator_client.get(act_url(rule, "explode")).status_code == 404
    missing = reverse("admin:oxide_batch_notificationrule_act", args=[rule.pk + 99, "disable"])
    assert operator_client.get(missing).status_code == 404


# -- deliveries ----------------------------------------------------------------------------


def test_deliveries_are_filtered_by_state_rule_and_execution(viewer_client):
    rule, other = make_rule(), make_rule("other")
    dead = make_delivery(rule, execution_id=7)
    retrying = make_delivery(rule, state="pending", attempts=2, execution_id=8)
    fresh = make_delivery(other, state="pending", attempts=0, error="", execution_id=8)
    delivered = make_delivery(other, state="delivered", attempts=1, error="", execution_id=9)
    listing = reverse("admin:oxide_batch_notificationdelivery_changelist")

    def shown(query: str) -> set[str]:
        page = viewer_client.get(listing + query)
        assert page.status_code == 200
        text = page.content.decode()
        everyone = (dead, retrying, fresh, delivered)
        return {d.webhook_id for d in everyone if d.webhook_id in text}

    assert shown("?state=dead") == {dead.webhook_id}
    assert shown("?state=retrying") == {retrying.webhook_id}
    assert shown("?state=pending") == {fresh.webhook_id}
    assert shown("?state=delivered") == {delivered.webhook_id}
    assert shown(f"?rule={rule.pk}") == {dead.webhook_id, retrying.webhook_id}
    assert shown("?execution=8") == {retrying.webhook_id, fresh.webhook_id}
    assert shown("?execution=abc") == set()
    page = viewer_client.get(listing + "?state=dead").content.decode()
    assert "HTTP 500 from the receiver" in page
    assert "DEAD" in page
    assert (
        "/act/"
        not in viewer_client.get(
            reverse("admin:oxide_batch_notificationdelivery_change", args=[dead.pk])
        ).content.decode()
    )
    assert viewer_client.get(redeliver_url(dead)).status_code == 403


def test_deliver_again_is_the_commands_service_audited_idempotent(operator_client):
    rule = make_rule()
    dead = make_delivery(rule)
    detail = reverse("admin:oxide_batch_notificationdelivery_change", args=[dead.pk])
    assert redeliver_url(dead) in operator_client.get(detail).content.decode()
    seen = observed(operator_client.get(redeliver_url(dead)).content.decode())
    done = operator_client.post(redeliver_url(dead), {"observed": seen}, follow=True)
    assert "pending again" in done.content.decode()
    dead.refresh_from_db()
    assert (dead.state, dead.attempts) == ("pending", 0)
    changes = models.NotificationRuleChange.objects.filter(action="REDELIVER")
    assert [(c.actor, c.details) for c in changes] == [("otto", {"webhook_id": dead.webhook_id})]
    again = operator_client.post(redeliver_url(dead), {"observed": seen}, follow=True)
    assert "is pending: nothing changed" in again.content.decode()
    assert changes.count() == 1


def test_deliver_again_from_a_stale_tab_is_refused(operator_client):
    rule = make_rule()
    dead = make_delivery(rule)
    seen = observed(operator_client.get(redeliver_url(dead)).content.decode())
    # Delivered again by someone else, and dead again since.
    NotificationRules().redeliver(dead.pk, by=ChangeBy("other"))
    models.NotificationDelivery.objects.filter(pk=dead.pk).update(
        state="dead", attempts=3, settled_at=AT + timedelta(hours=1)
    )
    page = operator_client.post(redeliver_url(dead), {"observed": seen}, follow=True)
    assert "Refused (stale)" in page.content.decode()
    dead.refresh_from_db()
    assert (dead.state, dead.attempts) == ("dead", 3)


# -- deadlines -----------------------------------------------------------------------------


def test_the_deadlines_are_listed_with_their_audit(viewer_client):
    from django.core.management import call_command

    call_command("batch_deadlines", "set", "nightly_import", "--max-duration", "2h")
    listing = viewer_client.get(reverse("admin:oxide_batch_jobdeadline_changelist"))
    assert listing.status_code == 200
    assert "nightly_import" in listing.content.decode()
    assert "2 h" in listing.content.decode()
    row = models.JobDeadline.objects.get()
    detail = viewer_client.get(reverse("admin:oxide_batch_jobdeadline_change", args=[row.pk]))
    assert detail.status_code == 200
    assert "SET" in detail.content.decode()


# -- queries -------------------------------------------------------------------------------

UNBOUNDED_COUNT = re.compile(r"COUNT\(\*\)", re.IGNORECASE)


def _queries(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200, url
    return [q["sql"] for q in captured.captured_queries]


def _pages() -> list[str]:
    rule = models.NotificationRule.objects.order_by("pk")[0]
    delivery = models.NotificationDelivery.objects.order_by("pk")[0]
    deadline = models.JobDeadline.objects.order_by("pk")[0]
    return [
        reverse("admin:oxide_batch_notificationrule_changelist"),
        reverse("admin:oxide_batch_notificationrule_change", args=[rule.pk]),
        act_url(rule, "disable"),
        reverse("admin:oxide_batch_notificationdelivery_changelist"),
        reverse("admin:oxide_batch_notificationdelivery_changelist") + "?state=dead",
        reverse("admin:oxide_batch_notificationdelivery_change", args=[delivery.pk]),
        redeliver_url(delivery),
        reverse("admin:oxide_batch_jobdeadline_changelist"),
        reverse("admin:oxide_batch_jobdeadline_change", args=[deadline.pk]),
        # Managing them (the forms and confirmations).
        reverse("admin:oxide_batch_notificationrule_new"),
        act_url(rule, "remove"),
        act_url(rule, "test"),
        reverse("admin:oxide_batch_jobdeadline_set"),
        reverse("admin:oxide_batch_jobdeadline_set") + f"?job={deadline.job_name}",
        reverse("admin:oxide_batch_jobdeadline_act", args=[deadline.pk]),
    ]


def _more(count: int, start: int = 0) -> None:
    from django.core.management import call_command

    for index in range(start, start + count):
        rule = make_rule(f"more{index}")
        make_delivery(rule)
        make_delivery(rule, state="pending", attempts=1)
        NotificationRules().disable(rule.name, by=ChangeBy("setup"))
        call_command("batch_deadlines", "set", f"job{index}", "--max-duration", "1h")


def test_every_notification_page_runs_constant_queries_and_never_counts_a_table(
    operator_client,
):
    _more(1)
    pages = _pages()
    for url in pages:
        _queries(operator_client, url)  # warm the caches
    before = {url: len(_queries(operator_client, url)) for url in pages}
    _more(6, start=1)
    after = {url: _queries(operator_client, url) for url in pages}
    assert {url: len(sql) for url, sql in after.items()} == before
    for statements in after.values():
        for sql in statements:
            if UNBOUNDED_COUNT.search(sql):
                assert "LIMIT" in sql.upper(), sql
