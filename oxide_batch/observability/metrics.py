"""Prometheus metrics on a registry the app owns (never the global default).

Every label value is a bounded enum: route templates (the resolved URL pattern,
never the raw path), HTTP methods, status classes, repository operation names,
error codes, batch statuses, operator actions and purge kinds. Anything outside
its set is reported as ``other``; job names, ids, parameters, exit codes and
user text never become labels. ``docs/observability.md`` lists every metric.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Final
from urllib.parse import urlsplit

from django.apps import apps
from django.conf import settings
from django.db import connections
from django.urls import URLPattern, URLResolver, get_resolver
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

import oxide_batch.domain.retention  # noqa: F401  (defines the retention error codes)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import error_classes
from oxide_batch.domain.operator import OperatorAction
from oxide_batch.domain.retention import PURGE_KINDS, RetentionAction
from oxide_batch.domain.status import BatchStatus
from oxide_batch.observability.database import bounded_cursor
from oxide_batch.observability.notify_metrics import NOTIFY_GAUGES
from oxide_batch.observability.notify_metrics import STATES as NOTIFY_STATE_NAMES

OTHER: Final = "other"
UNMATCHED_ROUTE: Final = "unmatched"
# A static file (answered by whitenoise, before any URL pattern), or none there.
STATIC_ROUTE: Final = "static"
OK: Final = "ok"
DATABASE_ERROR: Final = "database_error"

METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT", OTHER}
)
STATUS_CLASSES: Final = frozenset({"1xx", "2xx", "3xx", "4xx", "5xx", OTHER})
STATUSES: Final = frozenset(status.value for status in BatchStatus)
NOTIFY_STATES: Final = frozenset(NOTIFY_STATE_NAMES)
TRANSITION_KINDS: Final = frozenset({"job", "step"})
REQUEST_ACTIONS: Final = frozenset(
    [action.value for action in OperatorAction] + [action.value for action in RetentionAction]
)
REQUEST_OUTCOMES: Final = frozenset({"applied", "replayed", "rejected"})
PURGE_KIND_VALUES: Final = frozenset(PURGE_KINDS)
PURGE_BATCH_OUTCOMES: Final = frozenset({"applied", "replayed", "conflict", "failed"})
WATCHDOG_OUTCOMES: Final = frozenset(
    {"recovered", "replayed", "refused", "skipped", "would_recover"}
)
WATCHDOG_PASS_OUTCOMES: Final = frozenset({"ok", "holding", "unavailable"})
# The codes a failed COMMIT usually has (faults.translate_commit): their series
# exist from the start, so ``increase()`` sees the first failure too.
COMMIT_FAILURE_SEEDS: Final = ("commit_outcome_unknown", "concurrent_modification", "unavailable")
LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# ------------------------------------------------------------------- bounded sets


@functools.cache
def operation_values() -> frozenset[str]:
    """The repository operations, as the port declares them (``port.OPERATIONS``)."""
    from oxide_batch.repository.port import OPERATIONS

    return frozenset({*OPERATIONS, OTHER})


@functools.cache
def outcome_values() -> frozenset[str]:
    """``ok``, every typed error code, ``database_error`` and ``other``."""
    return frozenset({OK, DATABASE_ERROR, OTHER, *error_classes()})


def _join_route(prefix: str, route: str) -> str:
    # As Django's ResolverMatch builds ``route``: a nested regex loses its ``^``.
    return prefix + (route[1:] if route.startswith("^") else route)


def _routes(patterns: Iterable[URLPattern | URLResolver], prefix: str) -> Iterator[str]:
    for pattern in patterns:
        route = _join_route(prefix, str(pattern.pattern))
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, route)
        else:
            yield route


def route_values() -> frozenset[str]:
    """Every route template of the URLconf, ``static`` and ``unmatched``."""
    return frozenset({*_routes(get_resolver().url_patterns, ""), STATIC_ROUTE, UNMATCHED_ROUTE})


def unrouted_label(path: str) -> str:
    """The route label of a request no URL pattern answered: ``static`` under
    ``STATIC_URL``, else ``unmatched``."""
    prefix = "/" + urlsplit(settings.STATIC_URL or "").path.strip("/") + "/"
    return STATIC_ROUTE if prefix != "//" and path.startswith(prefix) else UNMATCHED_ROUTE


def method_label(method: str | None) -> str:
    value = (method or "").upper()
    return value if value in METHODS else OTHER


def status_class(status: int) -> str:
    return f"{status // 100}xx" if 100 <= status <= 599 else OTHER


@functools.cache
def code_values() -> frozenset[str]:
    """Every typed error code, ``database_error`` and ``other``."""
    return outcome_values() - {OK}


def operation_label(operation: str) -> str:
    return operation if operation in operation_values() else OTHER


def outcome_label(outcome: str) -> str:
    return outcome if outcome in outcome_values() else OTHER


def code_label(code: str) -> str:
    return code if code in code_values() else OTHER


# ------------------------------------------------------------------------ registry

REGISTRY: Final = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

API_REQUESTS: Final = Counter(
    "oxide_batch_api_requests",
    "HTTP requests answered, by route template, method and status class.",
    ["route", "method", "status_class"],
    registry=REGISTRY,
)
REPOSITORY_OPERATIONS: Final = Counter(
    "oxide_batch_repository_operations",
    "Repository operations, by operation and outcome (ok or the error code).",
    ["operation", "outcome"],
    registry=REGISTRY,
)
REPOSITORY_LATENCY: Final = Histogram(
    "oxide_batch_repository_operation_duration_seconds",
    "Time spent in one repository operation (without its transaction's commit).",
    ["operation"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
TRANSITIONS: Final = Counter(
    "oxide_batch_lifecycle_transitions",
    "Committed status changes of job and step executions, by kind and from/to status.",
    ["kind", "from_status", "to_status"],
    registry=REGISTRY,
)
OPERATOR_REQUESTS: Final = Counter(
    "oxide_batch_operator_requests",
    "Audited operator and retention requests, by action and outcome.",
    ["action", "outcome"],
    registry=REGISTRY,
)
PURGE_ROWS: Final = Counter(
    "oxide_batch_purge_rows_deleted",
    "Rows deleted by committed purge batches, by kind.",
    ["kind"],
    registry=REGISTRY,
)
PURGE_BATCHES: Final = Counter(
    "oxide_batch_purge_batches",
    "Purge batches: applied, replayed, conflict (plan stale or a lock race lost) or failed.",
    ["outcome"],
    registry=REGISTRY,
)
COMMIT_FAILURES: Final = Counter(
    "oxide_batch_commit_failures",
    "Units of work whose COMMIT failed, by error code (commit_outcome_unknown: the "
    "outcome is unknown; concurrent_modification: the server refused it).",
    ["code"],
    registry=REGISTRY,
)
WATCHDOG_ACTIONS: Final = Counter(
    "oxide_batch_watchdog_actions",
    "What the lease watchdog did with an execution whose lease expired: recovered, "
    "replayed (another watchdog decided it first), refused (audited), skipped "
    "(unknown commit: a human decides; or renewed meanwhile), would_recover (--dry-run).",
    ["outcome"],
    registry=REGISTRY,
)
WATCHDOG_PASSES: Final = Counter(
    "oxide_batch_watchdog_passes",
    "Watchdog passes: ok, holding (after a start or an outage, for one lease TTL) or "
    "unavailable (the database could not be reached).",
    ["outcome"],
    registry=REGISTRY,
)
WATCHDOG_LAST_PASS: Final = Gauge(
    "oxide_batch_watchdog_last_pass_timestamp_seconds",
    "Unix time of the watchdog's last pass that reached the database (alert when it "
    "stops moving: no watchdog is running).",
    registry=REGISTRY,
    multiprocess_mode="max",
)
CONSOLE_LOGIN_FAILURES: Final = Counter(
    "oxide_batch_console_login_failures",
    "Failed console logins: wrong credentials and attempts refused by the lockout.",
    registry=REGISTRY,
)
CONSOLE_LOCKOUTS: Final = Counter(
    "oxide_batch_console_login_lockouts",
    "Console login attempts refused because the account or the address is locked out "
    "(django-axes; the first counts when the limit is reached).",
    registry=REGISTRY,
)
# Registered after the gauges (below), so a scrape shows the failure of its own refresh.
GAUGE_REFRESH_FAILURES: Final = Counter(
    "oxide_batch_gauge_refresh_failures",
    "Failed refreshes of the database-computed gauges (the last values are kept).",
    registry=None,
)

LABELLED: Final = (
    API_REQUESTS,
    REPOSITORY_OPERATIONS,
    REPOSITORY_LATENCY,
    TRANSITIONS,
    OPERATOR_REQUESTS,
    PURGE_ROWS,
    PURGE_BATCHES,
    COMMIT_FAILURES,
    WATCHDOG_ACTIONS,
    WATCHDOG_PASSES,
)


def label_sets() -> dict[str, dict[str, frozenset[str]]]:
    """Each ``oxide_batch_*`` metric family's labels and their bounded value sets."""
    return {
        "oxide_batch_api_requests": {
            "route": route_values(),
            "method": METHODS,
            "status_class": STATUS_CLASSES,
        },
        "oxide_batch_repository_operations": {
            "operation": operation_values(),
            "outcome": outcome_values(),
        },
        "oxide_batch_repository_operation_duration_seconds": {"operation": operation_values()},
        "oxide_batch_lifecycle_transitions": {
            "kind": TRANSITION_KINDS,
            "from_status": STATUSES,
            "to_status": STATUSES,
        },
        "oxide_batch_operator_requests": {"action": REQUEST_ACTIONS, "outcome": REQUEST_OUTCOMES},
        "oxide_batch_purge_rows_deleted": {"kind": PURGE_KIND_VALUES},
        "oxide_batch_purge_batches": {"outcome": PURGE_BATCH_OUTCOMES},
        "oxide_batch_commit_failures": {"code": code_values()},
        "oxide_batch_watchdog_actions": {"outcome": WATCHDOG_OUTCOMES},
        "oxide_batch_watchdog_passes": {"outcome": WATCHDOG_PASS_OUTCOMES},
        "oxide_batch_watchdog_last_pass_timestamp_seconds": {},
        "oxide_batch_gauge_refresh_failures": {},
        "oxide_batch_console_login_failures": {},
        "oxide_batch_console_login_lockouts": {},
        "oxide_batch_executions": {"status": STATUSES},
        "oxide_batch_executions_estimated": {"status": STATUSES},
        "oxide_batch_unresolved_executions": {},
        "oxide_batch_unresolved_lost_writes": {},
        "oxide_batch_gauges_refreshed_timestamp_seconds": {},
        # The notifier's gauges (issue 41, observability/notify_metrics.py).
        "oxide_batch_notify_deliveries": {"state": NOTIFY_STATES},
        "oxide_batch_notify_retried_attempts": {},
        "oxide_batch_notify_undispatched_events": {},
        "oxide_batch_notify_oldest_pending_seconds": {},
    }


def seed() -> None:
    """Create the series an alert watches before their first increment."""
    for code in COMMIT_FAILURE_SEEDS:
        COMMIT_FAILURES.labels(code)


def reset() -> None:
    """Forget every labelled sample and the cached gauges (tests only)."""
    for metric in LABELLED:
        metric.clear()
    seed()
    GAUGES.invalidate()


# --------------------------------------------------- gauges computed from the database


class ExecutionGauges(Collector):
    """Executions by status and unresolved executions, refreshed at most once per
    ``OXIDE_BATCH_METRICS_GAUGE_TTL`` (15 s) with bounded, indexed queries.

    Per status: ``count(*)`` of at most ``OXIDE_BATCH_METRICS_STATUS_COUNT_CAP`` rows
    read from the ``(status, created_at)`` index — exact below the cap. At the cap,
    PostgreSQL's planner statistics (``reltuples`` × the status's frequency, kept
    by autovacuum's ANALYZE) give an estimate, flagged by
    ``oxide_batch_executions_estimated``; without statistics (SQLite) the value
    stays at the cap. Unresolved executions: the console's indexed query
    (``selectors.unresolved.needs_attention_queryset``, the partial index on
    unresolved statuses), also capped. A failed refresh keeps the last values
    and counts ``oxide_batch_gauge_refresh_failures_total``; a scrape never fails.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempted: float | None = None
        self._values: tuple[dict[str, int], dict[str, bool], int, int, float] | None = None
        self.now: Any = None  # a callable returning "now" (tests); default: the system clock

    def invalidate(self) -> None:
        with self._lock:
            self._attempted = None
            self._values = None

    def describe(self) -> Iterable[Metric]:
        return self._families(None)

    def collect(self) -> Iterable[Metric]:
        return self._families(self._current())

    def _current(self) -> tuple[dict[str, int], dict[str, bool], int, int, float] | None:
        ttl = batch_settings.METRICS_GAUGE_TTL.total_seconds()
        with self._lock:
            now = time.monotonic()
            if self._attempted is None or now - self._attempted >= ttl:
                self._attempted = now
                try:
                    self._values = self._refresh()
                except Exception:  # a scrape never fails: keep the last values
                    GAUGE_REFRESH_FAILURES.inc()
            return self._values

    def _refresh(self) -> tuple[dict[str, int], dict[str, bool], int, int, float]:
        from oxide_batch.selectors.unresolved import needs_attention_queryset

        cap = batch_settings.METRICS_STATUS_COUNT_CAP
        now = self.now() if self.now is not None else _system_now()
        using = "default"
        table = apps.get_model("oxide_batch", "JobExecution")._meta.db_table
        statuses = [status.value for status in BatchStatus]
        quote = connections[using].ops.quote_name
        bounded = " ".join(
            f"(SELECT count(*) FROM (SELECT 1 FROM {quote(table)} WHERE status = %s "  # nosec B608 # quoted table, int cap
            f"LIMIT {cap}) AS s{index}){',' if index < len(statuses) - 1 else ''}"
            for index, _ in enumerate(statuses)
        )
        with bounded_cursor(using) as cursor:
            cursor.execute(f"SELECT {bounded}", statuses)
            row = cursor.fetchone()
            counts = {status: int(value) for status, value in zip(statuses, row, strict=True)}
            estimated = {status: False for status in statuses}
            if any(value >= cap for value in counts.values()):
                estimates = _planner_estimates(cursor, using, table)
                for status, value in counts.items():
                    if value >= cap and status in estimates:
                        counts[status] = max(cap, estimates[status])
                        estimated[status] = True
            unresolved = (
                needs_attention_queryset(
                    now=now,
                    stale_after=batch_settings.RECOVERY_STALE_AFTER,
                    lease_ttl=batch_settings.LEASE_TTL,
                )
                .using(using)[:cap]
                .count()
            )
            # contract §2.5.14: the few marked executions, read from their partial index.
            execution = apps.get_model("oxide_batch", "JobExecution")
            lost_writes = (
                execution.objects.using(using)
                .filter(lost_write__isnull=False, lost_write_resolution__isnull=True)[:cap]
                .count()
            )
        return counts, estimated, unresolved, lost_writes, time.time()

    @staticmethod
    def _families(
        values: tuple[dict[str, int], dict[str, bool], int, int, float] | None,
    ) -> list[Metric]:
        by_status = GaugeMetricFamily(
            "oxide_batch_executions",
            "Job executions by status (exact below the count cap, else a planner estimate).",
            labels=["status"],
        )
        flagged = GaugeMetricFamily(
            "oxide_batch_executions_estimated",
            "1 when oxide_batch_executions for the status is an estimate (at or over the cap).",
            labels=["status"],
        )
        unresolved = GaugeMetricFamily(
            "oxide_batch_unresolved_executions",
            "Executions a recovery may resolve now: UNKNOWN, claimed with the owner's lease "
            "expired, or unclaimed and inactive longer than OXIDE_BATCH_RECOVERY_STALE_AFTER "
            "(capped).",
        )
        lost_writes = GaugeMetricFamily(
            "oxide_batch_unresolved_lost_writes",
            "Executions whose lost-write marker no operator resolved: each refuses a launch or "
            "restart of its instance until a person resolves it (capped).",
        )
        refreshed = GaugeMetricFamily(
            "oxide_batch_gauges_refreshed_timestamp_seconds",
            "Unix time of the last successful refresh of the database-computed gauges.",
        )
        if values is not None:
            counts, estimated, unresolved_count, lost_write_count, at = values
            for status, count in counts.items():
                by_status.add_metric([status], count)
                flagged.add_metric([status], 1 if estimated[status] else 0)
            unresolved.add_metric([], unresolved_count)
            lost_writes.add_metric([], lost_write_count)
            refreshed.add_metric([], at)
        return [by_status, flagged, unresolved, lost_writes, refreshed]


def _system_now() -> datetime:
    from oxide_batch.repository import SystemClock

    return SystemClock().now()


def _planner_estimates(cursor: Any, using: str, table: str) -> dict[str, int]:
    """Rows per status from PostgreSQL's statistics (no table access); ``{}`` elsewhere."""
    if connections[using].vendor != "postgresql":
        return {}
    cursor.execute(
        "SELECT c.reltuples, s.most_common_vals::text::text[], s.most_common_freqs "
        "FROM pg_class c LEFT JOIN pg_stats s ON s.schemaname = c.relnamespace::regnamespace::text"
        " AND s.tablename = c.relname AND s.attname = 'status' "
        "WHERE c.oid = to_regclass(%s)",
        [table],
    )
    row = cursor.fetchone()
    if row is None or row[0] is None or row[0] < 0 or row[1] is None or row[2] is None:
        return {}
    total = float(row[0])
    return {
        str(value): round(total * float(freq)) for value, freq in zip(row[1], row[2], strict=False)
    }


seed()
GAUGES: Final = ExecutionGauges()
REGISTRY.register(GAUGES)
REGISTRY.register(NOTIFY_GAUGES)  # issue 41: the notifier's gauges
REGISTRY.register(GAUGE_REFRESH_FAILURES)


def exposition() -> bytes:
    """The text exposition of the app's registry (all worker processes' samples when
    ``PROMETHEUS_MULTIPROC_DIR`` is set, e.g. under gunicorn with several workers)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        registry.register(GAUGES)
        registry.register(NOTIFY_GAUGES)
        return generate_latest(registry)
    return generate_latest(REGISTRY)
