"""Opaque identifiers: positive integers that fit a PostgreSQL bigint."""

from __future__ import annotations

import enum

from oxide_batch.domain.errors import IdentifierOutOfRange, ZeroIdentifier

MAX_IDENTIFIER = 2**63 - 1


class IdentifierKind(enum.StrEnum):
    JOB_INSTANCE = "job instance"
    JOB_EXECUTION = "job execution"
    STEP_EXECUTION = "step execution"
    STEP_PARTITION = "step partition"
    FAILURE = "failure"
    RECOVERY_DECISION = "recovery decision"
    OPERATOR_REQUEST = "operator request"
    RETENTION_ACTION = "retention action"
    FLOW_DECISION = "flow decision"


def validate_identifier(kind: IdentifierKind, value: int) -> int:
    """Return ``value`` when it is a valid identifier of ``kind``.

    Raises ``ZeroIdentifier`` for 0 (and negatives) and ``IdentifierOutOfRange``
    above 2^63-1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{kind} identifier must be an int")
    if value <= 0:
        raise ZeroIdentifier(kind=kind.value)
    if value > MAX_IDENTIFIER:
        raise IdentifierOutOfRange(kind=kind.value, value=value)
    return value
