"""``manage.py batch_show ID``: one execution with its recovery proposal."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.durations import format_duration
from oxide_batch.management.commands._cli import OxideCommand
from oxide_batch.management.commands._operator import execution_json, proposal_json, service
from oxide_batch.selectors import execution_view


class Command(OxideCommand):
    help = "Show one execution and its recovery proposal (evidence, eligibility, digest)."
    read_only = True

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("execution_id", type=int)

    def run(self, **options: Any) -> dict[str, Any]:
        # The proposal first: it validates the id (and answers not found).
        proposal = service().propose(options["execution_id"])
        view = execution_view(options["execution_id"])
        return {"execution": execution_json(view), "proposal": proposal_json(proposal)}

    def render(self, document: dict[str, Any]) -> None:
        execution, proposal = document["execution"], document["proposal"]
        self.stdout.write(
            f"execution {execution['id']} of {execution['job_name']} attempt "
            f"{execution['attempt']}: {execution['status']} (version {execution['version']})"
        )
        verdict = "eligible" if proposal["eligible"] else f"not eligible: {proposal['reason_code']}"
        inactive = format_duration(timedelta(seconds=proposal["inactive_seconds"]))
        threshold = format_duration(timedelta(seconds=proposal["threshold_seconds"]))
        self.stdout.write(
            f"recovery: {verdict}; inactive {inactive} (threshold {threshold}), "
            f"last activity {proposal['last_activity_at']}"
        )
        self.stdout.write(f"evidence digest: {proposal['evidence_digest']}")
        self.stdout.write(json.dumps(proposal["evidence"], indent=2))
