"""The console sets and clears a job's run deadlines as ``batch_deadlines``
does (issue 41): the same service parses and validates (``2h``, at least 1s,
``HH:MM``, an IANA zone), a refusal is an error beside its field with nothing
written, and each change is audited (``JobDeadlineChange``) with the operator
as actor. Who may not manage notifications is refused; a forged POST without
its CSRF token is refused; a deadline cleared or set again meanwhile is said,
never a 500."""

from __future__ import annotations

from datetime import time
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from oxide_batch import models
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.deadlines import Deadlines
from tests.admin.test_notification_rule_forms import operator_without_notifications
from tests.admin.test_notifications_console import observed

pytestmark = pytest.mark.django_db


def set_url() -> str:
    return reverse("admin:oxide_batch_jobdeadline_set")


def clear_url(row: models.JobDeadline) -> str:
    return reverse("admin:oxide_batch_jobdeadline_act", args=[row.pk])


def fields(**given: str) -> dict[str, Any]:
    return {
        "job_name": "nightly_import",
        "max_duration": "",
        "expect_every": "",
        "by": "",
        "tz": "",
    } | given


def written() -> tuple[int, int]:
    return models.JobDeadline.objects.count(), models.JobDeadlineChange.objects.count()


def test_an_operator_sets_deadlines_audited_as_the_command_does(operator_client):
    listing = operator_client.get(reverse("admin:oxide_batch_jobdeadline_changelist"))
    assert set_url() in listing.content.decode()
    assert operator_client.get(set_url()).status_code == 200
    given = fields(max_duration="2h", expect_every="1d", by="06:00", tz="Europe/Paris")
    done = operator_client.post(set_url(), given, follow=True)
    row = models.JobDeadline.objects.get(job_name="nightly_import")
    assert done.redirect_chain[-1][0] == reverse(
        "admin:oxide_batch_jobdeadline_change", args=[row.pk]
    )
    assert "Deadlines of nightly_import set (audited)" in done.content.decode()
    assert (row.max_duration_ms, row.expect_every_ms) == (2 * 3600_000, 86400_000)
    assert (row.by_time, row.zone) == (time(6, 0), "Europe/Paris")
    change = models.JobDeadlineChange.objects.get()
    assert (change.action, change.actor) == ("SET", "otto")
    assert change.details == {
        "max_duration_seconds": 7200.0,
        "expect_every_seconds": 86400.0,
        "by": "06:00",
        "tz": "Europe/Paris",
    }


def test_the_form_changes_a_jobs_deadlines_filled_with_what_they_are(operator_client):
    call_command("batch_deadlines", "set", "nightly_import", "--max-duration", "90m")
    row = models.JobDeadline.objects.get()
    detail = operator_client.get(reverse("admin:oxide_batch_jobdeadline_change", args=[row.pk]))
    change = set_url() + "?job=nightly_import"
    assert change in detail.content.decode()
    form = operator_client.get(change).context["form"]
    assert form.initial == {
        "job_name": "nightly_import",
        "max_duration": "90m",
        "expect_every": "",
        "by": "",
        "tz": "",
    }
    operator_client.post(set_url(), fields(expect_every="12h"))
    row.refresh_from_db()
    assert (row.max_duration_ms, row.expect_every_ms) == (None, 12 * 3600_000)  # replaced
    assert [c.action for c in models.JobDeadlineChange.objects.order_by("id")] == ["SET", "SET"]


REFUSALS = [
    ("max_duration", {"max_duration": "2 hours"}, "expected e.g. 90s"),
    ("max_duration", {"max_duration": "0s"}, "1s to ten years"),
    ("max_duration", {"max_duration": "900ms"}, "1s to ten years"),
    ("expect_every", {"expect_every": "36h", "by": "06:00"}, "whole number of days"),
    ("by", {"max_duration": "1h", "by": "06:00"}, "only with --expect-every"),
    ("by", {"expect_every": "1d", "by": "6am"}, "expected HH:MM"),
    ("tz", {"expect_every": "1d", "by": "06:00", "tz": "Mars/Olympus"}, "unknown time zone"),
    ("tz", {"expect_every": "1d", "tz": "UTC"}, "only with --by"),
    (None, {}, "give --max-duration, --expect-every or both"),
    ("job_name", {"job_name": "", "max_duration": "1h"}, "This field is required"),
    ("job_name", {"job_name": " nightly", "max_duration": "1h"}, "whitespace"),
    ("job_name", {"job_name": "night\u200bly", "max_duration": "1h"}, "invisible"),
]


@pytest.mark.parametrize(
    ("field", "given", "said"), REFUSALS, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(REFUSALS)]
)
def test_a_refused_field_is_an_error_beside_it_and_nothing_is_written(
    operator_client, field, given, said
):
    before = written()
    page = operator_client.post(set_url(), fields(**given))
    assert page.status_code == 200
    assert "Nothing was written" in page.content.decode()
    errors = page.context["form"].errors
    key = field or "__all__"
    assert key in errors, errors
    assert said in " ".join(errors[key]), errors
    assert written() == before


def test_clearing_is_confirmed_audited_and_goes_back_to_the_list(operator_client):
    call_command("batch_deadlines", "set", "nightly_import", "--max-duration", "2h")
    row = models.JobDeadline.objects.get()
    page = operator_client.get(clear_url(row)).content.decode()
    assert "Clear the deadlines of nightly_import" in page
    done = operator_client.post(clear_url(row), {"observed": observed(page)}, follow=True)
    assert done.redirect_chain[-1][0] == reverse("admin:oxide_batch_jobdeadline_changelist")
    assert "Deadlines of nightly_import cleared (audited)" in done.content.decode()
    assert not models.JobDeadline.objects.exists()
    last = models.JobDeadlineChange.objects.order_by("-id")[0]
    assert (last.action, last.actor) == ("CLEAR", "otto")


def test_a_deadline_set_again_or_cleared_meanwhile_is_said_never_a_500(operator_client, clock):
    call_command("batch_deadlines", "set", "nightly_import", "--max-duration", "2h")
    row = models.JobDeadline.objects.get()
    seen = observed(operator_client.get(clear_url(row)).content.decode())
    # Set again by someone else: its periods restarted, the page is stale.
    Deadlines(clock=clock).set("nightly_import", by=ChangeBy("other"), max_duration="3h")
    stale = operator_client.post(clear_url(row), {"observed": seen}, follow=True)
    assert "Refused (stale)" in stale.content.decode()
    assert models.JobDeadline.objects.exists()
    Deadlines().clear("nightly_import", by=ChangeBy("other"))
    gone = operator_client.post(clear_url(row), {"observed": seen}, follow=True)
    assert gone.status_code == 200
    assert f"deadline #{row.pk} is no longer there" in gone.content.decode()
    assert operator_client.get(clear_url(row)).status_code == 404
    assert models.JobDeadlineChange.objects.filter(action="CLEAR", actor="otto").count() == 0


def test_who_may_not_manage_sees_no_button_and_is_refused(viewer_client):
    call_command("batch_deadlines", "set", "nightly_import", "--max-duration", "2h")
    row = models.JobDeadline.objects.get()
    before = written()
    listing = reverse("admin:oxide_batch_jobdeadline_changelist")
    detail = reverse("admin:oxide_batch_jobdeadline_change", args=[row.pk])
    for client in (viewer_client, operator_without_notifications()):
        assert set_url() not in client.get(listing).content.decode()
        assert "/act/" not in client.get(detail).content.decode()
        assert client.get(set_url()).status_code == 403
        assert client.post(set_url(), fields(max_duration="1h")).status_code == 403
        assert client.get(clear_url(row)).status_code == 403
        assert client.post(clear_url(row), {"observed": "x"}).status_code == 403
    anonymous = Client()
    assert anonymous.post(set_url(), fields(max_duration="1h")).status_code == 302
    assert anonymous.post(clear_url(row), {"observed": "x"}).status_code == 302
    assert written() == before


def test_a_forged_post_without_its_csrf_token_is_refused(operator_client):
    strict = Client(enforce_csrf_checks=True)
    strict.cookies = operator_client.cookies
    assert strict.post(set_url(), fields(max_duration="1h")).status_code == 403
    assert written() == (0, 0)


def test_setting_and_clearing_cost_the_same_queries_whatever_exists(operator_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def posted(url: str, data: dict[str, Any]) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.post(url, data).status_code == 302
        return len(captured.captured_queries)

    def rounds(job: str) -> tuple[int, int, int]:
        made = posted(set_url(), fields(job_name=job, max_duration="1h"))
        replaced = posted(set_url(), fields(job_name=job, expect_every="1d", by="06:00"))
        row = models.JobDeadline.objects.get(job_name=job)
        seen = observed(operator_client.get(clear_url(row)).content.decode())
        return made, replaced, posted(clear_url(row), {"observed": seen})

    first = rounds("first")
    for index in range(6):
        call_command("batch_deadlines", "set", f"job{index}", "--max-duration", "1h")
    assert rounds("second") == first
