"""``manage.py batch_recover ID --expected-version V --disposition MARK_FAILED|ABANDON
--reason CODE --evidence-digest HEX``: resolve an orphaned or ambiguous execution
with the evidence digest of the proposal ``batch_show`` printed."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.domain.status import FailureCategory
from oxide_batch.management.commands._cli import OxideCommand, add_mutation_arguments
from oxide_batch.management.commands._operator import add_execution_target, result_json, service


class Command(OxideCommand):
    help = "Recover an execution as FAILED (restartable) or ABANDONED, with its evidence."
    settings_named = {"execution_not_stale": "OXIDE_BATCH_RECOVERY_STALE_AFTER"}

    def add_command_arguments(self, parser: CommandParser) -> None:
        add_execution_target(parser, reason=True)
        parser.add_argument(
            "--disposition", choices=[d.value for d in RecoveryDisposition], required=True
        )
        parser.add_argument(
            "--evidence-digest", required=True, help="from batch_show (64 hex characters)"
        )
        parser.add_argument("--failure-category", choices=[c.value for c in FailureCategory])
        parser.add_argument("--failure-id", type=int)
        add_mutation_arguments(parser)

    def run(self, **options: Any) -> dict[str, Any]:
        operation_id = self.operation_id(options, prefix="recover")
        disposition = RecoveryDisposition(options["disposition"])
        self.confirm(
            options,
            f"recover execution {options['execution_id']} as {disposition.resulting_status}",
            operation_id,
        )
        category = options["failure_category"]
        result = service().recover(
            options["execution_id"],
            expected_version=options["expected_version"],
            disposition=disposition,
            reason_code=options["reason"],
            evidence_digest=options["evidence_digest"],
            actor=self.actor(options),
            operation_id=operation_id,
            failure_category=FailureCategory(category) if category else None,
            failure_id=options["failure_id"],
        )
        return result_json(result)
