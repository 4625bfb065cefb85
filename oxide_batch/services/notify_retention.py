"""Retention of notifications (issue 41, decision 283): ``manage.py
batch_notifications prune --older-than AGE`` deletes settled deliveries, the
events they leave with none, and deadline alarms no pass needs
(``repository/notification_retention.py``) — never anything pending."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from oxide_batch.domain.retention import MAX_BATCH_BOUND, AgeBoundTooSmall, BatchBoundOutOfRange
from oxide_batch.repository import notification_retention as store
from oxide_batch.repository.clock import Clock, SystemClock

# As for the audit: what a day-old incident still needs to read stays.
MIN_AGE = timedelta(days=1)


@dataclass(frozen=True)
class NotificationPruneResult:
    cutoff: datetime
    dry_run: bool
    counts: dict[str, int]
    batches: int


class NotificationRetention:
    def __init__(self, *, using: str = "default", clock: Clock | None = None) -> None:
        self.using = using
        self.clock = clock or SystemClock()

    def prune(
        self, *, older_than: timedelta, batch_size: int = MAX_BATCH_BOUND, dry_run: bool = False
    ) -> NotificationPruneResult:
        """Delete what settled before ``now - older_than`` (at least a day),
        ``batch_size`` rows per table per transaction until none is left;
        ``dry_run`` only counts."""
        if older_than < MIN_AGE:
            raise AgeBoundTooSmall(minimum_seconds=int(MIN_AGE.total_seconds()))
        if not 1 <= batch_size <= MAX_BATCH_BOUND:
            raise BatchBoundOutOfRange(bound=batch_size)
        cutoff = self.clock.now() - older_than
        if dry_run:
            return NotificationPruneResult(
                cutoff, True, store.count_prunable(self.using, cutoff), 0
            )
        totals = {"deliveries": 0, "events": 0, "alarms": 0}
        batches = 0
        while True:
            pruned = store.prune(self.using, cutoff, limit=batch_size)
            batches += 1
            for table, count in pruned.items():
                totals[table] += count
            if not any(pruned.values()):
                return NotificationPruneResult(cutoff, False, totals, batches)
