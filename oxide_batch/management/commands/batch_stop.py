"""``manage.py batch_stop ID --expected-version V``: a durable stop request."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.management.commands._cli import OxideCommand, add_mutation_arguments
from oxide_batch.management.commands._operator import add_execution_target, result_json, service


class Command(OxideCommand):
    help = "Request a cooperative stop of a STARTING or STARTED execution (audited)."

    def add_command_arguments(self, parser: CommandParser) -> None:
        add_execution_target(parser)
        add_mutation_arguments(parser)

    def run(self, **options: Any) -> dict[str, Any]:
        operation_id = self.operation_id(options, prefix="stop")
        result = service().stop(
            options["execution_id"],
            expected_version=options["expected_version"],
            actor=self.actor(options),
            operation_id=operation_id,
        )
        return result_json(result)
