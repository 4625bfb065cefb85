"""The notifier's gauges (issue 41), computed from the database at most once
per ``OXIDE_BATCH_METRICS_GAUGE_TTL``: deliveries by state, the attempts
retried, the events not yet fanned out, and the age of the oldest event not
yet delivered — the alert to have on the notifier itself (docs/notifications.md).
A failed refresh keeps the last values; a scrape never fails."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from oxide_batch.conf import batch_settings

STATES = ("pending", "delivered", "dead")


class NotificationGauges(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempted: float | None = None
        self._values: dict[str, Any] | None = None

    def invalidate(self) -> None:
        with self._lock:
            self._attempted = None
            self._values = None

    def describe(self) -> Iterable[Metric]:
        return self._families(None)

    def collect(self) -> Iterable[Metric]:
        ttl = batch_settings.METRICS_GAUGE_TTL.total_seconds()
        with self._lock:
            now = time.monotonic()
            if self._attempted is None or now - self._attempted >= ttl:
                self._attempted = now
                try:
                    self._values = self._refresh()
                except Exception:  # a scrape never fails: keep the last values
                    self._values = self._values
        return self._families(self._values)

    @staticmethod
    def _refresh() -> dict[str, Any]:
        from oxide_batch.selectors.notifications import delivery_gauges

        gauges = delivery_gauges()
        oldest = gauges.oldest_pending_at
        age = 0.0 if oldest is None else max(0.0, (datetime.now(UTC) - oldest).total_seconds())
        return {
            "pending": gauges.pending,
            "delivered": gauges.delivered,
            "dead": gauges.dead,
            "retried": gauges.retried,
            "undispatched": gauges.undispatched,
            "oldest": age,
        }

    @staticmethod
    def _families(values: dict[str, Any] | None) -> list[Metric]:
        deliveries = GaugeMetricFamily(
            "oxide_batch_notify_deliveries",
            "Notification deliveries by state (pending, delivered, dead).",
            labels=["state"],
        )
        retried = GaugeMetricFamily(
            "oxide_batch_notify_retried_attempts",
            "Attempts beyond each delivery's first (retries), over the deliveries kept.",
        )
        undispatched = GaugeMetricFamily(
            "oxide_batch_notify_undispatched_events",
            "Outbox events not yet fanned out to their rules' deliveries.",
        )
        oldest = GaugeMetricFamily(
            "oxide_batch_notify_oldest_pending_seconds",
            "Age of the oldest event not yet delivered (undispatched or with a pending "
            "delivery); 0 when none. Alert on it: the notifier is down or stuck.",
        )
        if values is not None:
            for state in STATES:
                deliveries.add_metric([state], values[state])
            retried.add_metric([], values["retried"])
            undispatched.add_metric([], values["undispatched"])
            oldest.add_metric([], values["oldest"])
        return [deliveries, retried, undispatched, oldest]


NOTIFY_GAUGES = NotificationGauges()
