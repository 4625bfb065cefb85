"""``manage.py batch_abandon ID --expected-version V --reason CODE``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.management.commands._cli import OxideCommand, add_mutation_arguments
from oxide_batch.management.commands._operator import add_execution_target, result_json, service


class Command(OxideCommand):
    help = "Abandon a STOPPED or FAILED attempt: its instance never runs again (audited)."

    def add_command_arguments(self, parser: CommandParser) -> None:
        add_execution_target(parser, reason=True)
        add_mutation_arguments(parser)

    def run(self, **options: Any) -> dict[str, Any]:
        operation_id = self.operation_id(options, prefix="abandon")
        self.confirm(options, f"abandon execution {options['execution_id']} for good", operation_id)
        result = service().abandon(
            options["execution_id"],
            expected_version=options["expected_version"],
            reason_code=options["reason"],
            actor=self.actor(options),
            operation_id=operation_id,
        )
        return result_json(result)
