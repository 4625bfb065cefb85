"""Launch and restart rules (contract §2.2.2): when may an instance get a new attempt?"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from oxide_batch.domain.errors import (
    AbandonedInstance,
    CompletedInstance,
    ExecutionAlreadyActive,
    InvalidTransitionTime,
    LostWriteUnresolved,
    NotRestartable,
)
from oxide_batch.domain.execution import ExecutionMetadata, JobExecution
from oxide_batch.domain.lifecycle import validate_restart
from oxide_batch.domain.status import BatchStatus


@dataclass(frozen=True)
class NewAttempt:
    """What the repository inserts for a launch or restart."""

    job_instance_id: int
    attempt: int
    restart_of_id: int | None
    metadata: ExecutionMetadata


def plan_new_attempt(
    job_instance_id: int,
    latest: JobExecution | None,
    created_at: datetime,
    *,
    lost_write_of: int | None = None,
) -> NewAttempt:
    """Decide the next attempt of an instance from its latest attempt.

    None → attempt 1. STOPPED or FAILED → attempt ``latest + 1`` restarting it.
    COMPLETED → ``CompletedInstance``; ABANDONED → ``AbandonedInstance``;
    STARTING/STARTED/STOPPING/UNKNOWN → ``ExecutionAlreadyActive``. A new attempt
    may not be created before the prior one ended (``InvalidTransitionTime``).
    Then the lost-write gate (contract §2.5.14): ``lost_write_of``, an execution
    of the instance whose marker no operator resolved → ``LostWriteUnresolved``.
    The launch and the restart plan (:mod:`~oxide_batch.domain.restart_plan`)
    both decide here, in this order.
    """
    metadata = ExecutionMetadata.starting(created_at)
    if latest is None:
        return NewAttempt(job_instance_id, 1, None, metadata)
    status = latest.status
    if status is BatchStatus.COMPLETED:
        raise CompletedInstance(id=job_instance_id)
    if status is BatchStatus.ABANDONED:
        raise AbandonedInstance(id=job_instance_id)
    if status.is_unresolved:
        raise ExecutionAlreadyActive(
            instance_id=job_instance_id, execution_id=latest.id, status=status
        )
    validate_restart(status)
    if latest.ended_at is not None and created_at < latest.ended_at:
        raise InvalidTransitionTime()
    if lost_write_of is not None:
        # Resuming would start from a checkpoint older than what the runtime did.
        raise LostWriteUnresolved(instance_id=job_instance_id, execution_id=lost_write_of)
    return NewAttempt(job_instance_id, latest.attempt + 1, latest.id, metadata)


def step_takes_over(
    earlier_status: BatchStatus,
    *,
    step_name: str,
    earlier_id: int,
    allow_start_if_complete: bool = False,
    partition_rerun: bool = False,
) -> bool:
    """What a step of a restart attempt does with its newest earlier row
    (contract §2.3.2, Spring Batch's ``shouldStart``):
    ``True`` takes over its counts, checkpoint and context; ``False`` starts
    fresh; ``NotRestartable`` (naming the step and the earlier row) refuses it.

    - FAILED or STOPPED (the seed's ``validate_restart``) → take over;
    - COMPLETED → refused: a restart skips it — unless ``allow_start_if_complete``
      (it runs again from nothing) or ``partition_rerun`` (it was the worker of
      a partition that never completed: the partition's state decides, and its
      worker runs again from nothing);
    - ABANDONED → refused (skipped, as Spring Batch skips an abandoned step);
    - UNKNOWN → refused until an operator resolves it (its last commit's effect
      is unknown);
    - STARTING, STARTED or STOPPING (left so by an attempt that ended without
      ending it, which no operator action can resolve) → take over, as Spring
      Batch re-runs it (docs/decisions.md).
    """
    status = earlier_status
    if status is BatchStatus.COMPLETED:
        if allow_start_if_complete or partition_rerun:
            return False
        raise NotRestartable(status=status, step_name=step_name, step_execution_id=earlier_id)
    if status in (BatchStatus.ABANDONED, BatchStatus.UNKNOWN):
        raise NotRestartable(status=status, step_name=step_name, step_execution_id=earlier_id)
    return True
