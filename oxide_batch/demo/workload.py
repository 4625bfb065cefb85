"""A scripted runtime that records a realistic workload through the repository."""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    FailureCategory,
    FailureSummary,
    JobExecution,
    JobInstanceKey,
    JobParameter,
    LifecycleTransition,
    StepExecution,
)
from oxide_batch.domain.errors import NotRestartable
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository import DjangoJobRepository, FixedClock

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

    def claim(self, execution: JobExecution, worker: WorkerIdentity) -> JobExecution:
        """Claim a STARTING execution for a fresh token, recording ``worker``
        (decision 310: who runs it, as a runtime's claim does)."""
        with self.repo.begin() as uow:
            uow.claim_execution_owner(
                execution.id, execution.version, secrets.token_bytes(16), worker=worker
            )
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
        """Start each step, run it for a while and end it; the last one ends in
        ``last``. In a restart, a step that COMPLETED in an earlier attempt is
        skipped, as a Spring Batch runtime skips it (contract §2.3.2)."""
        for index, name in enumerate(names):
            target = last if index == len(names) - 1 else S.COMPLETED
            try:
                with self.repo.begin() as uow:
                    step = uow.create_step_execution(execution.id, name)
                    step = uow.transition_step_execution(
                        step.id, step.version, LifecycleTransition(S.STARTED)
                    )
                    uow.commit()
            except NotRestartable as refused:
                if refused.status is S.COMPLETED:
                    continue
                raise
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
