"""What every audited operator or retention request shares: the actor, the
operation id, and the request digest that decides replays (contract §2.5.9)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from oxide_batch.domain.canonical import canonical_bytes, sha256_hex
from oxide_batch.domain.errors import (
    CommitOutcomeUnknown,
    ConcurrentModification,
    LifecycleError,
    MigrationRequired,
    NewerSchema,
    NotFound,
    OperationIdConflict,
    OxideBatchError,
    RepositoryError,
    SchemaUninitialized,
    Unavailable,
)
from oxide_batch.domain.names import OperatorStringKind, validate_operator_string

REQUEST_DIGEST_VERSION = "oxide-batch.operator-request.v1"


class UserLike(Protocol):
    @property
    def pk(self) -> Any: ...

    def get_username(self) -> str: ...


@dataclass(frozen=True)
class Actor:
    """Who acts: an actor reference (audited) and, for a logged-in user, the user id."""

    reference: str
    user_id: int | None = None

    def __post_init__(self) -> None:
        validate_operator_string(self.reference, OperatorStringKind.ACTOR)

    @classmethod
    def for_user(cls, user: UserLike) -> Actor:
        """The username when it fits the actor character set, else ``user:<id>``."""
        username = user.get_username()
        try:
            return cls(username, int(user.pk))
        except OxideBatchError:
            return cls(f"user:{user.pk}", int(user.pk))


# Not audited (contract §2.5.9): not-found, conflicts of operation ids, lost
# races and infrastructure failures. Input errors are not rules either.
NOT_AUDITED = (
    NotFound,
    ConcurrentModification,
    CommitOutcomeUnknown,
    Unavailable,
    SchemaUninitialized,
    MigrationRequired,
    NewerSchema,
    OperationIdConflict,
)


def is_rule_refusal(error: OxideBatchError) -> bool:
    """A refusal by a rule is audited as REJECTED; anything else is not."""
    return isinstance(error, (LifecycleError, RepositoryError)) and not isinstance(
        error, NOT_AUDITED
    )


class Outcome(enum.StrEnum):
    APPLIED = "APPLIED"
    REPLAYED = "REPLAYED"
    REJECTED = "REJECTED"


def request_digest(
    *,
    action: str,
    target: str,
    expected_version: int | None = None,
    reason_code: str | None = None,
    arguments: Mapping[str, Any] | None = None,
) -> str:
    """SHA-256 over the canonical JSON of what the request asks — never the actor
    or the operation id, so the same request from another operator is a replay.

    Encoding (stable, documented in docs/decisions.md): the compact, key-sorted
    JSON object ``{"v", "action", "target", "expected_version", "reason_code",
    "arguments"}``.
    """
    document = {
        "v": REQUEST_DIGEST_VERSION,
        "action": action,
        "target": target,
        "expected_version": expected_version,
        "reason_code": reason_code,
        "arguments": dict(arguments or {}),
    }
    return sha256_hex(canonical_bytes(document))


def validate_operation_id(operation_id: str) -> str:
    return validate_operator_string(operation_id, OperatorStringKind.OPERATION_ID)


def validate_reason_code(reason_code: str) -> str:
    return validate_operator_string(reason_code, OperatorStringKind.REASON_CODE)
