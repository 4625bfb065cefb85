"""The confirmation page's form: the fields every row shares (reason code,
disposition, failure category; for recover with rows not stale yet the
override and its note) and, per row that may be acted on, the hidden fields
the page posts back (observed version, operation id, evidence digest).

One Django ``Form`` with a field set built from the action and the rows, so a
single ``is_valid()`` checks every row before any is applied, and errors are
shown beside their field (a row's hidden fields beside the row). The field
names (``reason_code``, ``disposition``, ``failure_category``, ``version_<id>``,
``operation_<id>``, ``digest_<id>``, ``seal_<id>``, ``override``,
``override_note``) are the page's contract with its tests and with a double
submit.

An audited choice is a choice (issue 25): nothing the operator decides is
pre-filled — reason code, disposition and failure category start empty, and a
page submitted as it came applies nothing and says what is missing. The
categories offered for MARK_FAILED are those an operator can establish about a
run whose worker went silent (:data:`OPERATOR_CATEGORIES`); ``UNKNOWN_COMMIT``
only for, and then required for, rows carrying the unknown-commit marker. A
category with ABANDON is refused (ABANDON records none).

For recover each row also carries a seal: an HMAC (the project's secret key)
over the row id, the observed version, the evidence digest and the
unknown-commit marker the page showed (the rows with it are posted back in
``marked``, so a double submit is checked against what the page showed, not
against the row as the first submit left it). A digest, version or marker
that is not the page's is "this form was altered", never mistaken for
evidence that changed (which the service reports after a real change).

The override (contract §2.5.5) is explicit: the rows it would recover (active, not
stale yet) are posted apart from the others (``overridable``), and they are
acted on only when the box is ticked, each with the note — the domain's
:func:`~oxide_batch.domain.recovery.validate_override_note` checks it here, so
a bad note is an error beside the field and nothing is applied.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from django import forms
from django.core.validators import RegexValidator
from django.utils.crypto import constant_time_compare, salted_hmac

from oxide_batch.domain.errors import RecoveryRequestInvalid
from oxide_batch.domain.evidence import UNKNOWN_EFFECT, requires_unknown_effect
from oxide_batch.domain.names import MAX_IDENTIFIER, OperatorStringKind
from oxide_batch.domain.recovery import (
    OVERRIDE_NOTE_MAX_BYTES,
    RecoveryDisposition,
    validate_override_note,
)
from oxide_batch.domain.status import FailureCategory

REASON = OperatorStringKind.REASON_CODE
OPERATION = OperatorStringKind.OPERATION_ID
DIGEST_PATTERN = r"\A[0-9a-f]{64}\Z"
C = FailureCategory
MARK_FAILED = RecoveryDisposition.MARK_FAILED.value
ABANDON = RecoveryDisposition.ABANDON.value

#: The failure categories an operator may record when marking a stale or
#: unknown run FAILED, each with what it says (the decision's rationale is in
#: docs/decisions.md): what an operator can know about a worker that went
#: silent. UNKNOWN_COMMIT is offered only for rows carrying the marker.
OPERATOR_CATEGORIES: dict[FailureCategory, str] = {
    C.STALE_RECOVERED: "the worker is gone, the cause is not known",
    C.TRANSIENT_INFRASTRUCTURE: "the worker was lost to a passing infrastructure fault "
    "(node drain, network, database outage): a restart should succeed",
    C.PERMANENT_INFRASTRUCTURE: "the worker was lost to a lasting infrastructure fault "
    "(host, credentials or resource gone): fix it before restarting",
    C.USER_COMPONENT: "the job's own code brought the worker down (a crash or out of "
    "memory in a reader, processor or writer)",
}
UNKNOWN_COMMIT_MEANING = (
    "the last commit's outcome is unknown (the row carries the marker): check the target "
    "system before restarting"
)

#: Reason codes each action's help text gives as examples (never pre-filled).
REASON_EXAMPLES = {
    "recover": "STALE_WORKER or NODE_LOST",
    "abandon": "NOT_NEEDED or SUPERSEDED",
    "hold": "LEGAL_HOLD or INCIDENT_REVIEW",
    "release": "REVIEW_DONE",
}
ALTERED = "This form was altered: reload the page."
SEAL_SALT = "oxide_batch.admin.forms.seal"
# A line break in the override note, with the spaces and tabs beside it.
_LINE_BREAK = re.compile(r"[ \t]*(?:\r\n|\r|\n)[ \t]*")


def one_paragraph(text: str) -> str:
    """A note typed in a text box as the one line the audit keeps: the line
    breaks at its end dropped, each other one (with the spaces beside it) one
    space. Nothing else changes: surrounding spaces are still the domain's to
    refuse."""
    return _LINE_BREAK.sub(" ", text.strip("\r\n"))


def seal(pk: int, version: int | None, digest: str | None, marked: bool = False) -> str:
    """The HMAC a recover page gives each row over what it showed: the
    version, the evidence digest and whether the row carried the
    unknown-commit marker (which the form's checks follow)."""
    return salted_hmac(SEAL_SALT, f"{pk}:{version}:{digest}:{int(marked)}").hexdigest()


def _rows(ids: Collection[int]) -> str:
    return ", ".join(f"#{pk}" for pk in sorted(ids))


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
    failure category, ``digest_<id>`` and ``seal_<id>``, ``reason`` the reason
    code (``action`` picks its examples). ``unknown_commit`` names the rows
    whose proposal, as the page showed it, carries the unknown-commit marker:
    MARK_FAILED of any of them needs ``UNKNOWN_EFFECT`` and the category
    UNKNOWN_COMMIT (which no other row may get), checked here so a set is never
    half applied for want of it.
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
        action: str = "",
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
                choices=[
                    ("", "— choose one —"),
                    (MARK_FAILED, "MARK_FAILED — the execution ends FAILED (it may be restarted)"),
                    (ABANDON, "ABANDON — it ends ABANDONED (its instance never runs again)"),
                ],
                error_messages={
                    "required": "Choose what the recovery does: MARK_FAILED or ABANDON."
                },
                help_text="Either way the unfinished steps listed above end FAILED and a "
                "worker still writing to them is refused.",
            )
            self.fields["failure_category"] = forms.ChoiceField(
                label="Failure category (MARK_FAILED only)",
                # Any category is a valid *value*, so one not offered here is
                # refused in clean() with why, not a bare "invalid choice".
                choices=[("", "— choose one —"), *((c.value, c.value) for c in C)],
                required=False,
                help_text="What the execution is marked FAILED with (its unfinished steps "
                "carry it too). ABANDON records none: its steps carry "
                f"{C.STALE_RECOVERED.value} ({C.UNKNOWN_COMMIT.value} with the marker).",
            )
            self.fields["failure_category"].widget.choices = [
                ("", "— choose one —"),
                *((c.value, f"{c.value} — {meaning}") for c, meaning in self.offered_categories),
            ]
        if reason:
            examples = REASON_EXAMPLES.get(action, "STALE_WORKER")
            self.fields["reason_code"] = forms.CharField(
                label="Reason code",
                max_length=REASON.max_bytes,
                help_text=f"Why, as a code: {REASON.allowed}, at most {REASON.max_bytes} "
                f"characters (for example {examples}).",
                error_messages={"required": f"Give a reason code (for example {examples})."},
                validators=[
                    RegexValidator(
                        _full(REASON),
                        f"Use only {REASON.allowed} (for example {examples}).",
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
                f"(at most {OVERRIDE_NOTE_MAX_BYTES} bytes, no surrounding spaces; the "
                "decision records it as one paragraph: a line break becomes a space).",
                # Room to write and re-read a note of up to 1000 bytes; the audit
                # keeps one line (the domain refuses control characters).
                widget=forms.Textarea(
                    attrs={"maxlength": OVERRIDE_NOTE_MAX_BYTES, "rows": 4, "cols": 60}
                ),
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
                        "invalid": "not the evidence digest this page gave (64 lowercase hex "
                        "characters); the form was altered"
                    },
                    widget=forms.HiddenInput,
                )
                self.fields[f"seal_{pk}"] = forms.CharField(
                    max_length=64,
                    widget=forms.HiddenInput,
                    error_messages={"required": "missing; the form was altered"},
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
        if self.recover:
            self._check_seals(cleaned)
            self._clean_recovery(cleaned, set(acting))
        return cleaned

    def _check_seals(self, cleaned: dict[str, Any]) -> None:
        """A row whose version or digest is not what this page gave (its seal
        does not match) is an altered form, not a change of the evidence."""
        altered = False
        for pk in self.field_ids:
            names = (f"version_{pk}", f"digest_{pk}", f"seal_{pk}")
            if any(name in self.errors for name in names):
                altered = True  # hidden fields only the page fills
                continue
            expected = seal(
                pk,
                cleaned.get(f"version_{pk}"),
                cleaned.get(f"digest_{pk}"),
                pk in self.unknown_commit,
            )
            if not constant_time_compare(expected, str(cleaned.get(f"seal_{pk}", ""))):
                altered = True
                self.add_error(
                    f"digest_{pk}",
                    forms.ValidationError(
                        "not the version and evidence digest this page gave; the form was altered",
                        code="altered",
                    ),
                )
        if altered:
            self.add_error(None, forms.ValidationError(ALTERED, code="altered"))

    def _clean_recovery(self, cleaned: dict[str, Any], acting: set[int]) -> None:
        """The disposition and the category belong together: MARK_FAILED needs a
        category that fits every row (UNKNOWN_COMMIT exactly for the rows with
        the marker), ABANDON takes none; marking an unknown commit FAILED needs
        the reason code UNKNOWN_EFFECT."""
        disposition = cleaned.get("disposition")
        category = cleaned.get("failure_category") or ""
        marked = self.unknown_commit & acting
        plain = acting - marked
        if disposition == ABANDON and category:
            self._category_error(
                "ABANDON records no failure category (the execution keeps its own): clear "
                "the category, or choose MARK_FAILED.",
                "category_with_abandon",
            )
        if disposition != MARK_FAILED:
            return
        offered = {c.value for c, _ in self.offered_categories}
        if not category:
            self._category_error(
                "Choose the failure category the execution is marked FAILED with.",
                "required",
            )
        elif category == C.UNKNOWN_COMMIT.value and plain:
            one = len(plain) == 1
            self._category_error(
                f"UNKNOWN_COMMIT says a commit's outcome is unknown, and {_rows(plain)} "
                f"carr{'ies' if one else 'y'} no unknown-commit marker: choose another "
                "category (STALE_RECOVERED when the worker is simply gone).",
                "unknown_commit_without_marker",
            )
        elif category != C.UNKNOWN_COMMIT.value and marked:
            one = len(marked) == 1
            self._category_error(
                f"{_rows(marked)} carr{'ies' if one else 'y'} the unknown-commit marker: "
                f"{'it is' if one else 'they are'} marked FAILED only as UNKNOWN_COMMIT (its "
                "outcome must not be guessed) — choose UNKNOWN_COMMIT"
                + (", recover the other rows on their own page" if plain else "")
                + ", or choose ABANDON.",
                "unknown_commit_required",
            )
        elif category not in offered:
            choices = ", ".join(sorted(offered))
            self._category_error(
                f"{category} is not a category an operator's recovery records: choose one "
                f"of {choices}.",
                "category_not_offered",
            )
        if "reason_code" in cleaned and requires_unknown_effect(
            RecoveryDisposition.MARK_FAILED, bool(marked), cleaned["reason_code"]
        ):
            one = len(marked) == 1
            self.add_error(
                "reason_code",
                forms.ValidationError(
                    f"{_rows(marked)} carr{'ies' if one else 'y'} the unknown-commit marker: "
                    f"marking {'it' if one else 'them'} FAILED needs the reason code "
                    f"{UNKNOWN_EFFECT} (the effect may have happened), or choose ABANDON.",
                    code="unresolved_recovery_required",
                ),
            )

    def _category_error(self, message: str, code: str) -> None:
        if "failure_category" not in self.errors:
            self.add_error("failure_category", forms.ValidationError(message, code=code))

    def _clean_override(self, cleaned: dict[str, Any]) -> None:
        """A ticked override needs a valid note (the domain's rule); a note
        without the override is refused rather than silently dropped."""
        ticked = bool(cleaned.get("override"))
        note = one_paragraph(cleaned.get("override_note") or "")
        cleaned["override_note"] = note
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
    def offered_categories(self) -> list[tuple[FailureCategory, str]]:
        """The categories offered for MARK_FAILED: :data:`OPERATOR_CATEGORIES`,
        and UNKNOWN_COMMIT when a row carries the unknown-commit marker."""
        offered = list(OPERATOR_CATEGORIES.items())
        if self.unknown_commit:
            offered.insert(0, (C.UNKNOWN_COMMIT, UNKNOWN_COMMIT_MEANING))
        return offered

    @property
    def missing(self) -> list[str]:
        """The decisions left unmade in a submitted page (only after
        ``is_valid()``): what the page says is still to choose."""
        names = {
            "disposition": "a disposition",
            "failure_category": "a failure category",
            "reason_code": "a reason code",
        }
        errors = self.errors.as_data()
        return [
            words
            for name, words in names.items()
            if any(error.code == "required" for error in errors.get(name, []))
        ]

    def chosen_disposition(self) -> str | None:
        """The disposition the page was posted with, if it is one (for the
        button's text and the rows' outcome when the page is shown again)."""
        if not self.is_bound:
            return None
        value = self.data.get("disposition")
        return value if value in (MARK_FAILED, ABANDON) else None

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
        names = (f"operation_{pk}", f"version_{pk}", f"digest_{pk}", f"seal_{pk}")
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
