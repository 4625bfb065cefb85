"""``manage.py purge_batch_metadata``: the retention purge, batch after batch.

Each batch is a survey and an apply in its own transaction, audited under
operation id ``<operation id>:<batch number>``. Interrupting (Ctrl-C) between
or during batches leaves a consistent database: committed batches stay, the
batch in flight rolls back; rerunning with the same ``--operation-id`` resumes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandParser
from tqdm import tqdm

from oxide_batch.domain.retention import (
    DEFAULT_PURGE_REASON,
    MAX_BATCH_BOUND,
    PURGE_KINDS,
    PurgeCriteria,
    format_instant,
    purge_statuses,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.management.commands._cli import (
    CommandFailed,
    ExitCode,
    OxideCommand,
    add_mutation_arguments,
    duration_arg,
    instant_arg,
    release_idle_connections,
)
from oxide_batch.services.audit import Outcome, validate_reason_code
from oxide_batch.services.retention import MAX_RESURVEYS, PurgeRun, RetentionService

# Room for ":<batch number>" and a re-survey's ".r<attempt>" in the 64-byte
# operation id of each batch.
BATCH_SUFFIX_BYTES = 16


class Command(OxideCommand):
    help = (
        "Delete finished job instances (and everything they own) whose latest "
        "execution ended before a cutoff, in audited batches. Held instances, "
        "definitions and audit rows are never purged."
    )

    def add_command_arguments(self, parser: CommandParser) -> None:
        age = parser.add_mutually_exclusive_group(required=True)
        age.add_argument("--older-than", type=duration_arg, metavar="AGE", help="e.g. 90d")
        age.add_argument("--ended-before", type=instant_arg, metavar="DATE", help="e.g. 2026-01-31")
        parser.add_argument("--job-name", help="only instances of this job")
        parser.add_argument(
            "--status",
            action="append",
            dest="statuses",
            choices=[status.value for status in BatchStatus],
            metavar="STATUS",
            help="repeatable; default STOPPED, FAILED, COMPLETED, ABANDONED",
        )
        parser.add_argument(
            "--batch-size", type=int, default=MAX_BATCH_BOUND, help="instances per batch"
        )
        parser.add_argument("--reason", default=DEFAULT_PURGE_REASON, help="audited reason code")
        add_mutation_arguments(parser, dry_run=True)

    def run(self, **options: Any) -> dict[str, Any]:
        # Everything is validated before the database is touched.
        validate_reason_code(options["reason"])
        actor = self.actor(options)
        provisional = self._criteria(options, datetime.now(UTC))
        service = RetentionService()
        if options["dry_run"]:
            criteria = self._criteria(options, service.now())
            plan = service.survey(
                cutoff=criteria.cutoff,
                job_name=criteria.job_name,
                statuses=criteria.statuses,
                limit=criteria.bound,
            )
            return {"outcome": "DRY_RUN", "dry_run": True, "plan": plan.to_json()}
        operation_id = self.operation_id(options, prefix="purge", reserve=BATCH_SUFFIX_BYTES)
        self.confirm(options, self._summary(options, provisional), operation_id)
        criteria = self._criteria(options, service.now())
        run = PurgeRun(
            service,
            criteria,
            actor,
            operation_id,
            options["reason"],
            between_batches=release_idle_connections,
            requested=self._requested(options, criteria),
        )
        self.report = self._report(run, operation_id)
        progress = tqdm(
            unit=" instances",
            desc="purged",
            disable=self.json_output or not self.stdout.isatty(),
            leave=False,
        )
        try:
            for batch in run:
                progress.update(batch.result.record.counts.job_instances)
                self.report = self._report(run, operation_id)
        except KeyboardInterrupt:
            raise CommandFailed(
                ExitCode.ERROR,
                "interrupted",
                f"interrupted after {len(run.batches)} committed batch(es); the database "
                f"is consistent; rerun with --operation-id {operation_id} to continue",
            ) from None
        finally:
            progress.close()
            self.report = self._report(run, operation_id)
        return self.report

    @staticmethod
    def _criteria(options: dict[str, Any], now: datetime) -> PurgeCriteria:
        if not 1 <= options["batch_size"] <= MAX_BATCH_BOUND:
            # PurgeCriteria says the same; checked first for a clear message.
            PurgeCriteria(now, bound=options["batch_size"])
        cutoff = options["ended_before"] or now - options["older_than"]
        return PurgeCriteria(
            cutoff, options["job_name"], purge_statuses(options["statuses"]), options["batch_size"]
        )

    @staticmethod
    def _requested(options: dict[str, Any], criteria: PurgeCriteria) -> dict[str, Any]:
        """The run's criteria as given, for its request digest: a rerun with
        ``--older-than`` resumes under a cutoff that moved with the clock, while
        another age, cutoff, job, status set or batch size is a conflict."""
        requested = criteria.to_json()
        if options["older_than"] is not None:
            del requested["cutoff"]
            requested["older_than_seconds"] = int(options["older_than"].total_seconds())
        return requested

    @staticmethod
    def _summary(options: dict[str, Any], criteria: PurgeCriteria) -> str:
        age = (
            f"older than {options['older_than']}"
            if options["older_than"] is not None
            else f"ended before {format_instant(criteria.cutoff)}"
        )
        job = f"of job {criteria.job_name}" if criteria.job_name else "of every job"
        return (
            f"purge finished instances {job} {age} "
            f"({', '.join(criteria.ordered_statuses)}), {criteria.bound} per batch"
        )

    @staticmethod
    def _report(run: PurgeRun, operation_id: str) -> dict[str, Any]:
        applied = any(b.result.outcome is Outcome.APPLIED for b in run.batches)
        outcome = Outcome.REPLAYED if run.batches and not applied else Outcome.APPLIED
        return {
            "outcome": outcome.value,
            "dry_run": False,
            "operation_id": operation_id,
            "criteria": {
                "cutoff": format_instant(run.criteria.cutoff),
                "job_name": run.criteria.job_name,
                "statuses": run.criteria.ordered_statuses,
                "batch_size": run.criteria.bound,
            },
            "counts": run.counts.as_dict(),
            "held_excluded": run.held_excluded,
            "resurveys": run.resurveys,
            "max_resurveys": MAX_RESURVEYS,
            "batches": [batch.to_json() for batch in run.batches],
        }

    def render(self, document: dict[str, Any]) -> None:
        if document["dry_run"]:
            plan = document["plan"]
            self.stdout.write(
                f"dry run, nothing deleted: the next batch (cutoff {plan['cutoff']}, "
                f"up to {plan['bound']} instances) would purge"
            )
            counts, held = plan["counts"], plan["held_excluded"]
        else:
            batches = document["batches"]
            replayed = sum(1 for b in batches if b["outcome"] == Outcome.REPLAYED.value)
            self.stdout.write(
                f"purged in {len(batches)} batch(es) ({replayed} replayed), operation id "
                f"{document['operation_id']}, cutoff {document['criteria']['cutoff']}"
            )
            counts, held = document["counts"], document["held_excluded"]
        width = max(len(kind) for kind in PURGE_KINDS)
        for kind in PURGE_KINDS:
            self.stdout.write(f"  {kind:<{width}}  {counts[kind]:>10}")
        self.stdout.write(f"  held instances kept: {held}")
