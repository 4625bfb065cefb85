"""Setting and clearing a job's run deadlines in the console (issue 41): a
form of what ``batch_deadlines set JOB`` takes — a maximum duration, and/or
a completion expected every period, optionally by a local time in a zone —
parsed and validated by the service the command calls (``Deadlines.set``:
``90s``/``15m``/``2h``/``1d``, at least 1s, ``HH:MM``, an IANA zone), which
replaces the job's deadlines and restarts its periods (audited ``SET``, the
logged-in user as actor). A refusal is an error beside the field it names,
nothing written. Clearing is an action behind the confirmation page
(``Deadlines.clear``, audited ``CLEAR``). Only ``manage_notifications``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.notify.confirm import NotifyAction, change_by, form_page, may_manage
from oxide_batch.domain.deadlines import DeadlineInvalid
from oxide_batch.domain.durations import duration_text
from oxide_batch.domain.errors import OxideBatchError
from oxide_batch.domain.names import NameKind, validate_new_name
from oxide_batch.services.deadlines import Deadlines


class DeadlineForm(forms.Form):
    """The fields as typed (empty: not given); every rule is the service's."""

    # Not stripped: the service refuses what the command and the API refuse.
    job_name = forms.CharField(label="Job name", max_length=128, strip=False)
    max_duration = forms.CharField(
        label="Maximum duration",
        required=False,
        max_length=20,
        strip=False,
        help_text="A run still active longer raises execution.overdue once: 90s, 15m, 2h, 1d.",
    )
    expect_every = forms.CharField(
        label="Expected to complete every",
        required=False,
        max_length=20,
        strip=False,
        help_text="No COMPLETED run in a period raises job.missing once per period.",
    )
    by = forms.CharField(
        label="By (HH:MM)",
        required=False,
        max_length=5,
        strip=False,
        help_text="Each period ends at this local time (then whole days).",
    )
    tz = forms.CharField(
        label="Time zone",
        required=False,
        max_length=64,
        strip=False,
        help_text="The zone of “by”, e.g. Europe/Paris (default UTC).",
    )

    def given(self, field: str) -> str | None:
        value: str = self.cleaned_data[field]
        return value or None

    def refuse(self, error: OxideBatchError) -> None:
        """The service's refusal beside the field it names (a job name's own
        refusal beside the job name; "give one of them" above the form)."""
        if isinstance(error, DeadlineInvalid):
            self.add_error(error.field if error.field in self.fields else None, error.reason)
        else:
            self.add_error("job_name", error.message)


def initial_of(job_name: str) -> dict[str, str]:
    """The form filled with the job's deadlines (one query), or just its name."""
    row = models.JobDeadline.objects.filter(job_name=job_name).first()
    if row is None:
        return {"job_name": job_name}

    def span(ms: int | None) -> str:
        return "" if ms is None else duration_text(timedelta(milliseconds=ms))

    return {
        "job_name": row.job_name,
        "max_duration": span(row.max_duration_ms),
        "expect_every": span(row.expect_every_ms),
        "by": "" if row.by_time is None else row.by_time.strftime("%H:%M"),
        "tz": row.zone if row.by_time is not None else "",
    }


def set_deadline_view(request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
    """GET: the form (``?job=NAME`` fills it with that job's deadlines);
    POST: the deadlines set, then the job's deadline page — or the form with
    its errors and nothing written."""
    if not may_manage(request):
        raise PermissionDenied
    if request.method == "POST":
        form = DeadlineForm(request.POST)
        if form.is_valid():
            try:
                job_name = validate_new_name(form.cleaned_data["job_name"], NameKind.JOB)
                rule = Deadlines().set(
                    job_name,
                    by=change_by(request),
                    max_duration=form.given("max_duration"),
                    expect_every=form.given("expect_every"),
                    at=form.given("by"),
                    zone=form.given("tz"),
                )
            except OxideBatchError as error:
                form.refuse(error)
            else:
                row = models.JobDeadline.objects.only("pk").get(job_name=rule.job_name)
                messages.success(
                    request,
                    f"Deadlines of {rule.job_name} set (audited); its periods start now.",
                )
                return HttpResponseRedirect(
                    reverse("admin:oxide_batch_jobdeadline_change", args=[row.pk])
                )
    else:
        job = request.GET.get("job", "")[:128]
        form = DeadlineForm(initial=initial_of(job) if job else None)
    return form_page(
        request,
        context,
        form,
        title="Set a job's deadlines",
        button="Set the deadlines",
        intro=(
            "Give a maximum duration, an expected completion period, or both; they "
            "replace the job's deadlines, if it has some, and its periods start now — "
            "as manage.py batch_deadlines set does it, audited with your name. The "
            "watchdog's pass raises the events."
        ),
    )


def _clear(request: HttpRequest, row: models.JobDeadline) -> str:
    Deadlines().clear(row.job_name, by=change_by(request))
    return f"Deadlines of {row.job_name} cleared (audited)."


CLEAR = NotifyAction(
    name="clear",
    title=lambda row: f"Clear the deadlines of {row.job_name}",
    explains=(
        "The job's deadlines are removed: no run of it is overdue and no period of it is "
        "missed from now on (events already raised stay, and are delivered). Its change "
        "audit keeps a CLEAR row."
    ),
    done=lambda row: None,
    observed=lambda row: row.set_at.isoformat(),
    apply=_clear,
    leaves=True,
)
