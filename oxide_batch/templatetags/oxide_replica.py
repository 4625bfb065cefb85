"""The console's notice of a page read from the read replica
(:mod:`oxide_batch.db.middleware`): how far behind the replica is when that is
more than ``OXIDE_BATCH_REPLICA_LAG_NOTICE``, or that the page read the primary
because the replica failed. Nothing when no replica is configured, when the
page read the primary by design (a pinned page, a confirmation) or when the
replica is close enough."""

from __future__ import annotations

from typing import Any

from django import template

from oxide_batch.conf import batch_settings
from oxide_batch.db.replica import current

register = template.Library()


def lag_words(seconds: float) -> str:
    """``12 seconds``, ``about 3 minutes``, ``about 2 hours``."""
    if seconds < 90:
        whole = max(round(seconds), 1)
        return f"{whole} second{'' if whole == 1 else 's'}"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} minutes"
    return f"about {round(seconds / 3600)} hours"


@register.inclusion_tag("admin/oxide_batch/replica_notice.html")
def replica_notice() -> dict[str, Any]:
    reads = current()
    if reads is None:
        return {}
    threshold = batch_settings.REPLICA_LAG_NOTICE.total_seconds()
    behind = reads.replica is not None and reads.lag is not None and reads.lag > threshold
    return {
        "fallback": reads.fallback,
        "lag": lag_words(reads.lag) if behind and reads.lag is not None else "",
    }
