"""Inspection pages (read-only): instances, executions, steps, partitions,
definitions, flow decisions, skipped items and the audit rows, with drill-down tables bounded
to :data:`~oxide_batch.admin.base.LINKED_ROWS` rows and a constant number of
queries per page — one module per subject; importing the package registers
them on the admin site."""

from oxide_batch.admin.pages import audit, definitions, executions, instances, skips, steps
from oxide_batch.admin.pages.common import JobNameFilter

__all__ = [
    "JobNameFilter",
    "audit",
    "definitions",
    "executions",
    "instances",
    "skips",
    "steps",
]
