"""An e-mail notification through a real SMTP conversation (issue 41, acceptance):
``aiosmtpd``'s server on 127.0.0.1, Django's SMTP backend pointed at it, and the
message as the server received it — its recipients, what happened, the link
to the execution's case file and the delivery's stable id; an SMTP server
that is down is a retry, not a loss."""

from __future__ import annotations

import email
import random
import socket
from collections.abc import Iterator
from datetime import timedelta
from email.message import Message
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.notifications import RetryPolicy
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.notifier import Notifier
from oxide_batch.services.notify_rules import NotificationRules, new_rule
from tests.helpers import launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
POLICY = RetryPolicy(
    attempts=3,
    backoff=timedelta(seconds=2),
    backoff_max=timedelta(seconds=60),
    timeout=timedelta(seconds=5),
)


class Inbox:
    """An ``aiosmtpd`` handler keeping every message with its envelope."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.envelopes: list[tuple[str, list[str], Message]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos), message))
        return "250 Message accepted for delivery"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def smtp(settings) -> Iterator[Inbox]:
    port = free_port()
    inbox = Inbox(port)
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    settings.EMAIL_HOST_USER = settings.EMAIL_HOST_PASSWORD = ""
    settings.DEFAULT_FROM_EMAIL = "batch@example.com"
    settings.OXIDE_BATCH_CONSOLE_URL = "https://batch.example.com"
    try:
        yield inbox
    finally:
        controller.stop()


def mail_rule() -> None:
    made = new_rule(
        name="mail",
        jobs=["import_*"],
        events=["execution.failed"],
        email=["oncall@example.com", "lead@example.com"],
    )
    NotificationRules().add(made, by=ChangeBy("test"))


def test_an_email_reaches_a_real_smtp_server_with_what_happened_and_the_link(
    repo, clock, smtp
) -> None:
    mail_rule()
    execution = move(repo, launch(repo), S.STARTED, S.FAILED, clock=clock)
    report = Notifier(clock=clock, policy=POLICY, rng=random.Random(1)).run_pass()
    assert report.delivered == 1
    ((sender, recipients, message),) = smtp.envelopes
    assert sender == "batch@example.com"
    assert recipients == ["oncall@example.com", "lead@example.com"]
    assert message["Subject"] == (
        f"[oxide-batch] import_job: execution {execution.id} failed (USER_COMPONENT)"
    )
    delivery = models.NotificationDelivery.objects.get()
    assert message["Message-ID"] == f"<{delivery.webhook_id}@oxide-batch>"
    assert message["X-Webhook-Id"] == delivery.webhook_id
    payload = message.get_payload(decode=True)
    assert isinstance(payload, bytes)
    body = payload.decode()
    link = f"https://batch.example.com/admin/oxide_batch/jobexecution/{execution.id}/change/"
    assert f"Case file: {link}" in body
    assert '"type": "execution.failed"' in body
    assert f'"job_execution_id": {execution.id}' in body


def test_an_smtp_server_that_is_down_is_a_retry_with_the_same_id(repo, clock, smtp, settings):
    mail_rule()
    move(repo, launch(repo), S.STARTED, S.FAILED, clock=clock)
    settings.EMAIL_PORT = free_port()  # nobody listens there
    notifier = Notifier(clock=clock, policy=POLICY, rng=random.Random(1))
    assert notifier.run_pass().retried == 1
    delivery = models.NotificationDelivery.objects.get()
    assert (delivery.state, delivery.last_error) == ("pending", "e-mail: ConnectionRefusedError")
    settings.EMAIL_PORT = smtp.port
    clock.advance(timedelta(minutes=2))
    assert notifier.run_pass().delivered == 1
    ((_, _, message),) = smtp.envelopes
    assert message["X-Webhook-Id"] == delivery.webhook_id
