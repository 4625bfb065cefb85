"""Batch statuses and failure categories with their durable codes (seed ``execution.rs``)."""

from __future__ import annotations

import enum


class BatchStatus(enum.StrEnum):
    """The framework lifecycle status of a job or step execution.

    The value is the durable code stored in the database and carried by the API.
    """

    STARTING = "STARTING"
    STARTED = "STARTED"
    STOPPING = "STOPPING"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    COMPLETED = "COMPLETED"
    ABANDONED = "ABANDONED"
    UNKNOWN = "UNKNOWN"

    @property
    def is_active(self) -> bool:
        """Running or stopping: STARTING, STARTED, STOPPING."""
        return self in _ACTIVE

    @property
    def is_finished(self) -> bool:
        """A known finished outcome: STOPPED, FAILED, COMPLETED, ABANDONED."""
        return self in _FINISHED

    @property
    def is_terminal(self) -> bool:
        """The logical instance can never run again: COMPLETED, ABANDONED."""
        return self in _TERMINAL

    @property
    def is_unresolved(self) -> bool:
        """Blocks a new attempt of its instance: active or UNKNOWN."""
        return self.is_active or self is BatchStatus.UNKNOWN


_ACTIVE = frozenset({BatchStatus.STARTING, BatchStatus.STARTED, BatchStatus.STOPPING})
_FINISHED = frozenset(
    {BatchStatus.STOPPED, BatchStatus.FAILED, BatchStatus.COMPLETED, BatchStatus.ABANDONED}
)
_TERMINAL = frozenset({BatchStatus.COMPLETED, BatchStatus.ABANDONED})
UNRESOLVED_STATUSES = frozenset(_ACTIVE | {BatchStatus.UNKNOWN})


class FailureCategory(enum.StrEnum):
    """A stable framework category for a redacted failure; the value is the durable code."""

    INVALID_DEFINITION = "INVALID_DEFINITION"
    DUPLICATE_EXECUTION = "DUPLICATE_EXECUTION"
    ILLEGAL_TRANSITION = "ILLEGAL_TRANSITION"
    TRANSIENT_INFRASTRUCTURE = "TRANSIENT_INFRASTRUCTURE"
    PERMANENT_INFRASTRUCTURE = "PERMANENT_INFRASTRUCTURE"
    USER_COMPONENT = "USER_COMPONENT"
    CANCELLED = "CANCELLED"
    SERIALIZATION = "SERIALIZATION"
    INVARIANT = "INVARIANT"
    OPTIMISTIC_CONFLICT = "OPTIMISTIC_CONFLICT"
    TIMEOUT = "TIMEOUT"
    UNSUPPORTED_CAPABILITY = "UNSUPPORTED_CAPABILITY"
    UNKNOWN_COMMIT = "UNKNOWN_COMMIT"
    SHUTDOWN_INCOMPLETE = "SHUTDOWN_INCOMPLETE"
    STALE_RECOVERED = "STALE_RECOVERED"

    @property
    def telemetry_name(self) -> str:
        """The seed's low-cardinality lowercase name (``user_component``)."""
        return self.value.lower()

    @property
    def is_policy_eligible(self) -> bool:
        """Whether a fault policy may retry or skip this category (others fail closed)."""
        return self in _POLICY_ELIGIBLE


_POLICY_ELIGIBLE = frozenset(
    {
        FailureCategory.TRANSIENT_INFRASTRUCTURE,
        FailureCategory.PERMANENT_INFRASTRUCTURE,
        FailureCategory.USER_COMPONENT,
        FailureCategory.OPTIMISTIC_CONFLICT,
        FailureCategory.TIMEOUT,
    }
)
