"""The confirmation page's form: the fields every row shares (reason code,
disposition, failure category; for recover with rows not stale yet the
override and its note) and, per row that may be acted on, the hidden fields
the page posts back (observed version, operation id, evidence digest).

One Django ``Form`` with a field set built from the action and the rows, so a
single ``is_valid()`` checks every row before any is applied, and errors are
shown beside their field (a row's hidden fields beside the row). The field
names (``reason_code``, ``version_<id>``, ``operation_<id>``, ``digest_<id>``,
``override``, ``override_note``) are the page's contract with its tests and
with a double submit.

The override (SPEC §11) is explicit: the rows it would recover (active, not
stale yet) are posted apart from the others (``overridable``), and they are
acted on only when the box is ticked, each with the note — the domain's
:func:`~oxide_batch.domain.recovery.validate_override_note` checks it here, so
a bad note is an error beside the field and nothing is applied.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.validators import RegexValidator

from oxide_batch.domain.errors import RecoveryRequestInvalid
from oxide_batch.domain.evidence import UNKNOWN_EFFECT
from oxide_batch.domain.identifiers import MAX_IDENTIFIER
from oxide_batch.domain.names import OperatorStringKind
from oxide_batch.domain.recovery import (
    OVERRIDE_NOTE_MAX_BYTES,
    RecoveryDisposition,
    validate_override_note,
)
from oxide_batch.domain.status import FailureCategory

REASON = OperatorStringKind.REASON_CODE
OPERATION = OperatorStringKind.OPERATION_ID
DIGEST_PATTERN = r"\A[0-9a-f]{64}\Z"


def _full(kind: OperatorStringKind) -> str:
    return rf"\A(?:{kind.pattern.pattern})\Z"


@dataclass(frozen=True)
class RowInput:
    """One row's cleaned input."""

    id: int
    operation_id: str
    version: int | None
    evidence_digest: str | None
    # The operator's note when the override recovers this row (else None).
    override_note: str | None = None


class ActionForm(forms.Form):
    """The confirmation of one action for ``row_ids``.

    ``versioned`` adds ``version_<id>``, ``recover`` adds the disposition, the
    failure category and ``digest_<id>``, ``reason`` the reason code.
    ``unknown_commit`` names the rows whose current proposal carries the
    unknown-commit marker: MARK_FAILED of any of them needs ``UNKNOWN_EFFECT``,
    checked here so a set is never half applied for want of it.
    ``overridable`` names the rows (recover only) that only the override
    recovers: they get their hidden fields too, and the form the ``override``
    box and the ``override_note``; :meth:`row_inputs` holds them only when the
    box is ticked.
    """

    def __init__(
        self,
        data: Any = None,
        *,
        row_ids: Sequence[int],
        reason: bool,
        versioned: bool,
        recover: bool,
        unknown_commit: Collection[int] = (),
        overridable: Sequence[int] = (),
        initial: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(data, initial=initial)
        self.row_ids = list(row_ids)
        self.recover = recover
        self.overridable = [pk for pk in overridable if pk not in self.row_ids] if recover else []
        self.unknown_commit = set(unknown_commit) & set(self.field_ids)
        if recover:
            self.fields["disposition"] = forms.ChoiceField(
                label="Disposition",
                choices=[(d.value, d.value) for d in RecoveryDisposition],
                initial=RecoveryDisposition.MARK_FAILED.value,
                help_text="MARK_FAILED: the execution becomes FAILED and may be restarted. "
                "ABANDON: it becomes ABANDONED and its instance never runs again.",
            )
            self.fields["failure_category"] = forms.ChoiceField(
                label="Failure category (MARK_FAILED)",
                choices=[
                    ("", "default (UNKNOWN_COMMIT or STALE_RECOVERED)"),
                    *((c.value, c.value) for c in FailureCategory),
                ],
                required=False,
            )
        if reason:
            self.fields["reason_code"] = forms.CharField(
                label="Reason code",
                max_length=REASON.max_bytes,
                help_text=f"{REASON.allowed}, at most {REASON.max_bytes} characters "
                "(for example STALE_WORKER).",
                validators=[
                    RegexValidator(
                        _full(REASON),
                        f"Use only {REASON.allowed} (for example STALE_WORKER).",
                        code="reason_code",
                    )
                ],
                widget=forms.TextInput(
                    attrs={"pattern": REASON.pattern.pattern, "title": REASON.allowed, "size": 24}
                ),
            )
        if self.overridable:
            self.fields["override"] = forms.BooleanField(
                label="The worker is gone: recover before it is stale",
                required=False,
                help_text="Only for the rows above that are not stale yet (their owner's lease "
                "is held, or they have not been inactive long enough): the decision records "
                "an override with your note. A worker alive after all is fenced: its next "
                "write is refused.",
            )
            self.fields["override_note"] = forms.CharField(
                label="Override note",
                required=False,
                strip=False,  # checked as written: the audit shows it so
                help_text="Required with the override: why you know the worker is gone "
                f"(one line, at most {OVERRIDE_NOTE_MAX_BYTES} bytes, no surrounding spaces).",
                widget=forms.TextInput(attrs={"maxlength": OVERRIDE_NOTE_MAX_BYTES, "size": 60}),
            )
        for pk in self.field_ids:
            self.fields[f"operation_{pk}"] = forms.CharField(
                max_length=OPERATION.max_bytes,
                validators=[RegexValidator(_full(OPERATION), f"Use only {OPERATION.allowed}.")],
                widget=forms.HiddenInput,
            )
            if versioned:
                self.fields[f"version_{pk}"] = forms.IntegerField(
                    min_value=0, max_value=MAX_IDENTIFIER, widget=forms.HiddenInput
                )
            if recover:
                self.fields[f"digest_{pk}"] = forms.RegexField(
                    DIGEST_PATTERN,
                    error_messages={
                        "invalid": "An evidence digest is 64 lowercase hex characters."
                    },
                    widget=forms.HiddenInput,
                )

    def clean(self) -> dict[str, Any] | None:
        super().clean()
        cleaned = self.cleaned_data
        if self.overridable:
            self._clean_override(cleaned)
        acting = self._acting(cleaned)
        if not acting:
            if self.overridable and "override" not in self.errors:
                rows = ", ".join(f"#{pk}" for pk in self.overridable)
                verb = "is" if len(self.overridable) == 1 else "are"
                self.add_error(
                    "override",
                    forms.ValidationError(
                        f"{rows} {verb} not stale yet: tick the override (with a note) to "
                        "recover now, or come back once eligible.",
                        code="execution_not_stale",
                    ),
                )
            elif not self.overridable:
                raise forms.ValidationError("No selected row can be confirmed.", code="no_rows")
        marked = self.unknown_commit & set(acting)
        if (
            self.recover
            and marked
            and cleaned.get("disposition") == RecoveryDisposition.MARK_FAILED.value
            and "reason_code" in cleaned
            and cleaned["reason_code"] != UNKNOWN_EFFECT
        ):
            rows = ", ".join(f"#{pk}" for pk in sorted(marked))
            one = len(marked) == 1
            self.add_error(
                "reason_code",
                forms.ValidationError(
                    f"{rows} carr{'ies' if one else 'y'} the unknown-commit marker: marking "
                    f"{'it' if one else 'them'} FAILED needs the reason code {UNKNOWN_EFFECT} "
                    "(the effect may have happened), or choose ABANDON.",
                    code="unresolved_recovery_required",
                ),
            )
        return cleaned

    def _clean_override(self, cleaned: dict[str, Any]) -> None:
        """A ticked override needs a valid note (the domain's rule); a note
        without the override is refused rather than silently dropped."""
        ticked = bool(cleaned.get("override"))
        note = cleaned.get("override_note") or ""
        if ticked and not note:
            self.add_error(
                "override_note",
                forms.ValidationError(
                    "The override needs a note: say why you know the worker is gone.",
                    code="override_note_required",
                ),
            )
        elif note:
            try:
                validate_override_note(note)
            except RecoveryRequestInvalid as error:
                self.add_error(
                    "override_note",
                    forms.ValidationError(
                        "The note " + error.message.removeprefix("override_note "),
                        code=error.code,
                    ),
                )
        if note and not ticked:
            self.add_error(
                "override",
                forms.ValidationError(
                    "A note goes with the override only: tick it, or clear the note.",
                    code="override_not_ticked",
                ),
            )

    def _acting(self, cleaned: dict[str, Any]) -> list[int]:
        if cleaned.get("override"):
            return [*self.row_ids, *self.overridable]
        return list(self.row_ids)

    # -- what the page and the view read ----------------------------------------------

    @property
    def field_ids(self) -> list[int]:
        """Every row with hidden fields: those to act on, then those only the
        override acts on."""
        return [*self.row_ids, *self.overridable]

    @property
    def overridden(self) -> bool:
        """Whether the override is ticked (only after ``is_valid()``)."""
        return bool(self.cleaned_data.get("override"))

    def left_out(self) -> list[int]:
        """The rows not stale yet that stay untouched: the override was not
        ticked (only after ``is_valid()``)."""
        return [] if self.overridden else list(self.overridable)

    def row_fields(self, pk: int) -> list[forms.BoundField]:
        """A row's hidden fields (rendered inside the row, errors beside it)."""
        names = (f"operation_{pk}", f"version_{pk}", f"digest_{pk}")
        return [self[name] for name in names if name in self.fields]

    def row_errors(self, pk: int) -> list[str]:
        return [
            f"{field.name.split('_')[0]}: {error}"
            for field in self.row_fields(pk)
            for error in field.errors
        ]

    def row_inputs(self) -> list[RowInput]:
        """The cleaned per-row input of the rows to act on: the eligible ones,
        then, with the override, the overridden ones with the note (only after
        ``is_valid()``)."""
        data = self.cleaned_data
        note = data.get("override_note") or None
        return [
            RowInput(
                id=pk,
                operation_id=data[f"operation_{pk}"],
                version=data.get(f"version_{pk}"),
                evidence_digest=data.get(f"digest_{pk}"),
                override_note=note if pk in self.overridable else None,
            )
            for pk in self._acting(data)
        ]

    @property
    def disposition(self) -> RecoveryDisposition:
        return RecoveryDisposition(self.cleaned_data["disposition"])

    @property
    def failure_category(self) -> FailureCategory | None:
        value = self.cleaned_data.get("failure_category")
        return FailureCategory(value) if value else None

    @property
    def reason_code(self) -> str:
        return str(self.cleaned_data["reason_code"])
