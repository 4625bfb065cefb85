"""The notifier (``manage.py batch_notify``, issue 41 point 3): fans outbox
events out to the rules that want them, then attempts the due deliveries.

One pass: (1) every undispatched event gets one delivery per enabled rule
that matches its kind and job (``domain/notifications.rule_matches``), each
with a stable ``webhook_id``; an event no rule wants is settled at once;
(2) due deliveries are claimed for a lease (``repository/notifications.py``:
``SKIP LOCKED``, so several notifiers never attempt one delivery at once) and
attempted concurrently, each bounded by ``OXIDE_BATCH_NOTIFY_TIMEOUT`` — a slow
or dead receiver holds one worker, never the others; (3) each outcome is
written while the claim is still this notifier's: delivered, retried after an
exponential backoff with jitter (``Retry-After`` honoured), or — after
``OXIDE_BATCH_NOTIFY_ATTEMPTS`` attempts, or a final refusal — dead, its last
error kept.
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta

from oxide_batch import models  # noqa: TID251 (rows handed over by the repository)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.notifications import RetryPolicy, payload, rule_matches
from oxide_batch.repository import notifications as store
from oxide_batch.repository.clock import Clock, SystemClock
from oxide_batch.selectors.notifications import enabled_rules
from oxide_batch.services import notify_keys
from oxide_batch.services.notify_send import Attempt, execution_url, send

#: Deliveries claimed per pass, and attempted at once.
CLAIM_LIMIT = 32
WORKERS = 8


def policy_from_settings() -> RetryPolicy:
    return RetryPolicy(
        attempts=batch_settings.NOTIFY_ATTEMPTS,
        backoff=batch_settings.NOTIFY_BACKOFF,
        backoff_max=batch_settings.NOTIFY_BACKOFF_MAX,
        timeout=batch_settings.NOTIFY_TIMEOUT,
    )


def document_of(event: models.NotificationEvent) -> dict[str, object]:
    return payload(
        kind=event.kind,
        occurred_at=event.occurred_at,
        job_name=event.job_name,
        job_instance_id=event.job_instance_id,
        job_execution_id=event.job_execution_id,
        status=event.status,
        url=execution_url(event.job_execution_id),
        data=event.data,
    )


@dataclass
class PassReport:
    events: int = 0
    deliveries_made: int = 0
    attempted: int = 0
    delivered: int = 0
    retried: int = 0
    dead: int = 0
    lost_claims: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "events": self.events,
            "deliveries_made": self.deliveries_made,
            "attempted": self.attempted,
            "delivered": self.delivered,
            "retried": self.retried,
            "dead": self.dead,
            "lost_claims": self.lost_claims,
        }


class Notifier:
    def __init__(
        self,
        *,
        using: str = "default",
        clock: Clock | None = None,
        policy: RetryPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.using = using
        self.clock = clock or SystemClock()
        self.policy = policy or policy_from_settings()
        self.rng = rng

    @property
    def lease(self) -> timedelta:
        """A claim outlives any attempt: two timeouts (connect, then read) and a margin."""
        return 2 * self.policy.timeout + timedelta(seconds=2)

    def run_pass(self) -> PassReport:
        report = PassReport()
        rules = enabled_rules(self.using)

        def wants(event: models.NotificationEvent) -> list[int]:
            return [
                rule.id
                for rule in rules
                if rule_matches(rule.patterns, rule.kinds, kind=event.kind, job_name=event.job_name)
            ]

        report.events, report.deliveries_made = store.dispatch_events(
            self.using, now=self.clock.now(), wants=wants
        )
        token, claimed = store.claim_due(
            self.using, now=self.clock.now(), lease=self.lease, limit=CLAIM_LIMIT
        )
        if not claimed:
            return report
        report.attempted = len(claimed)
        with ThreadPoolExecutor(max_workers=min(WORKERS, len(claimed))) as pool:
            outcomes = list(pool.map(self._attempt, claimed))
        for delivery, attempt in zip(claimed, outcomes, strict=True):
            self._settle(delivery, token, attempt, report)
        return report

    def _attempt(self, delivery: models.NotificationDelivery) -> Attempt:
        rule = delivery.rule
        try:
            target = notify_keys.unseal(rule.destination_sealed)
        except notify_keys.DestinationUnreadable as error:
            return Attempt("final", str(error))
        return send(
            rule.destination,
            target,
            document_of(delivery.event),
            webhook_id=delivery.webhook_id,
            timeout=self.policy.timeout,
        )

    def _settle(
        self,
        delivery: models.NotificationDelivery,
        token: str,
        attempt: Attempt,
        report: PassReport,
    ) -> None:
        now = self.clock.now()
        if attempt.verdict == "delivered":
            state, when = "delivered", None
        elif attempt.verdict == "retry" and delivery.attempts < self.policy.attempts:
            state = "pending"
            when = now + self.policy.delay(delivery.attempts, attempt.retry_after, self.rng)
        else:
            state, when = "dead", None
        kept = store.settle(
            self.using,
            delivery.pk,
            token,
            state=state,
            now=now,
            error="" if state == "delivered" else attempt.detail,
            next_attempt_at=when,
        )
        if not kept:
            report.lost_claims += 1
        elif state == "delivered":
            report.delivered += 1
        elif state == "pending":
            report.retried += 1
        else:
            report.dead += 1
