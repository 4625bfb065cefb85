"""The derived facts of an execution, each defined once, in every form a read
needs: an ORM expression (the selectors, the console, the repository's ORM
reads), an SQL fragment (the repository's explicit statements) and a Python
form over a row's values (what the domain's values and the pages compute).
``tests/test_facts.py`` evaluates the forms on the same rows on both databases and
asserts them equal.

- **newest step write**: the newest ``last_activity_at`` of the execution's
  steps (their runtime writes), ``None`` without one — :func:`newest_step_write`,
  :func:`newest_step_write_sql`. A claimed partition worker's step (its own
  ``owner_token``) is left out: its writes renew its own lease (decision 467).
- **owner recorded**: a runtime's token is recorded on the execution (it was
  claimed; the token itself is never read) — :func:`owner_recorded`,
  :func:`owner_recorded_of`.
- **last activity** (contract §2.5.3): the later of the row's own activity
  (``last_activity_at``, else ``updated_at``) and its newest step write —
  :func:`last_activity_of` (the domain's :func:`~oxide_batch.domain.evidence.latest_activity`).
- **inactivity**: silent since a cutoff, no last activity at or after it —
  :func:`silent_since` (the ORM predicate the unresolved lists filter on),
  :func:`silent_since_of`; for an owner's lease the cutoff is each row's own,
  now minus the TTL its claim was granted — :func:`lease_cutoff`,
  :func:`lease_silent` (the watchdog, the "needs attention" list, the gauge).

Below the repository (which reads them while it locks) and above the models.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    BooleanField,
    DateTimeField,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.evidence import latest_activity
from oxide_batch.domain.execution import own_activity

# -- newest step write -------------------------------------------------------------


def newest_step_write(using: str = "default") -> Subquery:
    """The newest runtime write (``last_activity_at``) of the steps of the
    execution in ``OuterRef("pk")`` (a correlated subquery on the ``ob_step_name``
    index, led by the execution id): the step half of contract §2.5.3's activity
    — a recovery, which moves the steps' ``updated_at``, never moves it."""
    # A claimed partition worker's writes renew its own lease, not the
    # execution's (issue 43, decision 467): the manager's death stays visible.
    steps = models.StepExecution.objects.using(using).filter(
        job_execution_id=OuterRef("pk"), owner_token__isnull=True
    )
    newest = steps.order_by(F("last_activity_at").desc(nulls_last=True))
    return Subquery(newest.values("last_activity_at")[:1])


def newest_step_write_sql(connection: Any, execution_id: str) -> str:
    """:func:`newest_step_write` as a scalar subquery for an explicit statement
    on ``connection``: ``execution_id`` is the SQL of the execution's id in the
    outer query (``e."id"``). The same index, the same order."""
    quote = connection.ops.quote_name
    meta = models.StepExecution._meta
    activity = quote(meta.get_field("last_activity_at").column)
    parent = quote(meta.get_field("job_execution").column)
    own_token = quote(meta.get_field("owner_token").column)
    return (
        f"(SELECT s.{activity} FROM {quote(meta.db_table)} s "  # nosec B608 # quoted model identifiers
        f"WHERE s.{parent} = {execution_id} AND s.{own_token} IS NULL "
        f"ORDER BY s.{activity} DESC NULLS LAST LIMIT 1)"
    )


# -- owner recorded ------------------------------------------------------------------


def owner_recorded() -> ExpressionWrapper[Any]:
    """Whether a runtime's token is recorded on the execution (only whether:
    the token itself is never read)."""
    return ExpressionWrapper(Q(owner_token__isnull=False), output_field=BooleanField())


def owner_recorded_of(row: Any) -> bool:
    """:func:`owner_recorded` of a row that carries ``owner_token``."""
    return row["owner_token"] is not None


# -- last activity and inactivity ---------------------------------------------------


def last_activity_of(
    last_activity_at: datetime | None, updated_at: datetime, newest_step_write_at: datetime | None
) -> datetime:
    """contract §2.5.3's activity of an execution from its row's columns and
    its :func:`newest_step_write`."""
    return latest_activity(own_activity(last_activity_at, updated_at), newest_step_write_at)


def silent_since(cutoff: datetime) -> Q:
    """The execution in ``OuterRef`` had no activity at or after ``cutoff``:
    its own activity (``last_activity_at``, else ``updated_at``) is before it
    and no step wrote since — :func:`silent_since_of` of
    :func:`last_activity_of`, as a predicate. The own activity is spelled as
    two conditions, not a ``COALESCE``, so each stays a plain condition on
    the rows the partial index ``ob_execution_unresolved`` hands over (keyed
    by ``id`` since decision 170: a key every runtime write moved made those
    writes non-HOT)."""
    recent_step_write = models.StepExecution.objects.filter(
        job_execution_id=OuterRef("pk"), last_activity_at__gte=cutoff, owner_token__isnull=True
    )
    own_before = Q(last_activity_at__lt=cutoff) | Q(
        last_activity_at__isnull=True, updated_at__lt=cutoff
    )
    return Q(own_before, ~Exists(recent_step_write))


def silent_since_of(last_activity: datetime, cutoff: datetime) -> bool:
    """:func:`silent_since` of an execution whose :func:`last_activity_of` is
    ``last_activity``."""
    return last_activity < cutoff


# -- the owner's lease, by the TTL its claim was granted ----------------------------

#: The annotation :func:`lease_silent` reads (:func:`lease_cutoff` under that name).
LEASE_CUTOFF = "lease_cutoff"


def lease_cutoff(now: datetime, default_ttl: timedelta) -> ExpressionWrapper[Any]:
    """``now`` minus the lease TTL the execution's claim was granted (its
    ``lease_ttl``; ``default_ttl`` for a claim recorded before it was kept):
    an owner silent since before it has let its lease expire (contract §2.5.3)."""
    ttl = Coalesce(F("lease_ttl"), Value(default_ttl, output_field=DurationField()))
    return ExpressionWrapper(
        Value(now, output_field=DateTimeField()) - ttl, output_field=DateTimeField()
    )


def lease_silent() -> Q:
    """:func:`silent_since` with each row's own cutoff: the queryset carries
    :func:`lease_cutoff` as ``LEASE_CUTOFF``. Its Python form is
    :func:`silent_since_of` with ``now - granted TTL``."""
    cutoff = F(LEASE_CUTOFF)
    recent_step_write = models.StepExecution.objects.filter(
        job_execution_id=OuterRef("pk"),
        last_activity_at__gte=OuterRef(LEASE_CUTOFF),
        owner_token__isnull=True,  # a claimed worker's write is its own lease's (decision 467)
    )
    own_before = Q(last_activity_at__lt=cutoff) | Q(
        last_activity_at__isnull=True, updated_at__lt=cutoff
    )
    return Q(own_before, ~Exists(recent_step_write))
