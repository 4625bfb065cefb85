"""The skip ledger in the Django adapter (contract §2.3.3 "Skips"; decisions
400-406).

A chunk commit that carries skipped items writes them in its own
transaction, after its compare-and-swap: one multi-row INSERT for all of
them (PostgreSQL; SQLite splits it by its parameter limit). Their details are
kept as a failure's detail is (``domain/failure_detail.py``): type and
message only, sanitised, scrubbed of the instance's hidden parameter values
and the deployment's patterns, cut to their bounds; with
``OXIDE_BATCH_FAILURE_DETAIL=off`` the type alone (decision 404). A commit
without skips never reaches this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.failure_detail import (
    DetailLevel,
    FailureDetail,
    hidden_values,
    kept_detail,
)
from oxide_batch.domain.scrub import Scrubber
from oxide_batch.domain.skips import SkipEntry
from oxide_batch.repository.statements import PARAMETERS_EXTRA


def needs_parameters(skips: Sequence[SkipEntry]) -> bool:
    """Whether the commit's locking read must carry the instance's parameters
    (a detail to scrub of their hidden values)."""
    return any(entry.detail is not None for entry in skips)


def kept_skip_detail(detail: FailureDetail | None, scrubber: Scrubber) -> FailureDetail | None:
    """What the ledger keeps of a skipped item's detail: its type and message
    (never a traceback) — the type alone when the deployment keeps no detail."""
    if detail is None:
        return None
    level = batch_settings.FAILURE_DETAIL
    if level is DetailLevel.OFF:
        return kept_detail(FailureDetail(type=detail.type), DetailLevel.MESSAGE, scrubber)
    return kept_detail(
        FailureDetail(type=detail.type, message=detail.message), DetailLevel.MESSAGE, scrubber
    )


def insert_skips(
    using: str,
    row: Mapping[str, Any],
    skips: Sequence[SkipEntry],
    *,
    step_execution_id: int,
    chunk: int,
    now: datetime,
) -> int:
    """The ledger rows of ``skips`` for the step row a chunk commit just wrote
    (locked with ``PARAMETERS_EXTRA`` when a detail is to scrub): one INSERT."""
    scrubber = Scrubber(
        hidden_values=hidden_values(
            row.get(PARAMETERS_EXTRA) or [], batch_settings.VISIBLE_PARAMETERS
        ),
        patterns=batch_settings.FAILURE_REDACT,
    )
    rows = []
    for entry in skips:
        detail = kept_skip_detail(entry.detail, scrubber)
        rows.append(
            models.Skip(
                job_instance_id=row["job_instance_id"],
                job_execution_id=row["job_execution_id"],
                step_execution_id=step_execution_id,
                phase=entry.phase.value,
                item=entry.item,
                chunk=chunk,
                category=entry.category.value,
                type=None if detail is None else detail.type,
                message=None if detail is None else detail.message,
                type_truncated=False if detail is None else detail.type_truncated,
                message_truncated=False if detail is None else detail.message_truncated,
                recorded_at=now,
            )
        )
    models.Skip.objects.using(using).bulk_create(rows)
    return len(rows)
