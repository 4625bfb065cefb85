"""Drive a realistic workload through the repository so a first look at the
console shows real data: completed runs, a failure and its restart, a crash
left STARTED, an unknown commit, a cooperative stop, an audited recovery."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    FailureCategory,
    FailureSummary,
    JobExecution,
    JobInstanceKey,
    JobParameter,
    LifecycleTransition,
    RecoveryRequest,
    StepExecution,
)
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
from oxide_batch.repository import DjangoJobRepository, FixedClock
from oxide_batch.selectors import repository_is_empty

S = BatchStatus


class Workload:
    """A scripted runtime: every write is one unit of work through the repository."""

    def __init__(self, start: datetime) -> None:
        self.clock = FixedClock(start)
        self.repo = DjangoJobRepository(self.clock)
        self.failure_ids = iter(range(9001, 10_000))

    def tick(self, seconds: float) -> None:
        self.clock.advance(timedelta(seconds=seconds))

    def launch(self, job: str, **parameters: str | int) -> JobExecution:
        key = JobInstanceKey.of(
            job,
            [JobParameter.from_json(name, value) for name, value in sorted(parameters.items())],
        )
        with self.repo.begin() as uow:
            instance = uow.select_or_create_job_instance(key).instance
            execution = uow.create_job_execution(instance.id)
            uow.commit()
        return execution

    def restart(self, execution: JobExecution) -> JobExecution:
        with self.repo.begin() as uow:
            restarted = uow.create_job_execution(execution.job_instance_id)
            uow.commit()
        return restarted

    def move(
        self,
        execution: JobExecution,
        target: BatchStatus,
        *,
        category: FailureCategory | None = None,
    ) -> JobExecution:
        failure = FailureSummary(category, next(self.failure_ids)) if category else None
        with self.repo.begin() as uow:
            moved = uow.transition_job_execution(
                execution.id, execution.version, LifecycleTransition(target, failure=failure)
            )
            uow.commit()
        return moved

    def run_steps(
        self,
        execution: JobExecution,
        names: list[str],
        *,
        last: BatchStatus = S.COMPLETED,
        category: FailureCategory | None = None,
    ) -> None:
        """Start each step, run it for a while and end it; the last one ends in ``last``."""
        for index, name in enumerate(names):
            target = last if index == len(names) - 1 else S.COMPLETED
            with self.repo.begin() as uow:
                step = uow.create_step_execution(execution.id, name)
                step = uow.transition_step_execution(
                    step.id, step.version, LifecycleTransition(S.STARTED)
                )
                uow.commit()
            step = self.chunks(step, count=3 + index)
            if target in (S.STARTED, S.STOPPING):
                continue  # left running (a crash or a pending stop)
            failure = FailureSummary(category, next(self.failure_ids)) if category else None
            with self.repo.begin() as uow:
                if target is S.COMPLETED:
                    step = uow.enrich_step_exit_status(step.id, step.version, "COMPLETED")
                uow.transition_step_execution(
                    step.id, step.version, LifecycleTransition(target, failure=failure)
                )
                uow.commit()

    def chunks(self, step: StepExecution, *, count: int, size: int = 100) -> StepExecution:
        """Commit ``count`` chunks of ``size`` items, each with its checkpoint."""
        for _ in range(count):
            self.tick(15)
            position = step.counts.read + size
            with self.repo.begin() as uow:
                step = uow.commit_chunk(
                    step.id,
                    step.version,
                    ExecutionCounts(
                        read=size, processed=size, written=size - 2, filtered=2, committed=1
                    ),
                    checkpoint=StateEnvelope.from_json(
                        {
                            "schema": "demo.cursor",
                            "schema_version": 1,
                            "payload": {"position": position},
                        },
                        kind=EnvelopeKind.CHECKPOINT,
                    ),
                    context=StateEnvelope.from_json(
                        {
                            "schema": "demo.context",
                            "schema_version": 2,
                            "payload": {"file": f"part-{position // 1000:04d}.csv"},
                        },
                        kind=EnvelopeKind.CONTEXT,
                    ),
                )
                uow.commit()
        return step

    def complete(self, job: str, steps: list[str], **parameters: str | int) -> JobExecution:
        execution = self.move(self.launch(job, **parameters), S.STARTED)
        self.run_steps(execution, steps)
        with self.repo.begin() as uow:
            execution = uow.enrich_job_exit_status(execution.id, execution.version, "COMPLETED")
            uow.commit()
        return self.move(execution, S.COMPLETED)


class Command(BaseCommand):
    help = "Record a realistic demo workload through the repository."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="do nothing when the repository already holds job instances",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["if_empty"] and not repository_is_empty():
            self.stdout.write("demo workload skipped: the repository is not empty")
            return
        now = datetime.now(UTC)
        work = Workload(now - timedelta(hours=6))
        etl = ["extract", "transform", "load"]
        for days_ago in (3, 2, 1):
            day = (now - timedelta(days=days_ago)).date().isoformat()
            work.complete("nightly_import", etl, business_date=day)
            work.tick(600)

        # A failure, then its restart completes.
        billing = work.move(work.launch("billing_export", region="eu", batch=42), S.STARTED)
        work.run_steps(
            billing, ["collect", "render"], last=S.FAILED, category=FailureCategory.USER_COMPONENT
        )
        work.move(billing, S.FAILED, category=FailureCategory.USER_COMPONENT)
        work.tick(900)
        work.complete("billing_export", ["collect", "render"], region="eu", batch=42)

        # A cooperative stop.
        report = work.move(work.launch("report_build", month="2026-10"), S.STARTED)
        work.run_steps(report, ["aggregate"], last=S.STOPPED, category=None)
        report = work.move(report, S.STOPPING)
        work.move(report, S.STOPPED)

        # A worker crashed: left STARTED, long inactive — a recovery candidate.
        crashed = work.move(work.launch("customer_sync", shard=7), S.STARTED)
        work.run_steps(crashed, ["fetch", "upsert"], last=S.STARTED)

        # A commit whose outcome the runtime could not learn: UNKNOWN.
        ledger = work.move(work.launch("ledger_post", period="2026-11"), S.STARTED)
        work.run_steps(ledger, ["post"], last=S.STARTED)
        work.move(ledger, S.UNKNOWN, category=FailureCategory.UNKNOWN_COMMIT)

        # An orphan an operator already resolved, with its audit row.
        orphan = work.move(work.launch("cleanup", scope="tmp"), S.STARTED)
        work.tick(3600)
        with work.repo.begin() as uow:
            uow.recover_job_execution(
                orphan.id,
                RecoveryRequest.abandon(
                    expected_version=orphan.version,
                    reason_code="ORPHAN_CONFIRMED",
                    operator_reference="demo-operator",
                    evidence_digest=hashlib.sha256(b"demo evidence").digest(),
                ),
            )
            uow.commit()

        # Something running right now.
        work.clock.set(now - timedelta(minutes=2))
        live = work.move(
            work.launch("nightly_import", business_date=now.date().isoformat()), S.STARTED
        )
        work.run_steps(live, ["extract", "transform"], last=S.STARTED)
        self.stdout.write(self.style.SUCCESS("demo workload recorded"))
