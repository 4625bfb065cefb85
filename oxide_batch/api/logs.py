"""The failure object's ``logs_url`` ("Open the logs", decision 316):
``OXIDE_BATCH_FAILURE_URL_TEMPLATE`` filled in from an execution's or a
step's answer, for the hand-built answers (:mod:`.render`) and the ``Output``
serializers alike."""

from __future__ import annotations

from collections.abc import Callable

from oxide_batch.conf import batch_settings
from oxide_batch.domain.execution import StepExecution
from oxide_batch.domain.failures import failure_url
from oxide_batch.selectors.executions import ExecutionRecord, job_name_of_execution


def execution_logs(record: ExecutionRecord) -> Callable[[int], str | None]:
    execution, worker = record.execution, record.extras.worker
    return lambda failure_id: failure_url(
        batch_settings.FAILURE_URL_TEMPLATE,
        failure_id=failure_id,
        execution_id=execution.id,
        job_name=execution.job_name,
        host=None if worker is None else worker["host"],
        started_at=execution.started_at,
        ended_at=execution.ended_at,
    )


def step_logs(step: StepExecution) -> Callable[[int], str | None]:
    def link(failure_id: int) -> str | None:
        template = batch_settings.FAILURE_URL_TEMPLATE
        if not template:
            return None
        # The job name only when the template uses it: one read, on a failed
        # step's answer only (the step row does not hold it).
        name = job_name_of_execution(step.job_execution_id) if "{job_name}" in template else ""
        return failure_url(
            template,
            failure_id=failure_id,
            execution_id=step.job_execution_id,
            job_name=name,
            step_execution_id=step.id,
            host=None if step.worker is None else step.worker.host,
            started_at=step.started_at,
            ended_at=step.ended_at,
        )

    return link
