"""What a runtime may do through the API that the repository alone would allow.

SPEC §2.1/§9 "Runtime transitions": a runtime moves its own job executions,
but ABANDONED and leaving UNKNOWN are operator decisions, refused here with
``illegal_transition`` (steps follow the full table). The check reads the
execution in the same unit of work and is race-free: the CAS that follows
names the same expected version, so a row that moved in between fails with
``stale_version``. Only targets that could break the rule (ABANDONED, and
FAILED — the one runtime exit from UNKNOWN the table knows) cost that read.
"""

from __future__ import annotations

from oxide_batch.domain.errors import IllegalTransition
from oxide_batch.domain.execution import JobExecution
from oxide_batch.domain.lifecycle import LifecycleTransition, validate_expected_version
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.port import UnitOfWork

S = BatchStatus
# Targets whose legality for a runtime depends on the current status.
CHECKED_TARGETS = frozenset({S.ABANDONED, S.FAILED})


def refuses(current: BatchStatus, target: BatchStatus) -> bool:
    """Whether a runtime may not make this (otherwise legal) move of a job execution."""
    return target is S.ABANDONED or current is S.UNKNOWN


def transition_job_execution(
    uow: UnitOfWork, job_execution_id: int, expected_version: int, transition: LifecycleTransition
) -> JobExecution:
    """``uow.transition_job_execution`` under the runtime's restrictions."""
    if transition.target in CHECKED_TARGETS:
        current = uow.get_job_execution(job_execution_id)
        validate_expected_version(expected_version, current.version)
        if refuses(current.status, transition.target):
            raise IllegalTransition(from_status=current.status, to_status=transition.target)
    return uow.transition_job_execution(job_execution_id, expected_version, transition)
