"""``manage.py batch_executions``: the attempts of an instance, or the executions
unresolved for longer than an age (active and inactive, or UNKNOWN)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.management.commands._cli import CommandFailed, ExitCode, OxideCommand, duration_arg
from oxide_batch.management.commands._operator import execution_json
from oxide_batch.repository import DjangoJobRepository
from oxide_batch.selectors import unresolved_executions


class Command(OxideCommand):
    help = "List the attempts of an instance, or the unresolved executions."

    def add_command_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group(required=True)
        which.add_argument("--instance", type=int, help="a job instance id")
        which.add_argument(
            "--unresolved-for", type=duration_arg, metavar="AGE", help="e.g. 15m, 2h"
        )
        parser.add_argument("--limit", type=int, default=50, help="1–500 (unresolved only)")

    def run(self, **options: Any) -> dict[str, Any]:
        repository = DjangoJobRepository()
        if options["instance"] is not None:
            with repository.begin() as uow:
                uow.get_job_instance(options["instance"])
                executions = [execution_json(e) for e in uow.job_executions(options["instance"])]
            return {"executions": executions}
        if not 1 <= options["limit"] <= 500:
            raise CommandFailed(ExitCode.USAGE, "invalid_request", "--limit must be 1–500")
        views = unresolved_executions(
            now=repository.clock.now(),
            inactive_for=options["unresolved_for"],
            limit=options["limit"],
        )
        return {"executions": [execution_json(view) for view in views]}

    def render(self, document: dict[str, Any]) -> None:
        rows = document["executions"]
        if not rows:
            self.stdout.write("no executions")
        for row in rows:
            self.stdout.write(
                f"{row['id']:>10}  {row['job_name'][:32]:<32}  attempt {row['attempt']:<3} "
                f"{row['status']:<9}  v{row['version']:<4} created {row['created_at']}"
            )
