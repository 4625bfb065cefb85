"""``manage.py purge_batch_metadata``: the retention purge, batch after batch.

Each batch is a survey and an apply in its own transaction, audited under
operation id ``<operation id>:<batch number>``. Interrupting (Ctrl-C) between
or during batches leaves a consistent database: committed batches stay, the
batch in flight rolls back; rerunning with the same ``--operation-id`` resumes.

``--json`` has one shape for a dry run and a real run (:func:`report`):
``counts`` is always what *this* invocation deleted — zero in a dry run, and a
replayed batch adds to ``replayed_counts`` instead — so a wrapper that adds up
``counts`` over its runs never counts a batch twice; a dry run's survey is
``plan`` with ``would_delete``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandParser
from tqdm import tqdm

from oxide_batch.domain.retention import (
    DEFAULT_PURGE_REASON,
    MAX_BATCH_BOUND,
    PURGE_KINDS,
    PurgeCounts,
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
from oxide_batch.services import bootstrap
from oxide_batch.services.audit import Outcome, validate_reason_code
from oxide_batch.services.retention import (
    MAX_RESURVEYS,
    PurgeBatch,
    PurgeRun,
)

# Room for ":<batch number>" and a re-survey's ".r<attempt>" in the 64-byte
# operation id of each batch.
BATCH_SUFFIX_BYTES = 16
DRY_RUN = "DRY_RUN"


class Command(OxideCommand):
    help = (
        "Delete finished job instances (and everything they own) whose latest "
        "execution ended before a cutoff, in audited batches. Held instances, "
        "definitions and audit rows are never purged."
    )
    settings_named = {"age_bound_too_small": "OXIDE_BATCH_PURGE_MIN_AGE"}

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
        service = bootstrap.retention_service()
        if options["dry_run"]:
            criteria = self._criteria(options, service.now())
            plan = service.survey(
                cutoff=criteria.cutoff,
                job_name=criteria.job_name,
                statuses=criteria.statuses,
                limit=criteria.bound,
            )
            return report(criteria, plan=plan.to_json(), held_excluded=plan.held_excluded)
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
        self.report = run_report(run, operation_id)
        progress = tqdm(
            unit=" instances",
            desc="purged",
            disable=self.json_output or not self.stdout.isatty(),
            leave=False,
        )
        try:
            for batch in run:
                progress.update(batch.result.record.counts.job_instances)
                self.report = run_report(run, operation_id)
        except KeyboardInterrupt:
            raise CommandFailed(
                ExitCode.ERROR,
                "interrupted",
                f"interrupted after {len(run.batches)} committed batch(es); the database "
                f"is consistent; rerun with --operation-id {operation_id} to continue",
            ) from None
        finally:
            progress.close()
            self.report = run_report(run, operation_id)
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

    def render(self, document: dict[str, Any]) -> None:
        criteria = document["criteria"]
        if document["dry_run"]:
            self.stdout.write(
                f"dry run, nothing deleted: the next batch (cutoff {criteria['cutoff']}, "
                f"up to {criteria['batch_size']} instances) would purge"
            )
            counts = document["would_delete"]
        else:
            batches = document["batches"]
            replayed = sum(1 for b in batches if b["replayed"])
            self.stdout.write(
                f"purged in {len(batches)} batch(es) ({replayed} replayed), operation id "
                f"{document['operation_id']}, cutoff {criteria['cutoff']}"
            )
            if replayed:
                self.stdout.write(
                    "  replayed batches were deleted by an earlier run: counted below "
                    "only under 'replayed'"
                )
            counts = document["counts"]
        width = max(len(kind) for kind in PURGE_KINDS)
        for kind in PURGE_KINDS:
            line = f"  {kind:<{width}}  {counts[kind]:>10}"
            if document["replayed_counts"][kind]:
                line += f"  (replayed {document['replayed_counts'][kind]})"
            self.stdout.write(line)
        self.stdout.write(f"  held instances kept: {document['held_excluded']}")


def report(
    criteria: PurgeCriteria,
    *,
    operation_id: str | None = None,
    outcome: str = DRY_RUN,
    batches: Sequence[PurgeBatch] = (),
    held_excluded: int = 0,
    resurveys: int = 0,
    plan: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The one ``--json`` shape of a dry run (``plan``) and of a real run (``batches``).

    ``counts``: rows deleted by this invocation (its APPLIED batches); ``replayed_counts``:
    what the replayed batches had deleted in an earlier run under the same operation id;
    ``would_delete``: the dry run's survey counts (``null`` in a real run). Each batch
    says ``replayed`` and carries its counts under the same two names."""
    zero = PurgeCounts()
    deleted, replayed = zero, zero
    for batch in batches:
        if batch.result.outcome is Outcome.REPLAYED:
            replayed = replayed.plus(batch.result.record.counts)
        else:
            deleted = deleted.plus(batch.result.record.counts)
    return {
        "outcome": outcome,
        "dry_run": plan is not None,
        "operation_id": operation_id,
        "criteria": {
            "cutoff": format_instant(criteria.cutoff),
            "job_name": criteria.job_name,
            "statuses": criteria.ordered_statuses,
            "batch_size": criteria.bound,
        },
        "counts": deleted.as_dict(),
        "replayed_counts": replayed.as_dict(),
        "would_delete": None if plan is None else plan["counts"],
        "held_excluded": held_excluded,
        "resurveys": resurveys,
        "max_resurveys": MAX_RESURVEYS,
        "batches": [batch_json(batch) for batch in batches],
        "plan": plan,
    }


def batch_json(batch: PurgeBatch) -> dict[str, Any]:
    """One batch: a replayed one deleted nothing now (``counts`` zero) and shows
    what it had deleted as ``replayed_counts``."""
    document = batch.to_json()
    recorded = document.pop("counts")
    replayed = batch.result.outcome is Outcome.REPLAYED
    zero = PurgeCounts().as_dict()
    document |= {
        "replayed": replayed,
        "counts": zero if replayed else recorded,
        "replayed_counts": recorded if replayed else zero,
    }
    return document


def run_report(run: PurgeRun, operation_id: str) -> dict[str, Any]:
    """A real run's report: REPLAYED when every batch was (nothing deleted now)."""
    applied = any(b.result.outcome is Outcome.APPLIED for b in run.batches)
    outcome = Outcome.REPLAYED if run.batches and not applied else Outcome.APPLIED
    return report(
        run.criteria,
        operation_id=operation_id,
        outcome=outcome.value,
        batches=run.batches,
        held_excluded=run.held_excluded,
        resurveys=run.resurveys,
    )
