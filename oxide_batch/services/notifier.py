"""The notifier (``manage.py batch_notify``, issue 41 point 3): fans outbox
events out to the rules that want them, then attempts the due deliveries.

One pass: (1) every undispatched event gets one delivery per enabled rule
that matches its kind and job (``domain/notifications.rule_matches``), each
with a stable ``webhook_id``; an event no rule wants is settled at once;
(2) due deliveries are claimed for a lease (``repository/notifications.py``:
``SKIP LOCKED``, so several notifiers never attempt one delivery at once) and
attempted concurrently, each bounded by ``OXIDE_BATCH_NOTIFY_TIMEOUT``; (3)
each outcome is written while the claim is still this notifier's: delivered,
retried after an exponential backoff with jitter (``Retry-After`` honoured),
or — after ``OXIDE_BATCH_NOTIFY_ATTEMPTS`` attempts, or a final refusal —
dead, its last error kept.

A slow or dead receiver never delays the others (per-destination
concurrency): a notifier claims only as many deliveries as it has idle
workers, never more than ``PER_DESTINATION`` of one rule in flight at once,
and the loop (``run_pass(wait=False)``) does not wait for a pass's attempts —
it settles each as it ends and keeps claiming for the idle workers, so a
receiver that hangs holds at most ``PER_DESTINATION`` workers, each for at
most its timeout, while the other destinations' deliveries flow through the
rest.
"""

from __future__ import annotations

import random
from collections import Counter
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
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

#: Attempts in flight at once in one notifier (a claim is made only for an
#: idle worker, so a claimed delivery is attempted at once, well inside its lease).
WORKERS = 16
#: Attempts in flight at once to one rule's destination, in one notifier.
PER_DESTINATION = 4


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
        self._executor: ThreadPoolExecutor | None = None
        self._in_flight: dict[Future[Attempt], tuple[models.NotificationDelivery, str]] = {}

    @property
    def lease(self) -> timedelta:
        """A claim outlives any attempt: two timeouts (connect, then read) and a margin."""
        return 2 * self.policy.timeout + timedelta(seconds=2)

    def run_pass(self, *, wait_for_attempts: bool = True) -> PassReport:
        """Dispatch new events, settle the attempts that ended, claim due
        deliveries for the idle workers and start them. ``wait_for_attempts``
        (``--once``, the tests): wait for every attempt and settle it; the loop
        passes ``False`` and calls ``wait`` between passes."""
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
        self._settle_done(report)
        room = WORKERS - len(self._in_flight)
        if room > 0:
            busy = Counter(delivery.rule_id for delivery, _ in self._in_flight.values())
            token, claimed = store.claim_due(
                self.using,
                now=self.clock.now(),
                lease=self.lease,
                limit=room,
                per_rule=PER_DESTINATION,
                busy=busy,
            )
            report.attempted = len(claimed)
            for delivery in claimed:
                self._in_flight[self._pool().submit(self._attempt, delivery)] = (delivery, token)
        if wait_for_attempts:
            self.wait(None)
            self._settle_done(report)
        return report

    def wait(self, seconds: float | None) -> bool:
        """Wait up to ``seconds`` (``None``: without limit) for every attempt in
        flight to end — or, with a limit, for the first one. ``True`` when one ended."""
        if not self._in_flight:
            return False
        done, _ = wait(
            list(self._in_flight),
            timeout=seconds,
            return_when=FIRST_COMPLETED if seconds is not None else ALL_COMPLETED,
        )
        return bool(done)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def close(self) -> PassReport:
        """Wait for the attempts in flight (each bounded by its timeout), settle
        them and stop the workers."""
        report = PassReport()
        self.wait(None)
        self._settle_done(report)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        return report

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=WORKERS)
        return self._executor

    def _settle_done(self, report: PassReport) -> None:
        for future in [future for future in self._in_flight if future.done()]:
            delivery, token = self._in_flight.pop(future)
            error = future.exception()
            attempt = (
                future.result()
                if error is None
                else Attempt("retry", f"notifier error: {type(error).__name__}")
            )
            self._settle(delivery, token, attempt, report)

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
