"""Which run is it? The console shows an instance's identifying parameters — the
value only for names in OXIDE_BATCH_VISIBLE_PARAMETERS, as the API does — and a
value that is not allowed never reaches any console page (issue 14 point 3)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings
from django.urls import reverse

from oxide_batch import models
from oxide_batch.demo.workload import Workload
from oxide_batch.domain import BatchStatus

SECRET = "s3cr3t-ACCOUNT-4711"
VISIBLE = frozenset({"business_date"})


@pytest.fixture
def stuck_run(db) -> models.JobExecution:
    """A STARTED run with a visible and a sensitive identifying parameter, a
    step left running, gone silent for an hour (so recovery is proposed)."""
    work = Workload(datetime.now(UTC) - timedelta(hours=1))
    execution = work.move(
        work.launch("nightly_billing", business_date="2026-07-29", account=SECRET),
        BatchStatus.STARTED,
    )
    work.run_steps(execution, ["charge"], last=BatchStatus.STARTED)
    return models.JobExecution.objects.get(pk=execution.id)


def pages(run: models.JobExecution) -> list[str]:
    step = models.StepExecution.objects.get(job_execution_id=run.pk)
    return [
        reverse("admin:oxide_batch_jobinstance_changelist"),
        reverse("admin:oxide_batch_jobinstance_change", args=[run.job_instance_id]),
        reverse("admin:oxide_batch_jobexecution_changelist"),
        reverse("admin:oxide_batch_jobexecution_changelist") + "?q=nightly_billing",
        reverse("admin:oxide_batch_jobexecution_changelist") + f"?q={run.pk}",
        reverse("admin:oxide_batch_jobexecution_changelist") + "?q=business_date%3D2026-07-29",
        reverse("admin:oxide_batch_jobexecution_changelist") + "?triage=unresolved",
        reverse("admin:oxide_batch_jobinstance_changelist") + "?q=business_date%3D2026-07-29",
        reverse("admin:oxide_batch_jobexecution_change", args=[run.pk]),
        reverse("admin:oxide_batch_stepexecution_changelist"),
        reverse("admin:oxide_batch_stepexecution_change", args=[step.pk]),
        reverse("admin:oxide_batch_dashboard"),
        reverse("admin:oxide_batch_jobexecution_act", args=["recover"]) + f"?ids={run.pk}",
        reverse("admin:oxide_batch_jobinstance_act", args=["hold"]) + f"?ids={run.job_instance_id}",
        reverse("admin:oxide_batch_operatorrequest_changelist"),
        reverse("admin:oxide_batch_retentionrecord_changelist"),
    ]


@override_settings(OXIDE_BATCH_VISIBLE_PARAMETERS=VISIBLE)
def test_allowed_values_are_shown_and_others_never_reach_a_page(admin_client, stuck_run):
    shown = 0
    for url in pages(stuck_run):
        response = admin_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert SECRET not in html, url
        shown += "business_date=<code>2026-07-29</code>" in html
    # Instance list (plain, searched) and page, execution list (unfiltered, by name,
    # by id, by parameter, unresolved) and page.
    assert shown >= 9
    page = admin_client.get(
        reverse("admin:oxide_batch_jobexecution_change", args=[stuck_run.pk])
    ).content.decode()
    assert "account <small>(string, value hidden)</small>" in page


def test_without_the_setting_no_value_is_shown(admin_client, stuck_run):
    for url in pages(stuck_run):
        html = admin_client.get(url).content.decode()
        assert SECRET not in html, url
        if "2026-07-29" not in url:  # a search echoes what was typed, nothing stored
            assert "2026-07-29" not in html, url
