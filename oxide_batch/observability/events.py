"""Structured events: one JSON log line per durable fact (logger ``oxide_batch.events``).

Each event has a stable name, a severity, the opaque correlation (job name,
instance id, execution id and attempt, step execution id, request id) and an
outcome. The catalogue below is the allow-list: a field that is not listed for
an event is dropped before anything is logged, so parameter values, checkpoint
payloads, owner tokens, evidence digests and free text cannot appear.
``docs/observability.md`` documents the same catalogue.

Every event carries the id of the request it happened in: taken from
``X-Request-ID`` when it is a sane token, else generated
(:func:`accept_request_id`), and bound for the request by the middleware
through a context variable.

A failing log sink never changes an outcome: :func:`emit` swallows whatever
the logging machinery raises.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import uuid
from collections.abc import Iterator, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

EVENT_LOGGER: Final = "oxide_batch.events"
EVENT_ATTRIBUTE: Final = "oxide_event"
logger = logging.getLogger(EVENT_LOGGER)
_guard_log = logging.getLogger(__name__)

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR

# -- the request id every event carries

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_META = "HTTP_X_REQUEST_ID"
# 1–128 characters of a conservative token alphabet: safe in logs and headers.
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")

_request_id: ContextVar[str | None] = ContextVar("oxide_batch_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being served in this context, or ``None`` (commands)."""
    return _request_id.get()


def accept_request_id(candidate: str | None) -> str:
    """``candidate`` when it is 1–128 characters of ``[A-Za-z0-9._:-]``, else a new
    uuid4 hex (a missing, empty, overlong or odd value is replaced, never echoed)."""
    if candidate is not None and REQUEST_ID_PATTERN.fullmatch(candidate):
        return candidate
    return uuid.uuid4().hex


def bind_request_id(request_id: str | None) -> Token[str | None]:
    return _request_id.set(request_id)


def unbind_request_id(token: Token[str | None]) -> None:
    _request_id.reset(token)


# -- the catalogue


CORRELATION: Final = (
    "request_id",
    "job_name",
    "job_instance_id",
    "job_execution_id",
    "attempt",
    "step_execution_id",
)
STEP_CORRELATION: Final = ("request_id", "job_instance_id", "job_execution_id", "step_execution_id")
FAILURE: Final = ("failure_category", "failure_id")
OPERATOR_FIELDS: Final = (
    "request_id",
    "job_instance_id",
    "job_execution_id",
    "action",
    "operation_id",
    "reason_code",
    "prior_status",
    "result_status",
    "changed",
    "rejection_code",
    "recorded_outcome",
)

FieldValue = str | int | float | bool | None | Mapping[str, int]


@dataclass(frozen=True)
class EventSpec:
    """One catalogued event: its name, default severity, allowed fields and when."""

    name: str
    level: int
    fields: tuple[str, ...]
    when: str

    @property
    def severity(self) -> str:
        return logging.getLevelName(self.level)


def _spec(name: str, level: int, fields: tuple[str, ...], when: str) -> EventSpec:
    return EventSpec(name, level, (*fields, "outcome"), when)


CATALOGUE: Final[dict[str, EventSpec]] = {
    spec.name: spec
    for spec in (
        _spec(
            "instance.created",
            INFO,
            ("request_id", "job_name", "job_instance_id"),
            "a job instance was created (after commit)",
        ),
        _spec(
            "execution.launched",
            INFO,
            (*CORRELATION, "status", "version", "restart"),
            "an attempt (launch or restart) was created (after commit)",
        ),
        _spec(
            "execution.transitioned",
            INFO,
            (*CORRELATION, "from_status", "to_status", "version", *FAILURE),
            "a job execution changed status: runtime or operator transition, the owner "
            "observing a stop, or a recovery (after commit); WARNING for FAILED/UNKNOWN",
        ),
        _spec(
            "execution.stop_requested",
            INFO,
            (*CORRELATION, "status", "version", "changed"),
            "an operator's stop request was recorded, or was a no-op (after commit)",
        ),
        _spec(
            "execution.lost_write_resolved",
            WARNING,
            (*CORRELATION, "status", "changed"),
            "an operator resolved the execution's lost-write marker, or there was none "
            "unresolved (after commit)",
        ),
        _spec(
            "execution.stop_observed",
            INFO,
            (*CORRELATION, "status", "version"),
            "the owner's control observation saw a pending stop (after commit)",
        ),
        _spec(
            "execution.control_observed",
            DEBUG,
            (*CORRELATION, "status", "version", "owner_matches", "stop_requested"),
            "any other control observation (after commit)",
        ),
        _spec(
            "step.created",
            DEBUG,
            (*STEP_CORRELATION, "status", "version"),
            "a step execution was created (after commit)",
        ),
        _spec(
            "step.transitioned",
            INFO,
            (*STEP_CORRELATION, "from_status", "to_status", "version", *FAILURE),
            "a step execution changed status, including a partitioned parent's "
            "aggregation (after commit); WARNING for FAILED/UNKNOWN",
        ),
        _spec(
            "step.chunk_committed",
            DEBUG,
            (*STEP_CORRELATION, "status", "version"),
            "a chunk commit was recorded (after commit)",
        ),
        _spec(
            "recovery.proposed",
            INFO,
            (
                "request_id",
                "job_execution_id",
                "attempt",
                "status",
                "version",
                "eligible",
                "ineligible_reason",
                "unknown_commit",
            ),
            "a recovery proposal was computed (a read: emitted at once)",
        ),
        _spec(
            "recovery.applied",
            WARNING,
            (
                *CORRELATION,
                "from_status",
                "to_status",
                "version",
                "reason_code",
                "decision_id",
                "eligibility",
            ),
            "an audited recovery decision resolved an execution (after commit); "
            "eligibility: unknown_status, inactive, lease_expired or operator_override",
        ),
        _spec(
            "watchdog.recovered",
            WARNING,
            ("job_execution_id", "decision_id", "operation_id", "lease_expired_at", "actor"),
            "the watchdog failed an execution whose owner's lease expired (outcome "
            "recovered; replayed when another watchdog decided it first)",
        ),
        _spec(
            "watchdog.worker_recovered",
            WARNING,
            (
                "job_execution_id",
                "worker_step_execution_id",
                "decision_id",
                "lease_expired_at",
                "actor",
                "detail",
            ),
            "the watchdog failed a claimed partition worker whose lease expired (issue 43): "
            "its partition may be claimed again (detail parent_failed: over the retry "
            "limit, the parent step failed); outcome recovered, or replayed",
        ),
        _spec(
            "watchdog.would_recover",
            INFO,
            ("job_execution_id", "lease_expired_at", "actor"),
            "a --dry-run pass found an execution whose owner's lease expired: it would be "
            "failed, nothing was changed",
        ),
        _spec(
            "watchdog.skipped",
            INFO,
            ("job_execution_id", "operation_id", "reason"),
            "the watchdog left an expired lease alone: unknown_commit (a human decides), "
            "lease_not_expired (the owner wrote since), refused (a rule refused it, audited)",
        ),
        _spec(
            "watchdog.raised",
            INFO,
            ("kind", "job_name", "job_execution_id", "period_start", "deadline", "event_id"),
            "the watchdog raised a run deadline's event (execution.overdue, job.missing) "
            "into the notification outbox",
        ),
        _spec(
            "watchdog.holding",
            INFO,
            ("until", "why"),
            "the watchdog recovers nothing until `until`: it started, reached the database "
            "again after an outage, or the database server started less than a TTL ago",
        ),
        _spec(
            "watchdog.unavailable",
            ERROR,
            ("error_code",),
            "a watchdog pass could not reach the database; it holds off one TTL once it does",
        ),
        _spec(
            "recovery.rejected",
            WARNING,
            OPERATOR_FIELDS,
            "a recovery request was refused by a rule and audited as REJECTED (after commit)",
        ),
        _spec(
            "operator.request.applied",
            INFO,
            OPERATOR_FIELDS,
            "an audited operator or retention request applied (after commit)",
        ),
        _spec(
            "operator.request.rejected",
            WARNING,
            OPERATOR_FIELDS,
            "an operator request was refused by a rule and audited as REJECTED (after commit)",
        ),
        _spec(
            "operator.request.replayed",
            INFO,
            OPERATOR_FIELDS,
            "an operator or retention request was answered from its audit row (nothing "
            "acted; emitted at once)",
        ),
        _spec(
            "hold.placed",
            INFO,
            ("request_id", "job_instance_id", "operation_id", "reason_code", "changed"),
            "a retention hold was placed or replaced (after commit)",
        ),
        _spec(
            "hold.released",
            INFO,
            ("request_id", "job_instance_id", "operation_id", "reason_code", "changed"),
            "a retention hold was released, or none was held (after commit)",
        ),
        _spec(
            "purge.batch_applied",
            INFO,
            ("request_id", "operation_id", "reason_code", "changed", "rows_deleted", "counts"),
            "a purge batch deleted its instances and was audited (after commit)",
        ),
        _spec(
            "purge.batch_failed",
            WARNING,
            ("request_id", "candidates"),
            "applying a purge batch failed, e.g. a stale plan (emitted at once; nothing "
            "was deleted)",
        ),
        _spec(
            "repository.conflict",
            WARNING,
            (
                "request_id",
                "operation",
                "job_instance_id",
                "job_execution_id",
                "step_execution_id",
                "partition_id",
            ),
            "an operation lost a race: stale_version or concurrent_modification "
            "(emitted at once; the unit of work rolls back)",
        ),
        _spec(
            "repository.unavailable",
            ERROR,
            ("request_id", "operation"),
            "an operation failed because the database is unreachable, the schema does "
            "not match, or an unmapped database error (emitted at once)",
        ),
        _spec(
            "repository.commit_failed",
            ERROR,
            (
                "request_id",
                "operations",
                "job_instance_id",
                "job_execution_id",
                "step_execution_id",
                "partition_id",
            ),
            "the COMMIT of a unit of work failed: commit_outcome_unknown (the work may "
            "or may not be durable) or a refusal at COMMIT such as concurrent_modification "
            "(nothing committed; WARNING). None of the work's after-commit events follows "
            "(emitted at once)",
        ),
        _spec(
            "console.login_failed",
            INFO,
            ("request_id", "client_ip"),
            "a console login failed: wrong credentials, or refused by the lockout (no "
            "user name is logged; emitted at once)",
        ),
        _spec(
            "console.login_locked_out",
            WARNING,
            ("request_id", "client_ip"),
            "a console login was refused because its account or address reached the "
            "failure limit (django-axes; also on each later attempt while locked)",
        ),
        _spec(
            "api.request",
            DEBUG,
            ("request_id", "route", "method", "status", "duration_ms"),
            "an HTTP request was answered; ERROR for a 5xx status",
        ),
    )
}


def enabled(level: int) -> bool:
    try:
        return logger.isEnabledFor(level)
    except Exception:  # pragma: no cover - a broken logging setup
        return False


def emit(
    name: str,
    fields: Mapping[str, FieldValue],
    *,
    level: int | None = None,
    request_id: str | None = None,
) -> None:
    """Log one catalogued event; fields outside its allow-list are dropped.

    ``request_id`` defaults to the current request's. Never raises.
    """
    try:
        spec = CATALOGUE[name]
        severity = spec.level if level is None else level
        if not logger.isEnabledFor(severity):
            return
        document: dict[str, FieldValue] = {
            "request_id": request_id if request_id is not None else current_request_id()
        }
        allowed = spec.fields
        for key, value in fields.items():
            if key in allowed and key != "request_id":
                document[key] = value
        logger.log(severity, name, extra={EVENT_ATTRIBUTE: document})
    except Exception:  # a failing sink never changes an outcome
        with contextlib.suppress(Exception):
            _guard_log.debug("event %s was not logged", name, exc_info=True)


def _instant(created: float) -> str:
    moment = datetime.fromtimestamp(created, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One compact JSON object per line: ``{ts, severity, event, request_id, …fields}``
    for events, ``{ts, severity, logger, message}`` for any other record."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {"ts": _instant(record.created), "severity": record.levelname}
        event = getattr(record, EVENT_ATTRIBUTE, None)
        if isinstance(event, Mapping):
            document["event"] = str(record.msg)
            document.update(event)
        else:
            document["logger"] = record.name
            document["message"] = record.getMessage()
            if record.exc_info and record.exc_info[0] is not None:
                document["exception"] = record.exc_info[0].__name__
        return json.dumps(document, separators=(",", ":"), ensure_ascii=False, default=str)


@contextlib.contextmanager
def muted(below: int = WARNING) -> Iterator[None]:
    """Drop events below ``below`` while the block runs (a read-only command
    answers and says nothing else; a warning or an error still goes through)."""

    def keep(record: logging.LogRecord) -> bool:
        return record.levelno >= below

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


@contextlib.contextmanager
def written_to(path: Path) -> Iterator[None]:
    """Events go to ``path`` (JSON lines, appended; its directory is created)
    instead of the configured handlers while the block runs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(JsonFormatter())
    saved = logger.handlers[:]
    logger.handlers = [handler]
    try:
        yield
    finally:
        logger.handlers = saved
        handler.close()
