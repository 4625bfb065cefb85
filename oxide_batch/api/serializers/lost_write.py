"""An operator's resolution of a lost-write marker (contract §2.5.14)."""

from __future__ import annotations

from oxide_batch.api.fields import NoteField, OperatorStringField
from oxide_batch.api.serializers.base import OPERATION_ID, REASON_CODE, Input, at, operator_string
from oxide_batch.domain.lost_write import validate_note


class ResolveLostWriteInput(Input):
    reason_code = OperatorStringField(
        REASON_CODE,
        help_text="1–64 bytes of A-Z 0-9 _: why the loss is settled (e.g. `TARGET_CHECKED`).",
    )
    note = NoteField(
        help_text=(
            "What the operator found (the target system checked, what was redone): 1–1000 "
            "UTF-8 bytes, no control characters, no surrounding whitespace."
        )
    )
    operation_id = OperatorStringField(OPERATION_ID, help_text="1–64 bytes of A-Z a-z 0-9 . _ : -")

    def to_domain(self) -> tuple[str, str, str]:
        """``(reason_code, note, operation_id)``."""
        data = self.validated_data
        with at("note"):
            note = validate_note(data["note"])
        return (
            operator_string("reason_code", REASON_CODE, data["reason_code"]),
            note,
            operator_string("operation_id", OPERATION_ID, data["operation_id"]),
        )
