"""``manage.py batch_notify [--interval SECONDS] [--once] [--json]``: deliver
the outbox's events to the rules that want them, until stopped (SIGTERM,
SIGINT) — a third process beside the service and the watchdog
(docs/deployment.md, docs/notifications.md).

Several may run at once: a delivery is claimed by one of them at a time
(``SKIP LOCKED``), and one killed mid-attempt leaves its claim to expire (two
timeouts and 2 s): the delivery is attempted again, with the same
``webhook-id``. Output: a line per pass that did something (``--json``: one
JSON object per pass; with ``--once`` exactly one). Exit codes as every
command's: 0 stopped (or one pass done), 2 usage, 7 the database unavailable
(``--once`` only: the loop waits for it).
"""

from __future__ import annotations

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

DEFAULT_INTERVAL = 2.0


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
    def _pass(notifier: Notifier) -> PassReport:
        release_idle_connections()
        try:
            return notifier.run_pass()
        except DatabaseError as error:
            raise translate(error) or Unavailable() from error

    def _loop(self, interval: float) -> None:
        stopping = threading.Event()

        def stop(signum: int, frame: FrameType | None) -> None:
            stopping.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, stop)
        notifier = Notifier()
        while not stopping.is_set():
            try:
                report = self._pass(notifier)
            except (Unavailable, CommitOutcomeUnknown) as error:
                self._emit({"unavailable": error.code})
                stopping.wait(interval)
                continue
            document = report.as_dict()
            busy = report.events or report.attempted
            if busy:
                self._emit(document)
            # A busy pass is followed at once: a backlog drains without waiting.
            if not busy:
                stopping.wait(interval)

    def _emit(self, document: dict[str, Any]) -> None:
        if self.json_output:
            self.stdout.write(json.dumps(document))
        elif "unavailable" in document:
            self.stderr.write(f"the database is unavailable ({document['unavailable']}); waiting")
        else:
            self.stdout.write(self._line(document))
        self.stdout.flush()
