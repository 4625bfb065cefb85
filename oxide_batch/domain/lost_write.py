"""An operator's resolution of a lost-write marker (contract §2.5.14); what the
marker is read as — :func:`~oxide_batch.domain.evidence.unresolved_lost_write`,
:func:`~oxide_batch.domain.evidence.lost_write_view` — lives with the evidence
it is part of.

A write refused with ``version_ahead`` marks its execution: the runtime saw a
version the repository no longer has, so an acknowledged write was lost and
what is stored is older than what the runtime did. Until an operator resolves
the marker it counts as the unknown-commit marker, and no launch or restart of
the instance starts from the older checkpoint (``LostWriteUnresolved``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from oxide_batch.domain.errors import (
    RecoveryFieldControlCharacter,
    RecoveryFieldEmpty,
    RecoveryFieldSurroundingWhitespace,
    RecoveryFieldTooLong,
)
from oxide_batch.domain.execution import JobExecution
from oxide_batch.domain.names import has_surrounding_whitespace, is_control
from oxide_batch.domain.recovery import OVERRIDE_NOTE_MAX_BYTES


def validate_note(note: str) -> str:
    """The operator's note on a resolution: an override note's rules (1–1000
    UTF-8 bytes, no surrounding whitespace, no control characters), ``field`` = note."""
    if not isinstance(note, str) or not note:
        raise RecoveryFieldEmpty(field="note")
    if len(note.encode("utf-8")) > OVERRIDE_NOTE_MAX_BYTES:
        raise RecoveryFieldTooLong(field="note", max_bytes=OVERRIDE_NOTE_MAX_BYTES)
    if has_surrounding_whitespace(note):
        raise RecoveryFieldSurroundingWhitespace(field="note")
    if any(is_control(character) for character in note):
        raise RecoveryFieldControlCharacter(field="note")
    return note


@dataclass(frozen=True)
class LostWriteResolution:
    """What an operator decided about a marker, as the execution row keeps it."""

    actor: str
    reason_code: str
    note: str
    operation_id: str

    def stored(self, resolved_at: str) -> dict[str, Any]:
        """The row's ``lost_write_resolution`` (``resolved_at``: RFC 3339 text)."""
        return {
            "resolved_at": resolved_at,
            "actor": self.actor,
            "reason_code": self.reason_code,
            "note": self.note,
            "operation_id": self.operation_id,
        }


@dataclass(frozen=True)
class ResolvedLostWrite:
    """The execution after a resolution; ``changed`` is false when there was no
    unresolved marker to resolve (nothing written)."""

    execution: JobExecution
    changed: bool
