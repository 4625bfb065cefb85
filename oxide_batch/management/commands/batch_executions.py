"""``manage.py batch_executions``: the attempts of an instance, or the executions
unresolved for longer than an age (active and inactive, or UNKNOWN)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.durations import format_duration
from oxide_batch.domain.status import BatchStatus
from oxide_batch.management.commands._cli import CommandFailed, ExitCode, OxideCommand, age_arg
from oxide_batch.management.commands._operator import execution_json, parse_instant
from oxide_batch.selectors.executions import instance_execution_views
from oxide_batch.selectors.unresolved import unresolved_executions
from oxide_batch.services import bootstrap

# Inactivity means something only while an execution may still be running.
UNRESOLVED = frozenset(
    status.value for status in (BatchStatus.STARTING, BatchStatus.STARTED, BatchStatus.STOPPING)
) | {BatchStatus.UNKNOWN.value}
COLUMNS = (
    f"{'ID':>10}  {'JOB':<32}  {'ATTEMPT':>7}  {'STATUS':<9}  {'VERSION':>7}  "
    f"{'INACTIVE':<14}  {'LEASE':<16}  CREATED (UTC)"
)


class Command(OxideCommand):
    help = "List the attempts of an instance, or the unresolved executions."
    read_only = True

    def add_command_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--instance", type=int, help="a job instance id")
        which.add_argument(
            "--unresolved-for",
            type=age_arg,
            metavar="AGE",
            help="e.g. 90s, 15m, 1h, or seconds (900) — as the API's unresolved_for",
        )
        parser.add_argument("--limit", type=int, default=50, help="1–500 (unresolved only)")

    def run(self, **options: Any) -> dict[str, Any]:
        repository = bootstrap.repository()
        self.now = repository.clock.now()
        if options["instance"] is not None:
            with repository.begin() as uow:
                uow.get_job_instance(options["instance"])  # validates the id, or not found
            views = instance_execution_views(options["instance"])
            return {"executions": [execution_json(view) for view in views]}
        if not 1 <= options["limit"] <= 500:
            raise CommandFailed(ExitCode.USAGE, "invalid_request", "--limit must be 1–500")
        views = unresolved_executions(
            now=self.now,
            inactive_for=options["unresolved_for"],
            limit=options["limit"],
        )
        return {"executions": [execution_json(view) for view in views]}

    def render(self, document: dict[str, Any]) -> None:
        rows = document["executions"]
        if not rows:
            self.stdout.write("no executions")
            return
        self.stdout.write(COLUMNS)
        for row in rows:
            self.stdout.write(
                f"{row['id']:>10}  {row['job_name'][:32]:<32}  {row['attempt']:>7}  "
                f"{row['status']:<9}  {row['version']:>7}  {self._inactive(row):<14}  "
                f"{self._lease(row):<16}  {row['created_at']}"
            )

    def _inactive(self, row: dict[str, Any]) -> str:
        """How long an unresolved execution has been inactive (``5 h 03 min``);
        ``-`` for a finished one."""
        if row["status"] not in UNRESOLVED:
            return "-"
        return format_duration(self.now - parse_instant(row["last_activity_at"]))

    def _lease(self, row: dict[str, Any]) -> str:
        """The owner's lease of an active claimed execution: ``held 43 s`` (left)
        or ``expired 5 min`` (ago); ``-`` without one (JSON: ``lease_expires_at``)."""
        if row["lease_expires_at"] is None:
            return "-"
        left = parse_instant(row["lease_expires_at"]) - self.now
        if left.total_seconds() > 0:
            return f"held {format_duration(left)}"
        return f"expired {format_duration(-left)}"
