"""Operator actions and their audit records (contract §2.5.9)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from oxide_batch.domain.status import BatchStatus


class OperatorAction(enum.StrEnum):
    LAUNCH = "LAUNCH"
    RESTART = "RESTART"
    STOP = "STOP"
    ABANDON = "ABANDON"
    RECOVER = "RECOVER"
    RESOLVE_LOST_WRITE = "RESOLVE_LOST_WRITE"


class RecordOutcome(enum.StrEnum):
    """What an audit row records (a replay is answered, never stored)."""

    APPLIED = "APPLIED"
    REJECTED = "REJECTED"


@dataclass(frozen=True)
class OperatorRecordDraft:
    """An audit row to append, in the transaction of its effect (or of its refusal)."""

    action: OperatorAction
    operation_id: str
    actor: str
    actor_user_id: int | None
    request_digest: str
    outcome: RecordOutcome
    job_instance_id: int | None = None
    job_execution_id: int | None = None
    reason_code: str | None = None
    observed_version: int | None = None
    prior_status: BatchStatus | None = None
    result_status: BatchStatus | None = None
    changed: bool = False
    rejection_code: str | None = None
    rejection_details: dict[str, Any] | None = None


@dataclass(frozen=True)
class OperatorRecord:
    id: int
    action: OperatorAction
    operation_id: str
    actor: str
    actor_user_id: int | None
    request_digest: str
    outcome: RecordOutcome
    job_instance_id: int | None
    job_execution_id: int | None
    reason_code: str | None
    observed_version: int | None
    prior_status: BatchStatus | None
    result_status: BatchStatus | None
    changed: bool
    rejection_code: str | None
    rejection_details: dict[str, Any] | None
    requested_at: datetime
