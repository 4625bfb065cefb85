"""Read-only queries for the console, the API and the commands.

Writes go through the repository; these only read, each with a fixed query count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.db import connections, router
from django.db.models import (
    BigIntegerField,
    Case,
    CharField,
    Count,
    DateTimeField,
    Exists,
    F,
    IntegerField,
    Lookup,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    When,
)
from django.db.models.functions import TruncDate

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.errors import JobExecutionNotFound, Unavailable
from oxide_batch.domain.evidence import ExecutionView
from oxide_batch.domain.recovery import FAILURE_ID_GIVEN
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository import statements
from oxide_batch.repository.control import execution_view_from_row, newest_step_write
from oxide_batch.repository.records import CONTROL_COLUMNS
from oxide_batch.roles import APP_LABEL, PERMISSIONS

UNRESOLVED_PAGE_MAX = 500


_CODE = re.compile(r"[A-Z_]{1,32}")


# Generic only for the type checker: without django_stubs_ext's monkeypatch
# (a host project's settings) Django's class is not subscriptable at run time.
if TYPE_CHECKING:
    _Lookup = Lookup[str]
else:
    _Lookup = Lookup


class InLiterals(_Lookup):
    """``column IN ('A', 'B', …)`` with the values written into the statement,
    not bound as parameters — for fixed code values only (checked).

    Bound, ``status IN ($1, …)`` is fine for a custom plan, but after five runs
    of a prepared statement on one connection PostgreSQL may switch to its
    generic plan, which cannot prove a partial index's predicate from
    parameters: the unresolved list then walked the whole execution table
    (bench/size.py, docs/performance.md). With literals the generic plan keeps
    the partial index."""

    lookup_name = "in_literals"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        lhs, params = self.process_lhs(compiler, connection)
        values = list(self.rhs)
        if not values or not all(_CODE.fullmatch(value) for value in values):
            raise ValueError(f"in_literals takes code values only, not {values!r}")
        literals = ", ".join(f"'{value}'" for value in values)
        return f"{lhs} IN ({literals})", list(params)


def repository_is_empty() -> bool:
    """True when no job instance has been recorded yet (one indexed query)."""
    return not models.JobInstance.objects.exists()


def unresolved_executions_queryset(
    *, now: datetime, inactive_for: timedelta
) -> QuerySet[models.JobExecution]:
    """Executions needing an operator (``unresolved_for``, the dashboard; contract §2.5.3, §5.3):
    UNKNOWN, or STARTING/STARTED/STOPPING with no activity (``last_activity_at``:
    runtime writes and owner observations) and no step write (the steps'
    ``last_activity_at``) since ``now - inactive_for``.

    The top-level ``status IN (…)`` equals the predicate of the partial index
    ``ob_execution_unresolved`` on ``last_activity_at``, so PostgreSQL can read
    the (small) set of unresolved rows from it instead of the whole table; its
    values are literals in the statement (:class:`InLiterals`), so a prepared
    statement's generic plan can use that index too.
    Unordered: compose further filters, then order.
    """
    return models.JobExecution.objects.filter(InLiterals(F("status"), models.UNRESOLVED)).filter(
        Q(status=BatchStatus.UNKNOWN.value) | _silent_since(now - inactive_for)
    )


def _silent_since(cutoff: datetime) -> Q:
    """No activity of the execution in ``OuterRef`` since ``cutoff``: no runtime
    write or owner observation, and no step write (contract §2.5.3)."""
    recent_step_write = models.StepExecution.objects.filter(
        job_execution_id=OuterRef("pk"), last_activity_at__gte=cutoff
    )
    return Q(Q(last_activity_at__lt=cutoff), ~Exists(recent_step_write))


def needs_attention_queryset(
    *, now: datetime, stale_after: timedelta, lease_ttl: timedelta
) -> QuerySet[models.JobExecution]:
    """The executions a recovery may resolve now (the console's "needs
    attention", the dashboard's unresolved list, the gauge): UNKNOWN; claimed
    and active with its owner's lease expired (silent longer than
    ``lease_ttl``, contract §2.5.3); unclaimed and active, silent longer than
    ``stale_after``. On the partial index ``ob_execution_unresolved``, as
    :func:`unresolved_executions_queryset`. Unordered."""
    return models.JobExecution.objects.filter(InLiterals(F("status"), models.UNRESOLVED)).filter(
        Q(status=BatchStatus.UNKNOWN.value)
        | (Q(owner_token__isnull=False) & _silent_since(now - lease_ttl))
        | (Q(owner_token__isnull=True) & _silent_since(now - stale_after))
    )


def expired_lease_candidates(
    *, now: datetime, lease_ttl: timedelta, after_id: int = 0, limit: int = 100
) -> list[int]:
    """Ids of the claimed, active executions whose owner has been silent longer
    than ``lease_ttl`` by ``now`` (no runtime write, observation or step write
    since): the watchdog's candidates, ascending, after ``after_id`` (keyset).
    One query on the partial index of unresolved executions; the caller reads
    their proposals, which decide (a write may land in between)."""
    rows = (
        unresolved_executions_queryset(now=now, inactive_for=lease_ttl)
        .filter(owner_token__isnull=False, pk__gt=after_id)
        .exclude(status=BatchStatus.UNKNOWN.value)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return list(rows[:limit])


def database_uptime(using: str = "default") -> timedelta | None:
    """How long the database server has been running as a primary that takes
    writes (PostgreSQL's ``now() - pg_postmaster_start_time()``); ``None`` where
    the database cannot tell (SQLite). ``Unavailable`` when the server is a
    standby in recovery (read-only: nothing can be recovered there)."""
    connection = connections[using]
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - pg_postmaster_start_time(), pg_is_in_recovery()")
        row = cursor.fetchone()
    if row is None or row[1]:
        raise Unavailable()
    uptime: timedelta = row[0]
    return uptime


def unresolved_executions(
    *,
    now: datetime,
    inactive_for: timedelta,
    limit: int = 50,
    before_id: int | None = None,
    lease_ttl: timedelta | None = None,
) -> list[ExecutionView]:
    """One page of :func:`unresolved_executions_queryset` — or, with
    ``lease_ttl``, of :func:`needs_attention_queryset` (``inactive_for`` the
    stale threshold) — newest id first; the next page passes the last id as
    ``before_id`` (keyset). One query."""
    if not 1 <= limit <= UNRESOLVED_PAGE_MAX:
        raise ValueError(f"limit must be 1..{UNRESOLVED_PAGE_MAX}")
    if lease_ttl is None:
        queryset = unresolved_executions_queryset(now=now, inactive_for=inactive_for)
    else:
        queryset = needs_attention_queryset(now=now, stale_after=inactive_for, lease_ttl=lease_ttl)
    if before_id is not None:
        queryset = queryset.filter(pk__lt=before_id)
    rows = _views(queryset.order_by("-id"))
    return [execution_view_from_row(row) for row in rows[:limit]]


def _views(queryset: QuerySet[models.JobExecution]) -> QuerySet[Any, dict[str, Any]]:
    """Rows for :class:`ExecutionView` with the newest step write, so a view's
    ``activity_at`` is contract §2.5.3's activity."""
    rows: QuerySet[Any, dict[str, Any]] = queryset.annotate(
        newest_step_write_at=newest_step_write()
    ).values(*CONTROL_COLUMNS, "newest_step_write_at")
    return rows


def execution_view(execution_id: int) -> ExecutionView:
    """One execution with its stop, owner and activity evidence (one query);
    ``JobExecutionNotFound``."""
    row = _views(models.JobExecution.objects.filter(pk=execution_id)).first()
    if row is None:
        raise JobExecutionNotFound(id=execution_id)
    return execution_view_from_row(row)


def instance_execution_views(job_instance_id: int) -> list[ExecutionView]:
    """The attempts of an instance in attempt order, as views (one query; an
    unknown instance has none)."""
    rows = _views(models.JobExecution.objects.filter(job_instance_id=job_instance_id))
    return [execution_view_from_row(row) for row in rows.order_by("attempt")]


# -- operator console (read-only, bounded) -------------------------------------------

CONSOLE_WINDOW_DAYS = 14


def executions_by_day(*, now: datetime, days: int = CONSOLE_WINDOW_DAYS) -> list[dict[str, Any]]:
    """``[{day, status, n}]`` for executions created in the last ``days`` days
    (a range on the ``ob_execution_created`` index). One query."""
    start = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = (
        models.JobExecution.objects.filter(created_at__gte=start)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "status")
        .annotate(n=Count("id"))
        .order_by("day", "status")
    )
    return list(rows)


FAILED_WITHIN = timedelta(hours=24)


def failed_since(cutoff: datetime) -> QuerySet[models.JobExecution]:
    """The executions that failed at or after ``cutoff`` (``failed_at``: set when
    an execution ends FAILED — by its runtime or a recovery — and kept when an
    abandon follows), whatever their status is now. A range on the partial
    index ``ob_execution_failed``. Unordered."""
    return models.JobExecution.objects.filter(failed_at__gte=cutoff)


def later_attempt() -> QuerySet[models.JobExecution]:
    """The later attempts of the instance of the execution in ``OuterRef``,
    newest first (the unique ``(job_instance, attempt)`` index)."""
    return models.JobExecution.objects.filter(
        job_instance_id=OuterRef("job_instance_id"), attempt__gt=OuterRef("attempt")
    ).order_by("-attempt")


def _operator_abandon() -> QuerySet[models.OperatorRequest]:
    """The operator's applied abandon of the execution in ``OuterRef`` (the
    ``ob_operator_execution`` index), newest first."""
    return models.OperatorRequest.objects.filter(
        job_execution_id=OuterRef("pk"), action="ABANDON", outcome="APPLIED", changed=True
    ).order_by("-id")


def failure_id_given() -> Subquery:
    """Whether the failure a recovery decision wrote on a row (its
    ``recovery_decision_id``) carries an id the operator gave — a key of their
    logs — rather than one the server generated (the decision's record says;
    ``None`` without a decision or for one recorded before it did). One scalar
    subquery on the decision's primary key, evaluated for a page's rows only."""
    return Subquery(
        models.RecoveryDecision.objects.filter(pk=OuterRef("recovery_decision_id")).values(
            f"evidence__{FAILURE_ID_GIVEN}"
        )[:1]
    )


def failure_fate_annotations() -> dict[str, Any]:
    """What became of a failure, as annotations of an execution queryset (one
    scalar subquery each, evaluated for a failed row only — a list's page,
    never the paginator's count): the newest later attempt of its instance
    (``later_id``, ``later_attempt``, ``later_status``) and the operator's
    abandon (``abandoned_by``, ``abandoned_at``, ``abandon_reason``). Read by
    :func:`oxide_batch.admin.display.fate`."""

    def when_failed(queryset: QuerySet[Any], column: str, field: Any) -> Case:
        return Case(
            When(failed_at__isnull=False, then=Subquery(queryset.values(column)[:1])),
            default=None,
            output_field=field,
        )

    later, abandon = later_attempt(), _operator_abandon()
    return {
        "later_id": when_failed(later, "id", BigIntegerField()),
        "later_attempt": when_failed(later, "attempt", IntegerField()),
        "later_status": when_failed(later, "status", CharField()),
        "abandoned_by": when_failed(abandon, "actor", CharField()),
        "abandoned_at": when_failed(abandon, "requested_at", DateTimeField()),
        "abandon_reason": when_failed(abandon, "reason_code", CharField()),
    }


def recent_failures_by_category(
    *, now: datetime, within: timedelta = FAILED_WITHIN
) -> list[dict[str, Any]]:
    """``[{failure_category, n, still_failed, abandoned, rerun}]`` of the
    executions that failed within ``within`` of ``now`` (:func:`failed_since`:
    an abandon that followed keeps them here), with what became of them, each
    failure counted once (``still_failed + abandoned + rerun == n``): abandoned
    since (whether or not a later attempt followed), else followed by a later
    attempt of its instance, else still FAILED. One query."""
    rerun = Exists(later_attempt())
    abandoned = Q(status=BatchStatus.ABANDONED.value)
    rows = (
        failed_since(now - within)
        .values("failure_category")
        .annotate(
            n=Count("id"),
            still_failed=Count("id", filter=Q(status=BatchStatus.FAILED.value) & ~Q(rerun)),
            abandoned=Count("id", filter=abandoned),
            rerun=Count("id", filter=Q(rerun) & ~abandoned),
        )
        .order_by("-n", "failure_category")
    )
    return list(rows)


STEP_TIMELINE_MAX = 200
PARTITION_GRID_MAX = 1024


def step_timeline(job_execution_id: int) -> list[dict[str, Any]]:
    """The steps of one execution in creation order (bounded). One query."""
    rows = (
        models.StepExecution.objects.filter(job_execution_id=job_execution_id)
        .order_by("id")
        # The execution's status by the join: a step under a finished or UNKNOWN
        # execution is not "running" (one query still).
        .annotate(execution_status=F("job_execution__status"))
        .values(
            "id",
            "step_name",
            "status",
            "created_at",
            "started_at",
            "ended_at",
            "execution_status",
        )
    )
    return [dict(row) for row in rows[:STEP_TIMELINE_MAX]]


def partition_grid(step_execution_id: int) -> list[dict[str, Any]]:
    """The partitions of one step by ordinal (bounded). One query."""
    rows = (
        models.StepPartition.objects.filter(step_execution_id=step_execution_id)
        .order_by("ordinal")
        .values("id", "partition_key", "ordinal", "status", "written_count")
    )
    return [dict(row) for row in rows[:PARTITION_GRID_MAX]]


def partitioned_step_of(job_execution_id: int) -> int | None:
    """The newest step of the execution that has partitions, if any. One query."""
    return (
        models.StepPartition.objects.filter(step_execution__job_execution_id=job_execution_id)
        .order_by("-step_execution_id")
        .values_list("step_execution_id", flat=True)
        .first()
    )


def latest_partitioned_execution() -> int | None:
    """The execution of the newest partition row (the dashboard's default). One query."""
    return (
        models.StepPartition.objects.order_by("-id")
        .values_list("step_execution__job_execution_id", flat=True)
        .first()
    )


# -- API tokens ------------------------------------------------------------------------

BATCH_CODENAMES = tuple(PERMISSIONS)


@dataclass(frozen=True)
class TokenCredentials:
    """The token row of a prefix with its user and the batch permissions the
    user holds (Django's ``ModelBackend`` semantics; a superuser is not expanded
    here, nor is an inactive user emptied: the caller decides)."""

    token: models.ApiToken
    user: Any
    held: frozenset[str]


def token_credentials(key_prefix: str) -> TokenCredentials | None:
    """The token with ``key_prefix``, its user and the user's batch permissions,
    in one statement (``None``: no such token) —
    :func:`oxide_batch.repository.statements.credentials`, explicit SQL: the
    ORM's form of the same read costs 0.6–0.8 ms of CPU per request to compile
    (docs/performance.md), on every request of every runtime.

    The user is a real instance, as the ORM builds it for ``.only()``: its
    primary key, username, ``is_active`` and ``is_superuser`` are loaded, any
    other field is deferred and read when used. The token likewise (its
    ``created_at`` deferred).
    """
    alias = router.db_for_read(models.ApiToken)
    connection = connections[alias]
    statement = statements.credentials(connection, APP_LABEL, BATCH_CODENAMES)
    with connection.cursor() as cursor:
        rows = statement.run(cursor, connection, key_prefix)
    if not rows:
        return None
    first = rows[0]
    split = len(statement.token_fields)
    user = get_user_model().from_db(alias, statement.user_fields, first[split:-1])
    token = models.ApiToken.from_db(alias, statement.token_fields, first[:split])
    models.ApiToken._meta.get_field("user").set_cached_value(token, user)
    held = frozenset(row[-1] for row in rows if row[-1] is not None)
    return TokenCredentials(token=token, user=user, held=held)


def api_tokens(*, username: str | None = None) -> list[dict[str, Any]]:
    """Every token (of the user named ``username``), oldest first, without
    anything secret: ``{key_prefix, name, user, created_at, expires_at,
    revoked_at, job_patterns}``. One query."""
    user_field = f"user__{get_user_model().USERNAME_FIELD}"
    rows = models.ApiToken.objects.order_by("id")
    if username is not None:
        rows = rows.filter(**{user_field: username})
    columns = ("key_prefix", "name", "created_at", "expires_at", "revoked_at", "job_patterns")
    return [
        {"user": row[user_field], **{column: row[column] for column in columns}}
        for row in rows.values(user_field, *columns)
    ]
