"""``manage.py prune_batch_audit``: delete audit rows older than an age.

Audit rows (recovery decisions, operator requests, retention records) outlive
the purge of what they describe; this is the only way they are ever deleted.
It is its own, explicit operation: no schedule runs it by default.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.retention import MAX_BATCH_BOUND
from oxide_batch.management.commands._cli import (
    OxideCommand,
    add_mutation_arguments,
    duration_arg,
    release_idle_connections,
)
from oxide_batch.services import bootstrap
from oxide_batch.services.retention import AuditPruneResult


class Command(OxideCommand):
    help = (
        "Delete recovery decisions, operator requests and retention records older "
        "than an age (at least 1d), oldest first, in batches."
    )

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than", type=duration_arg, required=True, metavar="AGE", help="e.g. 365d"
        )
        parser.add_argument(
            "--batch-size", type=int, default=MAX_BATCH_BOUND, help="rows per table per batch"
        )
        add_mutation_arguments(parser, operation_id=False, dry_run=True)

    def run(self, **options: Any) -> dict[str, Any]:
        service = bootstrap.retention_service()
        if not options["dry_run"]:
            self.confirm(options, f"delete audit rows older than {options['older_than']}", None)
        result: AuditPruneResult = service.prune_audit(
            older_than=options["older_than"],
            batch_size=options["batch_size"],
            dry_run=options["dry_run"],
            between_batches=lambda _: release_idle_connections(),
        )
        return result.to_json()

    def render(self, document: dict[str, Any]) -> None:
        verb = "would delete" if document["dry_run"] else "deleted"
        self.stdout.write(f"audit rows older than {document['cutoff']}: {verb}")
        for table, count in document["counts"].items():
            self.stdout.write(f"  {table:<18}  {count:>10}")
