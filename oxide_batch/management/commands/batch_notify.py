"""``manage.py batch_notify [--interval SECONDS] [--once] [--json]``: deliver
the outbox's events to the rules that want them, until stopped (SIGTERM,
SIGINT) — a third process beside the service and the watchdog
(docs/deployment.md, docs/notifications.md).

Several may run at once: a delivery is claimed by one of them at a time
(``SKIP LOCKED``), and one killed mid-attempt leaves its claim to expire (two
timeouts and 2 s): the delivery is attempted again, with the same
``webhook-id``. On PostgreSQL an idle loop wakes at once when an outbox event
commits (it LISTENs on a session connection of its own,
``services/notify_wakeup.py``); ``--interval`` is then the safety net, and
on SQLite the polling period. Output: a line per pass that did something (``--json``: one
JSON object per pass; with ``--once`` exactly one). Exit codes as every
command's: 0 stopped (or one pass done), 2 usage, 7 the database unavailable
(``--once`` only: the loop waits for it).
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import CommandParser
from django.db import DatabaseError

from oxide_batch.domain.errors import CommitOutcomeUnknown, Unavailable
from oxide_batch.management.commands._cli import OxideCommand, release_idle_connections
from oxide_batch.management.commands.batch_watchdog import seconds_arg
from oxide_batch.repository.faults import translate
from oxide_batch.services.notifier import Notifier, PassReport
from oxide_batch.services.notify_send import execution_url
from oxide_batch.services.notify_wakeup import Wakeups

DEFAULT_INTERVAL = 2.0
#: How long an idle loop with attempts in flight waits before another pass.
IN_FLIGHT_POLL = 0.2


class Command(OxideCommand):
    help = "Deliver notification events to the rules' destinations, until stopped."

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval",
            type=seconds_arg,
            default=DEFAULT_INTERVAL,
            metavar="SECONDS",
            help=f"seconds between passes when idle (default {DEFAULT_INTERVAL:g})",
        )
        parser.add_argument("--once", action="store_true", help="one pass, then exit (cron)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["once"]:
            super().handle(*args, **options)
            return
        self.json_output = bool(options["json"])
        self._loop(options["interval"])

    def run(self, **options: Any) -> dict[str, Any]:
        return self._pass(Notifier()).as_dict()

    def render(self, document: dict[str, Any]) -> None:
        self.stdout.write(self._line(document))

    @staticmethod
    def _line(document: dict[str, Any]) -> str:
        return (
            f"events {document['events']} (deliveries made {document['deliveries_made']}), "
            f"attempted {document['attempted']}: delivered {document['delivered']}, "
            f"retrying {document['retried']}, dead {document['dead']}"
        )

    @staticmethod
    def _pass(notifier: Notifier, *, wait_for_attempts: bool = True) -> PassReport:
        release_idle_connections()
        try:
            return notifier.run_pass(wait_for_attempts=wait_for_attempts)
        except DatabaseError as error:
            raise translate(error) or Unavailable() from error

    def _loop(self, interval: float) -> None:
        stopping = threading.Event()
        wakeups = Wakeups(retry=interval)

        def stop(signum: int, frame: FrameType | None) -> None:
            stopping.set()
            wakeups.wake()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
        # The case-file link's first reverse() imports the URLconf (about half a
        # second): paid now, not by the first event the notifier is woken for.
        execution_url(1)
        wakeups.start()
        try:
            self._passes(Notifier(), interval, stopping, wakeups)
        finally:
            wakeups.stop()

    def _passes(
        self, notifier: Notifier, interval: float, stopping: threading.Event, wakeups: Wakeups
    ) -> None:
        while not stopping.is_set():
            try:
                # The pass does not wait for its attempts: a slow receiver's
                # hold only its own workers (services/notifier.py).
                report = self._pass(notifier, wait_for_attempts=False)
            except (Unavailable, CommitOutcomeUnknown) as error:
                self._emit({"unavailable": error.code})
                stopping.wait(interval)
                continue
            document = report.as_dict()
            busy = report.events or report.attempted or report.delivered or report.retried
            if busy or report.dead or report.lost_claims:
                self._emit(document)
            if busy:
                continue  # a backlog drains without waiting
            # Idle: until an attempt ends (a worker to settle and refill), an
            # event commits (PostgreSQL), a stop, or the interval.
            if not notifier.wait(min(interval, IN_FLIGHT_POLL)) and not notifier.in_flight:
                wakeups.wait(interval)
        # Stopped: the attempts in flight end (each bounded by its timeout) and are
        # settled; with the database gone, their claims expire and another retries.
        with contextlib.suppress(Unavailable, CommitOutcomeUnknown):
            self._emit_if_busy(self._settle_on_stop(notifier))

    @staticmethod
    def _settle_on_stop(notifier: Notifier) -> PassReport:
        try:
            return notifier.close()
        except DatabaseError as error:
            raise translate(error) or Unavailable() from error

    def _emit_if_busy(self, report: PassReport) -> None:
        if report.delivered or report.retried or report.dead:
            self._emit(report.as_dict())

    def _emit(self, document: dict[str, Any]) -> None:
        if self.json_output:
            self.stdout.write(json.dumps(document))
        elif "unavailable" in document:
            self.stderr.write(f"the database is unavailable ({document['unavailable']}); waiting")
        else:
            self.stdout.write(self._line(document))
        self.stdout.flush()
