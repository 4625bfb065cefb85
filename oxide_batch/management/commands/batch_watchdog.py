"""``manage.py batch_watchdog [--interval SECONDS] [--once] [--dry-run] [--limit N]
[--json] [--metrics-port PORT]``: fail the executions whose owner's lease expired
(contract §2.5.7) with the operator's audited recovery, until stopped (SIGTERM, SIGINT).

Each pass recovers at most ``--limit`` executions (``MARK_FAILED``, reason
``LEASE_EXPIRED``, actor ``watchdog@<host>``) and leaves every execution with an
unknown commit to a human. After it starts and after every database outage it
saw, it recovers nothing for one lease TTL (a live worker that was retrying
renews its lease by then); ``--once`` (for cron) does not wait at its start, but
still holds off while the database server has been up for less than a TTL.

Each pass also raises the run deadlines' events due (``execution.overdue``
once per execution, ``job.missing`` once per period; ``manage.py
batch_deadlines``, docs/notifications.md) — none in a dry run or while held off.

Output: a line per execution it acted on and per deadline event raised
(``--json``: one JSON object per pass; with ``--once`` exactly one), an
event line per recovery (``watchdog.recovered``, WARNING; a ``--dry-run``'s
``watchdog.would_recover``, INFO; a deadline's ``watchdog.raised``, INFO)
and the ``oxide_batch_watchdog_*`` metrics — in ``PROMETHEUS_MULTIPROC_DIR``
(the service's ``/metrics`` shows them when the watchdog runs with the same
directory, as ``scripts/serve`` starts it) or on its own ``--metrics-port``.
Exit codes as every command's: 0 stopped (or one pass done), 2 usage, 7 the
database unavailable (``--once`` only: the loop waits for it).
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import CommitOutcomeUnknown, OxideBatchError, Unavailable
from oxide_batch.management.commands._cli import OxideCommand, release_idle_connections
from oxide_batch.observability import events, metrics
from oxide_batch.repository.faults import translate
from oxide_batch.selectors.database import database_uptime
from oxide_batch.services import bootstrap
from oxide_batch.services.deadlines import RaisedAlarm
from oxide_batch.services.watchdog import (
    ActionKind,
    Holdoff,
    PassReport,
    Watchdog,
    WatchdogAction,
    watchdog_actor,
)

DEFAULT_INTERVAL = 10.0
# What means "the database is away": the pass waits, and holds off once back.
OUTAGES = (Unavailable, CommitOutcomeUnknown)


def seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError("--interval must be 0.1 to 3600 seconds")
    return value


def positive_arg(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 10_000:
        raise argparse.ArgumentTypeError(f"expected 1 to 10000, got {text!r}")
    return int(text)


def port_arg(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a TCP port, got {text!r}")
    return int(text)


def instant(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def alarm_json(alarm: RaisedAlarm) -> dict[str, Any]:
    return {
        "kind": alarm.kind,
        "job_name": alarm.job_name,
        "job_execution_id": alarm.job_execution_id,
        "period_start": instant(alarm.period_start),
        "deadline": instant(alarm.deadline),
        "event_id": alarm.event_id,
    }


def action_json(action: WatchdogAction) -> dict[str, Any]:
    return {
        "job_execution_id": action.job_execution_id,
        "outcome": action.kind.value,
        "operation_id": action.operation_id,
        "decision_id": action.decision_id,
        "lease_expired_at": instant(action.lease_expired_at),
        "detail": action.detail,
        "repeated": action.repeated,
        "worker_step_execution_id": action.worker_step_execution_id,
    }


class Command(OxideCommand):
    help = "Fail the executions whose owner's lease expired (audited), until stopped."

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval",
            type=seconds_arg,
            default=DEFAULT_INTERVAL,
            metavar="SECONDS",
            help=f"seconds between passes (default {DEFAULT_INTERVAL:g})",
        )
        parser.add_argument("--once", action="store_true", help="one pass, then exit (cron)")
        parser.add_argument(
            "--dry-run", action="store_true", help="list what would be recovered, change nothing"
        )
        parser.add_argument(
            "--limit",
            type=positive_arg,
            default=100,
            metavar="N",
            help="recover at most N executions per pass (default 100)",
        )
        parser.add_argument(
            "--metrics-port",
            type=port_arg,
            metavar="PORT",
            help="serve the watchdog's own /metrics on this port (localhost)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["once"]:
            super().handle(*args, **options)
            return
        self.json_output = bool(options["json"])
        self._loop(**options)

    # -- one pass --------------------------------------------------------------------

    def _watchdog(self, options: dict[str, Any]) -> Watchdog:
        return bootstrap.watchdog(
            actor=watchdog_actor(), limit=options["limit"], dry_run=options["dry_run"]
        )

    def run(self, **options: Any) -> dict[str, Any]:
        """``--once``: one pass (no hold at the start; a young database server still
        holds it off); the database unavailable is exit 7."""
        self.verbosity = options["verbosity"]
        watchdog = self._watchdog(options)
        holdoff = Holdoff(ttl=watchdog.lease_ttl, now=watchdog.now)
        try:
            report = self._pass(watchdog, holdoff)
        except OUTAGES as error:
            metrics.WATCHDOG_PASSES.labels("unavailable").inc()
            events.emit("watchdog.unavailable", {"error_code": error.code, "outcome": "failed"})
            raise
        return self._document(report, holdoff)

    def render(self, document: dict[str, Any]) -> None:
        self._say(document)

    def _pass(self, watchdog: Watchdog, holdoff: Holdoff) -> PassReport:
        """A pass, or the hold-off's report; raises an outage (``OUTAGES``)."""
        release_idle_connections()
        try:
            uptime = database_uptime()
        except DatabaseError as error:
            raise translate(error) or Unavailable() from error
        until = holdoff.reached(server_up_for=uptime)
        if until is not None:
            metrics.WATCHDOG_PASSES.labels("holding").inc()
            metrics.WATCHDOG_LAST_PASS.set(datetime.now(UTC).timestamp())
            events.emit(
                "watchdog.holding",
                {"until": instant(until), "why": holdoff.why, "outcome": "holding"},
            )
            return PassReport(at=watchdog.now(), holding_until=until)
        try:
            report = watchdog.run_pass()
        except DatabaseError as error:
            raise translate(error) or Unavailable() from error
        metrics.WATCHDOG_PASSES.labels("ok").inc()
        metrics.WATCHDOG_LAST_PASS.set(datetime.now(UTC).timestamp())
        for action in report.actions:
            self._report(watchdog, action)
        for alarm in report.alarms:
            events.emit("watchdog.raised", {**alarm_json(alarm), "outcome": "raised"})
        return report

    @staticmethod
    def _report(watchdog: Watchdog, action: WatchdogAction) -> None:
        metrics.WATCHDOG_ACTIONS.labels(action.kind.value).inc()
        if action.kind is ActionKind.WOULD_RECOVER:
            # A dry run changed nothing: its own event, at INFO (no alert fires on it).
            events.emit(
                "watchdog.would_recover",
                {
                    "job_execution_id": action.job_execution_id,
                    "lease_expired_at": instant(action.lease_expired_at),
                    "actor": watchdog.actor.reference,
                    "outcome": action.kind.value,
                },
            )
        elif action.worker_step_execution_id is not None and action.kind in (
            ActionKind.RECOVERED,
            ActionKind.REPLAYED,
        ):
            events.emit(
                "watchdog.worker_recovered",
                {
                    "job_execution_id": action.job_execution_id,
                    "worker_step_execution_id": action.worker_step_execution_id,
                    "decision_id": action.decision_id,
                    "lease_expired_at": instant(action.lease_expired_at),
                    "actor": watchdog.actor.reference,
                    "detail": action.detail,
                    "outcome": action.kind.value,
                },
            )
        elif action.kind in (ActionKind.RECOVERED, ActionKind.REPLAYED):
            events.emit(
                "watchdog.recovered",
                {
                    "job_execution_id": action.job_execution_id,
                    "decision_id": action.decision_id,
                    "operation_id": action.operation_id,
                    "lease_expired_at": instant(action.lease_expired_at),
                    "actor": watchdog.actor.reference,
                    "outcome": action.kind.value,
                },
            )
        elif not action.repeated:  # left to a human: said once per change
            events.emit(
                "watchdog.skipped",
                {
                    "job_execution_id": action.job_execution_id,
                    "operation_id": action.operation_id,
                    "reason": action.detail,
                    "outcome": action.kind.value,
                },
            )

    @staticmethod
    def _document(report: PassReport, holdoff: Holdoff) -> dict[str, Any]:
        return {
            "at": instant(report.at),
            "holding_until": instant(report.holding_until),
            "holding_because": holdoff.why if report.holding_until else None,
            "recovered": report.count(ActionKind.RECOVERED),
            "replayed": report.count(ActionKind.REPLAYED),
            "refused": report.count(ActionKind.REFUSED),
            "skipped": report.count(ActionKind.SKIPPED),
            "would_recover": report.count(ActionKind.WOULD_RECOVER),
            "actions": [action_json(action) for action in report.actions],
            "alarms": [alarm_json(alarm) for alarm in report.alarms],
        }

    def _say(self, document: dict[str, Any]) -> None:
        if document["holding_until"] is not None:
            why = {
                "started": "it just started",
                "reconnected": "the database was unreachable",
                "database_started": "the database server started less than a lease TTL ago",
            }.get(document["holding_because"] or "", "a hold-off")
            self.stdout.write(
                f"{document['at']} holding until {document['holding_until']}: {why}; live "
                "workers renew their leases meanwhile"
            )
            return
        for action in document["actions"]:
            if not action.get("repeated"):  # said once per change, not every pass
                self.stdout.write(f"{document['at']} {self._line(action)}")
        for alarm in document["alarms"]:
            self.stdout.write(f"{document['at']} {self._alarm_line(alarm)}")
        if not document["actions"] and int(self.verbosity) > 1:
            self.stdout.write(f"{document['at']} no expired lease")

    @staticmethod
    def _alarm_line(alarm: dict[str, Any]) -> str:
        if alarm["kind"] == "execution.overdue":
            return (
                f"execution {alarm['job_execution_id']} of {alarm['job_name']}: past its maximum "
                f"duration, execution.overdue raised (event {alarm['event_id']})"
            )
        return (
            f"job {alarm['job_name']}: no completed run from {alarm['period_start']} to "
            f"{alarm['deadline']}, job.missing raised (event {alarm['event_id']})"
        )

    @staticmethod
    def _line(action: dict[str, Any]) -> str:
        pk, outcome = action["job_execution_id"], action["outcome"]
        expired = action["lease_expired_at"]
        if outcome == "recovered":
            return (
                f"execution {pk}: lease expired at {expired}, marked FAILED (decision "
                f"{action['decision_id']}, operation {action['operation_id']})"
            )
        if outcome == "replayed":
            decision = action["decision_id"]
            return f"execution {pk}: already decided by another watchdog (decision {decision})"
        if outcome == "would_recover":
            return f"execution {pk}: lease expired at {expired}, would be marked FAILED (dry run)"
        if outcome == "refused":
            return (
                f"execution {pk}: refused ({action['detail']}): its evidence moved; the next "
                "pass reads it again"
            )
        if action["detail"] == "unknown_commit":
            return (
                f"execution {pk}: lease expired at {expired}, left to a human: its last commit's "
                f"outcome is unknown (manage.py batch_show {pk}; batch_recover --reason "
                "UNKNOWN_EFFECT)"
            )
        return f"execution {pk}: skipped ({action['detail']})"

    # -- the loop --------------------------------------------------------------------

    def _loop(self, **options: Any) -> None:
        self.verbosity = options["verbosity"]
        stopping = threading.Event()

        def stop(signum: int, frame: FrameType | None) -> None:
            stopping.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
        if options["metrics_port"] is not None:
            from prometheus_client import start_http_server

            start_http_server(options["metrics_port"], addr="127.0.0.1", registry=metrics.REGISTRY)
        watchdog = self._watchdog(options)
        holdoff = Holdoff(ttl=watchdog.lease_ttl, now=watchdog.now)
        holdoff.started()
        if not self.json_output:
            self.stdout.write(
                f"batch_watchdog as {watchdog.actor.reference}: lease TTL "
                f"{batch_settings.LEASE_TTL.total_seconds():g}s, a pass every "
                f"{options['interval']:g}s, at most {options['limit']} per pass"
                + (" (dry run)" if options["dry_run"] else "")
            )
        while not stopping.is_set():
            try:
                report = self._pass(watchdog, holdoff)
            except OUTAGES as error:
                holdoff.unreachable()
                metrics.WATCHDOG_PASSES.labels("unavailable").inc()
                events.emit("watchdog.unavailable", {"error_code": error.code, "outcome": "failed"})
                self._emit({"at": instant(watchdog.now()), "unavailable": error.code})
            except OxideBatchError as error:
                # Not the database's absence: a defect or a rule nobody expected.
                raise CommandError(f"{error.code}: {error.message}", returncode=1) from None
            else:
                self._emit(self._document(report, holdoff))
            stopping.wait(options["interval"])

    def _emit(self, document: dict[str, Any]) -> None:
        if self.json_output:
            self.stdout.write(json.dumps(document))
        elif "unavailable" in document:
            self.stdout.write(
                f"{document['at']} database unavailable ({document['unavailable']}): "
                "retrying; once it answers, nothing is recovered for one lease TTL"
            )
        else:
            self._say(document)
