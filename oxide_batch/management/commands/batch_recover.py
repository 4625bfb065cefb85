"""``manage.py batch_recover ID --expected-version V --disposition MARK_FAILED|ABANDON
--reason CODE --evidence-digest HEX [--force --note TEXT]``: resolve an orphaned or
ambiguous execution with the evidence digest of the proposal ``batch_show`` printed.

``--force`` is the operator's override (contract §2.5.5): it recovers an active
execution before its owner's lease expired or before it is stale, and needs
``--note`` — why the worker is known to be gone — which the decision records.
It skips only that one rule: the version, the status, the evidence digest and
the unknown-commit rule are checked as without it.

``manage.py batch_recover ID --resolve-lost-write --note TEXT [--reason CODE]``
records an operator's decision on the execution's lost-write marker instead
(contract §2.5.14), whatever its status: until then a launch or restart of its
instance is refused (``lost_write_unresolved``). The reason defaults to
``LOST_WRITE_RESOLVED``; no version or evidence digest is compared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser

from oxide_batch.domain.durations import format_duration
from oxide_batch.domain.errors import ExecutionNotStale, RecoveryRequestInvalid
from oxide_batch.domain.lost_write import validate_note
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
#: ``--resolve-lost-write``'s reason code unless ``--reason`` names another.
RESOLVED_REASON = "LOST_WRITE_RESOLVED"
LEASE_TTL = "OXIDE_BATCH_LEASE_TTL"


class Command(OxideCommand):
    help = "Recover an execution as FAILED (restartable) or ABANDONED, with its evidence."
    settings_named = {ExecutionNotStale.code: STALE_AFTER}

    def add_command_arguments(self, parser: CommandParser) -> None:
        # Required for a recovery; --resolve-lost-write needs none of them (checked in run).
        add_execution_target(parser, reason=True, required=False)
        parser.add_argument("--disposition", choices=[d.value for d in RecoveryDisposition])
        parser.add_argument("--evidence-digest", help="from batch_show (64 hex characters)")
        parser.add_argument(
            "--resolve-lost-write",
            action="store_true",
            help="record your decision on the execution's lost-write marker (with --note: "
            "what you checked); a launch or restart of its instance is refused until then",
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
            help="with --force: why the worker is known to be gone (recorded on the decision); "
            "with --resolve-lost-write: what you checked (recorded on the execution)",
        )
        add_mutation_arguments(parser)

    def run(self, **options: Any) -> dict[str, Any]:
        if options["resolve_lost_write"]:
            return self._resolve_lost_write(options)
        missing = [
            flag
            for flag, key in (
                ("--expected-version", "expected_version"),
                ("--disposition", "disposition"),
                ("--reason", "reason"),
                ("--evidence-digest", "evidence_digest"),
            )
            if options.get(key) is None
        ]
        if missing:
            raise CommandFailed(
                ExitCode.USAGE,
                "arguments_required",
                f"a recovery needs {', '.join(missing)} (batch_show ID prints the command line)",
            )
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

    def _resolve_lost_write(self, options: dict[str, Any]) -> dict[str, Any]:
        """``--resolve-lost-write --note TEXT``: the recovery's own flags are refused."""
        given = [
            flag
            for flag, key in (
                ("--expected-version", "expected_version"),
                ("--disposition", "disposition"),
                ("--evidence-digest", "evidence_digest"),
                ("--failure-category", "failure_category"),
                ("--failure-id", "failure_id"),
                ("--force", "force"),
            )
            if options.get(key) not in (None, False)
        ]
        if given:
            raise CommandFailed(
                ExitCode.USAGE,
                "arguments_not_allowed",
                "--resolve-lost-write compares no version or evidence: leave out "
                + ", ".join(given),
            )
        if options.get("note") is None:
            raise CommandFailed(
                ExitCode.USAGE,
                "note_required",
                "--resolve-lost-write needs --note TEXT: what you checked (the target system, "
                "what was redone), recorded on the execution",
            )
        try:
            note = validate_note(options["note"])
        except RecoveryRequestInvalid as error:
            raise dataclasses.replace(error, field="--note") from None
        operation_id = self.operation_id(options, prefix="lost-write")
        pk = options["execution_id"]
        self.confirm(
            options, f"resolve the lost write of execution {pk} (note: {note})", operation_id
        )
        result = service().resolve_lost_write(
            pk,
            reason_code=options.get("reason") or RESOLVED_REASON,
            note=note,
            actor=self.actor(options),
            operation_id=operation_id,
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
        if document["record"]["action"] == "RESOLVE_LOST_WRITE":
            self._render_resolution(document)
            return
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

    def _render_resolution(self, document: dict[str, Any]) -> None:
        pk, record = document["execution"], document["record"]
        head = "replayed (recorded before, nothing done again)" if (
            document["outcome"] == "REPLAYED") else "recorded"  # fmt: skip
        what = (
            "lost write resolved: a launch or restart of its instance may go ahead"
            if document["changed"]
            else "no unresolved lost write: nothing to resolve"
        )
        target = "the execution" if pk is None else f"execution {pk['id']}"
        operation = document["operation_id"]
        self.stdout.write(
            f"{head}: {target}: {what} (operation {operation}, audit #{record['id']})"
        )
