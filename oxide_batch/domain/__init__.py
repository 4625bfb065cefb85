"""The pure domain: values, statuses, lifecycle rules and errors. Imports no Django."""

from oxide_batch.domain.descriptor import RepositoryCapability, RepositoryDescriptor
from oxide_batch.domain.execution import (
    ExecutionCounts,
    ExecutionMetadata,
    ExecutionTimestamps,
    FailureSummary,
    JobExecution,
    JobInstance,
    JobInstanceSelection,
    StepExecution,
)
from oxide_batch.domain.launch import NewAttempt, plan_new_attempt
from oxide_batch.domain.lifecycle import LEGAL_TRANSITIONS, LifecycleTransition
from oxide_batch.domain.names import (
    IdentifierKind,
    NameKind,
    OperatorStringKind,
    validate_identifier,
    validate_name,
)
from oxide_batch.domain.parameters import JobInstanceKey, JobParameter, ParameterType
from oxide_batch.domain.recovery import (
    RecoveryDecision,
    RecoveryDisposition,
    RecoveryRequest,
    RecoveryResult,
    recovered_execution,
)
from oxide_batch.domain.status import BatchStatus, FailureCategory

__all__ = [
    "LEGAL_TRANSITIONS",
    "BatchStatus",
    "ExecutionCounts",
    "ExecutionMetadata",
    "ExecutionTimestamps",
    "FailureCategory",
    "FailureSummary",
    "IdentifierKind",
    "JobExecution",
    "JobInstance",
    "JobInstanceKey",
    "JobInstanceSelection",
    "JobParameter",
    "LifecycleTransition",
    "NameKind",
    "NewAttempt",
    "OperatorStringKind",
    "ParameterType",
    "RecoveryDecision",
    "RecoveryDisposition",
    "RecoveryRequest",
    "RecoveryResult",
    "RepositoryCapability",
    "RepositoryDescriptor",
    "StepExecution",
    "plan_new_attempt",
    "recovered_execution",
    "validate_identifier",
    "validate_name",
]
