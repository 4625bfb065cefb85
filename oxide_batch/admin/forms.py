"""The confirmation page's form: the fields every row shares (reason code,
disposition, failure category) and, per row that will be acted on, the hidden
fields the page posts back (observed version, operation id, evidence digest).

One Django ``Form`` with a field set built from the action and the rows, so a
single ``is_valid()`` checks every row before any is applied, and errors are
shown beside their field (a row's hidden fields beside the row). The field
names (``reason_code``, ``version_<id>``, ``operation_<id>``, ``digest_<id>``)
are the page's contract with its tests and with a double submit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.validators import RegexValidator

from oxide_batch.domain.evidence import UNKNOWN_EFFECT
from oxide_batch.domain.identifiers import MAX_IDENTIFIER
from oxide_batch.domain.names import OperatorStringKind
from oxide_batch.domain.recovery import RecoveryDisposition
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


class ActionForm(forms.Form):
    """The confirmation of one action for ``row_ids``.

    ``versioned`` adds ``version_<id>``, ``recover`` adds the disposition, the
    failure category and ``digest_<id>``, ``reason`` the reason code.
    ``unknown_commit`` names the rows whose current proposal carries the
    unknown-commit marker: MARK_FAILED of any of them needs ``UNKNOWN_EFFECT``,
    checked here so a set is never half applied for want of it.
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
        initial: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(data, initial=initial)
        self.row_ids = list(row_ids)
        self.recover = recover
        self.unknown_commit = set(unknown_commit) & set(self.row_ids)
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
        for pk in self.row_ids:
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
        cleaned = super().clean()
        if not self.row_ids:
            raise forms.ValidationError("No selected row can be confirmed.", code="no_rows")
        if (
            self.recover
            and self.unknown_commit
            and cleaned is not None
            and cleaned.get("disposition") == RecoveryDisposition.MARK_FAILED.value
            and "reason_code" in cleaned
            and cleaned["reason_code"] != UNKNOWN_EFFECT
        ):
            rows = ", ".join(f"#{pk}" for pk in sorted(self.unknown_commit))
            one = len(self.unknown_commit) == 1
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

    # -- what the page and the view read ----------------------------------------------

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
        """The cleaned per-row input, in page order (only after ``is_valid()``)."""
        data = self.cleaned_data
        return [
            RowInput(
                id=pk,
                operation_id=data[f"operation_{pk}"],
                version=data.get(f"version_{pk}"),
                evidence_digest=data.get(f"digest_{pk}"),
            )
            for pk in self.row_ids
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
