"""Delivery (issue 41 point 3), in process with a local receiver: one delivery
per (event, rule) with a stable ``webhook-id``; signed as Standard Webhooks
says (verified by the package's own verifier); retries with backoff on 5xx,
429 (``Retry-After``) and timeouts, then dead with the last error; final
refusals and redirects are not retried; claims exclude each other; Slack and
e-mail messages say what happened and link to the case file."""

from __future__ import annotations

import io
import json
import random
from datetime import timedelta

import pytest
from django.core import mail
from django.core.management import call_command

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.notifications import RetryPolicy
from oxide_batch.repository import notifications as store
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.selectors.notifications import delivery_gauges
from oxide_batch.services.notifier import Notifier
from oxide_batch.services.notify_rules import NotificationRules, new_rule
from tests.helpers import key, launch, move
from tests.notifications.receiver import Received, receiving

pytestmark = pytest.mark.django_db
S = BatchStatus
BY = ChangeBy("test")
POLICY = RetryPolicy(
    attempts=3,
    backoff=timedelta(seconds=2),
    backoff_max=timedelta(seconds=60),
    timeout=timedelta(milliseconds=500),
)


@pytest.fixture(autouse=True)
def _local_http(settings) -> None:
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    settings.OXIDE_BATCH_CONSOLE_URL = "https://batch.example.com"
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


def rule(name: str, *, jobs: str = "*", events: str = "execution.failed", **where: object) -> str:
    made = new_rule(name=name, jobs=jobs.split(","), events=events.split(","), **where)  # type: ignore[arg-type]
    NotificationRules().add(made, by=BY)
    return made.secret or ""


def notifier(clock, **options) -> Notifier:
    return Notifier(clock=clock, policy=options.get("policy", POLICY), rng=random.Random(4))


def failed_run(repo, clock, run: str = "r1", job: str = "import_job"):
    return move(repo, launch(repo, key(job=job, run=run)), S.STARTED, S.FAILED, clock=clock)


def test_a_webhook_is_signed_verified_and_carries_the_standard_payload(repo, clock) -> None:
    with receiving() as receiver:
        secret = rule("hook", webhook=receiver.url)
        receiver.secret = secret
        execution = failed_run(repo, clock)
        report = notifier(clock).run_pass()
    assert (report.events, report.deliveries_made, report.delivered) == (1, 1, 1)
    (request,) = receiver.received
    assert request.verified
    document = request.json()
    assert document["type"] == "execution.failed"
    assert document["data"]["job_execution_id"] == execution.id
    assert document["data"]["job_name"] == "import_job"
    assert document["data"]["status"] == "FAILED"
    assert document["data"]["url"] == (
        f"https://batch.example.com/admin/oxide_batch/jobexecution/{execution.id}/change/"
    )
    delivery = models.NotificationDelivery.objects.get()
    assert request.webhook_id == delivery.webhook_id
    assert (delivery.state, delivery.attempts) == ("delivered", 1)


def test_a_tampered_body_fails_the_receivers_verification(repo, clock) -> None:
    with receiving() as receiver:
        rule("hook", webhook=receiver.url)
        receiver.secret = "whsec_" + "A" * 32  # not the rule's secret
        failed_run(repo, clock)
        notifier(clock).run_pass()
    assert [r.verified for r in receiver.received] == [False]


def test_retries_repeat_the_stable_id_back_off_and_honour_retry_after(repo, clock) -> None:
    answers = {1: (500, {}), 2: (429, {"Retry-After": "120"}), 3: (200, {})}

    def behaviour(number: int, request: Received):
        status, headers = answers[number]
        return status, headers, 0.0

    with receiving(behaviour=behaviour) as receiver:
        receiver.secret = rule("hook", webhook=receiver.url)
        failed_run(repo, clock)
        first = notifier(clock).run_pass()
        delivery = models.NotificationDelivery.objects.get()
        assert (first.retried, delivery.state, delivery.attempts) == (1, "pending", 1)
        wait = delivery.next_attempt_at - clock.now()
        assert timedelta(seconds=1) <= wait <= timedelta(seconds=2)  # base 2 s, jitter
        assert notifier(clock).run_pass().attempted == 0  # not due yet
        clock.advance(wait + timedelta(milliseconds=1))
        notifier(clock).run_pass()
        delivery.refresh_from_db()
        assert delivery.next_attempt_at - clock.now() == timedelta(seconds=60)  # capped
        assert delivery.last_error == "HTTP 429"
        clock.advance(timedelta(seconds=60))
        notifier(clock).run_pass()
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("delivered", 3)
    assert len({r.webhook_id for r in receiver.received}) == 1
    assert all(r.verified for r in receiver.received)


def test_after_the_attempts_a_delivery_is_dead_with_its_last_error(repo, clock) -> None:
    with receiving(behaviour=lambda n, r: (503, {}, 0.0)) as receiver:
        rule("hook", webhook=receiver.url)
        failed_run(repo, clock)
        for _ in range(POLICY.attempts):
            notifier(clock).run_pass()
            clock.advance(timedelta(minutes=2))
        assert notifier(clock).run_pass().attempted == 0
    delivery = models.NotificationDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_error) == ("dead", 3, "HTTP 503")
    assert len(receiver.received) == 3
    # Delivered again on request (audited), from its first attempt.
    assert store.redeliver("default", delivery.pk, by=BY, now=clock.now())
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("pending", 0)
    assert models.NotificationRuleChange.objects.filter(action="REDELIVER").count() == 1


def test_a_timeout_is_retried(repo, clock) -> None:
    with receiving(behaviour=lambda n, r: (200, {}, 1.0 if n == 1 else 0.0)) as receiver:
        rule("hook", webhook=receiver.url)
        failed_run(repo, clock)
        report = notifier(clock).run_pass()
        assert report.retried == 1
        assert "timeout" in models.NotificationDelivery.objects.get().last_error
        clock.advance(timedelta(seconds=5))
        assert notifier(clock).run_pass().delivered == 1


@pytest.mark.parametrize(("status", "error"), [(404, "HTTP 404"), (302, "redirect not followed")])
def test_a_final_refusal_or_a_redirect_is_dead_at_once(repo, clock, status, error) -> None:
    with receiving() as elsewhere:
        redirect = {"Location": elsewhere.url}
        with receiving(behaviour=lambda n, r: (status, redirect, 0.0)) as receiver:
            rule("hook", webhook=receiver.url)
            failed_run(repo, clock)
            report = notifier(clock).run_pass()
    assert report.dead == 1
    assert models.NotificationDelivery.objects.get().last_error.endswith(error)
    assert elsewhere.received == []  # the redirect was not followed


def test_one_delivery_per_matching_rule_and_none_for_an_unwanted_event(repo, clock) -> None:
    with receiving() as receiver:
        rule("all-failures", webhook=receiver.url)
        rule("billing-only", jobs="billing_*", webhook=receiver.url)
        rule("completions", events="execution.completed", webhook=receiver.url)
        rule("disabled", webhook=receiver.url)
        NotificationRules().disable("disabled", by=BY)
        failed_run(repo, clock, "a", job="billing_eu")
        failed_run(repo, clock, "b", job="import_job")
        move(repo, launch(repo, key(job="unwatched", run="c")), S.STARTED, S.STOPPING, S.STOPPED)
        report = notifier(clock).run_pass()
    assert (report.events, report.deliveries_made, report.delivered) == (3, 3, 3)
    made = sorted(models.NotificationDelivery.objects.values_list("rule__name", "event__job_name"))
    assert made == [
        ("all-failures", "billing_eu"),
        ("all-failures", "import_job"),
        ("billing-only", "billing_eu"),
    ]
    assert not models.NotificationEvent.objects.filter(dispatched_at__isnull=True).exists()
    assert len({r.webhook_id for r in receiver.received}) == 3


def test_a_live_claim_excludes_another_notifier_and_an_expired_one_does_not(repo, clock) -> None:
    with receiving() as receiver:
        rule("hook", webhook=receiver.url)
        failed_run(repo, clock)
        store.dispatch_events(
            "default",
            now=clock.now(),
            wants=lambda event: [models.NotificationRule.objects.get().pk],
        )
        lease = timedelta(seconds=3)
        _, mine = store.claim_due("default", now=clock.now(), lease=lease, limit=10)
        assert len(mine) == 1
        _, theirs = store.claim_due("default", now=clock.now(), lease=lease, limit=10)
        assert theirs == []  # claimed: nobody else attempts it
        clock.advance(lease + timedelta(milliseconds=1))  # the claimant died
        report = notifier(clock).run_pass()
    assert report.delivered == 1
    (request,) = receiver.received
    assert request.webhook_id == mine[0].webhook_id  # the same id on the retry
    assert models.NotificationDelivery.objects.get().attempts == 2


def test_a_lost_claim_writes_nothing(repo, clock) -> None:
    rule("hook", webhook="http://127.0.0.1:9/none")
    failed_run(repo, clock)
    store.dispatch_events(
        "default", now=clock.now(), wants=lambda event: [models.NotificationRule.objects.get().pk]
    )
    token, (delivery,) = store.claim_due(
        "default", now=clock.now(), lease=timedelta(seconds=1), limit=1
    )
    clock.advance(timedelta(seconds=2))
    store.claim_due("default", now=clock.now(), lease=timedelta(seconds=1), limit=1)
    assert not store.settle("default", delivery.pk, token, state="delivered", now=clock.now())
    assert models.NotificationDelivery.objects.get().state == "pending"


def test_a_slack_message_is_one_readable_line_with_the_case_file_link(repo, clock) -> None:
    with receiving() as receiver:
        rule("chat", webhook=receiver.url, format="slack")
        execution = failed_run(repo, clock)
        notifier(clock).run_pass()
    (request,) = receiver.received
    text = request.json()["text"]
    assert "\n" not in text
    assert text.startswith(f"import_job: execution {execution.id} failed (USER_COMPONENT)")
    assert (
        f"<https://batch.example.com/admin/oxide_batch/jobexecution/{execution.id}/change/"
        "|case file>"
    ) in text


def test_an_email_says_what_happened_and_links_to_the_case_file(repo, clock) -> None:
    rule("mail", email=["oncall@example.com", "lead@example.com"])
    execution = failed_run(repo, clock)
    assert notifier(clock).run_pass().delivered == 1
    (message,) = mail.outbox
    assert message.to == ["oncall@example.com", "lead@example.com"]
    assert (
        message.subject
        == f"[oxide-batch] import_job: execution {execution.id} failed (USER_COMPONENT)"
    )
    link = f"https://batch.example.com/admin/oxide_batch/jobexecution/{execution.id}/change/"
    assert f"Case file: {link}" in message.body
    assert '"type": "execution.failed"' in message.body


def test_the_gauges_count_pending_delivered_retried_dead_and_the_oldest_pending(repo, clock):
    with receiving(behaviour=lambda n, r: (500, {}, 0.0)) as receiver:
        rule("hook", webhook=receiver.url)
        failed_run(repo, clock)
        occurred = models.NotificationEvent.objects.get().occurred_at
        assert delivery_gauges().oldest_pending_at == occurred  # not yet dispatched
        notifier(clock).run_pass()
        clock.advance(timedelta(minutes=1))
        notifier(clock).run_pass()
    gauges = delivery_gauges()
    assert (gauges.pending, gauges.delivered, gauges.dead, gauges.retried) == (1, 0, 0, 1)
    assert gauges.oldest_pending_at == occurred
    assert gauges.undispatched == 0


def test_batch_notify_once_json_reports_its_pass(repo, clock) -> None:
    with receiving() as receiver:
        rule("hook", webhook=receiver.url)
        failed_run(repo, clock)
        out = io.StringIO()
        call_command("batch_notify", "--once", "--json", stdout=out)
    document = json.loads(out.getvalue())
    assert document["ok"] is True
    assert (document["events"], document["delivered"]) == (1, 1)
    assert len(receiver.received) == 1


def test_the_test_action_sends_a_signed_message_and_is_audited(repo, clock) -> None:
    with receiving() as receiver:
        receiver.secret = rule("hook", webhook=receiver.url)
        out = io.StringIO()
        call_command("batch_notifications", "test", "hook", "--json", stdout=out)
    assert json.loads(out.getvalue())["outcome"] == "delivered"
    (request,) = receiver.received
    assert request.verified
    assert request.json()["type"] == "notification.test"
    assert models.NotificationRuleChange.objects.filter(action="TEST").count() == 1


def test_metrics_show_the_notifier_gauges(repo, clock) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from oxide_batch.observability import metrics
    from oxide_batch.observability.notify_metrics import NOTIFY_GAUGES

    with receiving(behaviour=lambda n, r: (500, {}, 0.0)) as receiver:
        rule("hook", webhook=receiver.url)
        failed_run(repo, clock)
        notifier(clock).run_pass()
    NOTIFY_GAUGES.invalidate()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
        if sample.name.startswith("oxide_batch_notify_")
    }
    assert samples[("oxide_batch_notify_deliveries", (("state", "pending"),))] == 1
    assert samples[("oxide_batch_notify_deliveries", (("state", "dead"),))] == 0
    assert samples[("oxide_batch_notify_undispatched_events", ())] == 0
    assert samples[("oxide_batch_notify_oldest_pending_seconds", ())] > 0


def test_the_watchdogs_recovery_reaches_the_webhook_with_the_link(repo, clock, settings) -> None:
    """In process (the real-process version, with a SIGKILLed worker, is not
    written yet): a lease expires, the watchdog's pass recovers, the notifier's
    pass delivers "recovered by the watchdog" with the case file's link."""
    from oxide_batch.services import bootstrap
    from tests.services.test_watchdog import TTL, owned_running, watchdog

    settings.OXIDE_BATCH_LEASE_TTL = TTL  # the claim is granted the TTL judged by
    with receiving() as receiver:
        receiver.secret = rule("hook", events="execution.recovered", webhook=receiver.url)
        execution = owned_running(repo, clock, "killed")
        clock.advance(TTL + timedelta(milliseconds=1))
        service = bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)
        watchdog(service).run_pass()
        assert notifier(clock).run_pass().delivered == 1
    (request,) = receiver.received
    assert request.verified
    data = request.json()["data"]
    assert request.json()["type"] == "execution.recovered"
    assert (data["by"], data["status"], data["job_execution_id"]) == (
        "watchdog",
        "FAILED",
        execution.id,
    )
    assert data["url"].endswith(f"/jobexecution/{execution.id}/change/")


def test_dead_deliveries_are_listed_with_their_error_and_redelivered_audited(repo, clock):
    with receiving(behaviour=lambda n, r: (410, {}, 0.0)) as receiver:
        rule("hook", webhook=receiver.url)
        failed_run(repo, clock)
        notifier(clock).run_pass()
    out = io.StringIO()
    call_command("batch_notifications", "deliveries", "--state", "dead", "--json", stdout=out)
    (dead,) = json.loads(out.getvalue())["deliveries"]
    assert (dead["state"], dead["last_error"], dead["rule"]) == ("dead", "HTTP 410", "hook")
    call_command("batch_notifications", "redeliver", str(dead["id"]), stdout=io.StringIO())
    assert models.NotificationDelivery.objects.get().state == "pending"
    assert models.NotificationRuleChange.objects.filter(action="REDELIVER").count() == 1
    from django.core.management import CommandError

    with pytest.raises(CommandError) as refused:
        call_command("batch_notifications", "redeliver", str(dead["id"]), stdout=io.StringIO())
    assert refused.value.returncode == 4
    assert "notification_delivery_not_dead" in str(refused.value)
