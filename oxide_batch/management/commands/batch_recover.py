"""``manage.py batch_recover ID --expected-version V --disposition MARK_FAILED|ABANDON
--reason CODE --evidence-digest HEX [--force --note TEXT]``: resolve an orphaned or
ambiguous execution with the evidence digest of the proposal ``batch_show`` printed.

``--force`` is the operator's override (contract §2.5.5): it recovers an active
execution before its owner's lease expired or before it is stale, and needs
``--note`` — why the worker is known to be gone — which the decision records.
It skips only that one rule: the version, the status, the evidence digest and
the unknown-commit rule are checked as without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.durations import format_duration
from oxide_batch.domain.errors import ExecutionNotStale, RecoveryRequestInvalid
from oxide_batch.domain.recovery import RecoveryDisposition, validate_override_note
from oxide_batch.domain.status import FailureCategory
from oxide_batch.management.commands._cli import (
    CommandFailed,
    ExitCode,
    OxideCommand,
    add_mutation_arguments,
)
from oxide_batch.management.commands._operator import add_execution_target, result_json, service

STALE_AFTER = "OXIDE_BATCH_RECOVERY_STALE_AFTER"
LEASE_TTL = "OXIDE_BATCH_LEASE_TTL"


class Command(OxideCommand):
    help = "Recover an execution as FAILED (restartable) or ABANDONED, with its evidence."
    settings_named = {ExecutionNotStale.code: STALE_AFTER}

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
        parser.add_argument(
            "--force",
            action="store_true",
            help="override: recover an active execution before its lease expired or it "
            "is stale (you know its worker is gone); needs --note",
        )
        parser.add_argument(
            "--note",
            metavar="TEXT",
            help="with --force: why the worker is known to be gone (recorded on the decision)",
        )
        add_mutation_arguments(parser)

    def run(self, **options: Any) -> dict[str, Any]:
        # Before anything else: a flawed override asks nothing and records nothing.
        note = self._override_note(options)
        operation_id = self.operation_id(options, prefix="recover")
        disposition = RecoveryDisposition(options["disposition"])
        summary = f"recover execution {options['execution_id']} as {disposition.resulting_status}"
        if note is not None:
            summary += f" (OVERRIDE, even if its worker may be alive; note: {note})"
        self.confirm(options, summary, operation_id)
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
            override_note=note,
        )
        return result_json(result)

    @staticmethod
    def _override_note(options: dict[str, Any]) -> str | None:
        """The override's note: ``--force`` and ``--note`` come together (exit 2
        otherwise), and the note is a valid one (an error naming ``--note``)."""
        forced, note = bool(options.get("force")), options.get("note")
        if forced and note is None:
            raise CommandFailed(
                ExitCode.USAGE,
                "override_note_required",
                "--force needs --note TEXT: why the worker is known to be gone "
                "(recorded on the recovery decision)",
            )
        if note is not None and not forced:
            raise CommandFailed(
                ExitCode.USAGE,
                "override_note_without_force",
                "--note is the override's note: give it with --force, or leave it out",
            )
        if note is None:
            return None
        try:
            return validate_override_note(note)
        except RecoveryRequestInvalid as error:
            # The same refusal, naming the flag rather than the API's field.
            raise dataclasses.replace(error, field="--note") from None

    def error_settings(self, error: BaseException) -> Mapping[str, str]:
        """An owned execution waits for its lease (the TTL decided), any other
        for the stale threshold."""
        if isinstance(error, ExecutionNotStale) and error.lease_expires_at is not None:
            return {ExecutionNotStale.code: LEASE_TTL}
        return self.settings_named

    def error_hint(self, error: BaseException) -> str | None:
        if not isinstance(error, ExecutionNotStale):
            return None
        if error.lease_expires_at is not None:
            wait = (
                f"its owner's lease is held until {error.lease_expires_at}, and the watchdog "
                "(manage.py batch_watchdog) fails it once the lease expires"
            )
        else:
            threshold = format_duration(timedelta(seconds=error.threshold_seconds))
            wait = (
                "no owner is recorded, so it may be recovered once inactive for more than "
                f"{threshold}"
            )
        return (
            f"the execution may still be running: {wait}. If you know its worker is gone, "
            "recover it now with --force --note TEXT saying how you know (the decision "
            "records the note)"
        )

    def render(self, document: dict[str, Any]) -> None:
        execution, decision = document["execution"], document.get("decision")
        head = (
            "replayed (recorded before, nothing done again)"
            if document["outcome"] == "REPLAYED"
            else "recovered"
        )
        if execution is None or decision is None:
            # A replay after the execution was purged: the audit row is all there is.
            record = document["record"]
            self.stdout.write(
                f"{head}: operation {document['operation_id']}, {record['prior_status']} -> "
                f"{record['result_status']} (the execution has been purged since)"
            )
            return
        self.stdout.write(
            f"{head}: execution {execution['id']} ({execution['job_name']} attempt "
            f"{execution['attempt']}) {decision['prior_status']} -> "
            f"{decision['resulting_status']}, version {execution['version']}"
        )
        why = decision["eligibility"] or "not recorded"
        if decision["override"]:
            why = f"{why} (before the rules allowed it); note: {decision['override_note']}"
        elif decision["override_note"] is not None:
            # --force on an execution the rules allowed anyway: the note is kept.
            why = f"{why} (no override needed); note: {decision['override_note']}"
        self.stdout.write(f"eligibility: {why}")
        steps = ", ".join(str(pk) for pk in decision["resolved_step_ids"]) or "none"
        self.stdout.write(
            f"decision {decision['id']} by {decision['actor']} (operation "
            f"{decision['operation_id']}), reason {decision['reason_code']}, evidence "
            f"{decision['evidence_digest_prefix']}…; steps resolved to FAILED: {steps}"
        )
