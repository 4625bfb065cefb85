"""``manage.py batch_show ID``: one execution with its recovery proposal."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.management.commands._cli import OxideCommand
from oxide_batch.management.commands._operator import execution_json, proposal_json, service


class Command(OxideCommand):
    help = "Show one execution and its recovery proposal (evidence, eligibility, digest)."

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("execution_id", type=int)

    def run(self, **options: Any) -> dict[str, Any]:
        operator = service()
        with operator.repository.begin() as uow:
            execution = uow.get_job_execution(options["execution_id"])
        proposal = operator.propose(options["execution_id"])
        return {"execution": execution_json(execution), "proposal": proposal_json(proposal)}

    def render(self, document: dict[str, Any]) -> None:
        execution, proposal = document["execution"], document["proposal"]
        self.stdout.write(
            f"execution {execution['id']} of {execution['job_name']} attempt "
            f"{execution['attempt']}: {execution['status']} (version {execution['version']})"
        )
        verdict = "eligible" if proposal["eligible"] else f"not eligible: {proposal['reason_code']}"
        self.stdout.write(
            f"recovery: {verdict}; inactive {proposal['inactive_seconds']}s "
            f"(threshold {proposal['threshold_seconds']}s)"
        )
        self.stdout.write(f"evidence digest: {proposal['evidence_digest']}")
        self.stdout.write(json.dumps(proposal["evidence"], indent=2))
