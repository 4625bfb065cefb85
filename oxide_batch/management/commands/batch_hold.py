"""``manage.py batch_hold INSTANCE --reason CODE [--release]``: place (or release)
the retention hold of an instance — a held instance is never purged."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.management.commands._cli import OxideCommand, add_mutation_arguments
from oxide_batch.services import bootstrap


class Command(OxideCommand):
    help = "Place or replace the retention hold of an instance (audited); --release lifts it."

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("instance_id", type=int)
        parser.add_argument("--reason", required=True, help="reason code, e.g. LEGAL_HOLD")
        parser.add_argument("--release", action="store_true", help="release the hold instead")
        add_mutation_arguments(parser)

    def run(self, **options: Any) -> dict[str, Any]:
        release = options["release"]
        operation_id = self.operation_id(options, prefix="release" if release else "hold")
        retention = bootstrap.retention_service()
        act = retention.release_hold if release else retention.place_hold
        result = act(
            options["instance_id"],
            actor=self.actor(options),
            reason_code=options["reason"],
            operation_id=operation_id,
        )
        return result.to_json()
