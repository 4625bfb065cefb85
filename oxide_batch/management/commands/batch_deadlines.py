"""``manage.py batch_deadlines ACTION``: set, clear, list — a job's run
deadlines (issue 41 points 4-5, docs/notifications.md#run-deadlines).

``set JOB [--max-duration D] [--expect-every D [--by HH:MM [--tz ZONE]]]``:
a run still active longer than ``--max-duration`` raises ``execution.overdue``
once; a job with no COMPLETED run in a period of ``--expect-every`` (by
``--by`` local time in ``--tz``, default UTC) raises ``job.missing`` once per
period. Durations as the other commands write them (``90s``, ``15m``, ``2h``,
``1d``; at least 1s). ``set`` replaces the job's deadlines and restarts its
periods; ``clear JOB`` removes them. Both audited with ``--actor`` (default
``cli:<login>``). The watchdog's pass raises the events (``batch_watchdog``).
Exit codes as every command's: 2 an invalid field, 4 no deadline for the job.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.deadlines import DeadlineRule
from oxide_batch.domain.durations import format_duration
from oxide_batch.domain.evidence import instant_text
from oxide_batch.management.commands._cli import OxideCommand
from oxide_batch.repository.deadlines import rule_details
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.deadlines import Deadlines


def rule_json(rule: DeadlineRule) -> dict[str, Any]:
    return {"job_name": rule.job_name, **rule_details(rule), "set_at": instant_text(rule.set_at)}


def describe(rule: DeadlineRule) -> str:
    parts = []
    if rule.max_duration is not None:
        parts.append(f"at most {format_duration(rule.max_duration)} a run")
    if rule.expect_every is not None:
        every = f"completed every {format_duration(rule.expect_every)}"
        if rule.by is not None:
            every += f" by {rule.by.strftime('%H:%M')} {rule.zone}"
        parts.append(every)
    return ", ".join(parts)


class Command(OxideCommand):
    help = "Set, clear or list a job's run deadlines (overdue runs, missing runs; audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        put = actions.add_parser("set", help="set (replace) a job's deadlines")
        put.add_argument("job", metavar="JOB")
        put.add_argument("--max-duration", metavar="D", help="a run active longer is overdue")
        put.add_argument(
            "--expect-every", metavar="D", help="a completed run expected every period"
        )
        put.add_argument("--by", metavar="HH:MM", help="each period ends at this local time")
        put.add_argument("--tz", metavar="ZONE", help="the zone of --by (default UTC)")
        clear = actions.add_parser("clear", help="remove a job's deadlines")
        clear.add_argument("job", metavar="JOB")
        listing = actions.add_parser("list", help="every job's deadlines")
        for subparser in (put, clear, listing):
            subparser.add_argument("--json", action="store_true", help="print one JSON object")
            if subparser is not listing:
                subparser.add_argument("--actor", help="the audit's actor (default cli:<login>)")
            self.json_usage_errors(subparser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.read_only = options["action"] == "list"
        super().handle(*args, **options)

    def run(self, **options: Any) -> dict[str, Any]:
        self.action = options["action"]
        service = Deadlines()
        if self.action == "list":
            self.shown = service.rules()
            return {"deadlines": [rule_json(rule) for rule in self.shown]}
        actor = self.actor(options)
        by = ChangeBy(actor.reference, actor.user_id)
        if self.action == "clear":
            service.clear(options["job"], by=by)
            return {"job_name": options["job"], "cleared": True}
        rule = service.set(
            options["job"],
            by=by,
            max_duration=options["max_duration"],
            expect_every=options["expect_every"],
            at=options["by"],
            zone=options["tz"],
        )
        self.shown = [rule]
        return rule_json(rule)

    def render(self, document: dict[str, Any]) -> None:
        if self.action == "list":
            if not document["deadlines"]:
                self.stdout.write("no deadlines")
            for rule in self.shown:
                self.stdout.write(f"{rule.job_name:<32} {describe(rule)}")
        elif self.action == "clear":
            self.stdout.write(f"deadlines of {document['job_name']}: cleared")
        else:
            self.stdout.write(f"deadlines of {document['job_name']} set: {describe(self.shown[0])}")
