"""What the inspection pages and the dashboard show."""

from __future__ import annotations

import pytest
from django.urls import reverse

from oxide_batch import models

pytestmark = pytest.mark.django_db


def test_execution_pages_say_status_counts_and_times(admin_client, demo):
    page = admin_client.get(reverse("admin:oxide_batch_jobexecution_changelist"))
    text = page.content.decode()
    assert 'class="ob-badge ob-bad" title="status UNKNOWN">UNKNOWN<' in text
    assert " ago</time>" in text
    assert " UTC</small>" in text
    crashed = models.JobExecution.objects.get(job_name="customer_sync")
    detail = admin_client.get(reverse("admin:oxide_batch_jobexecution_change", args=[crashed.pk]))
    text = detail.content.decode()
    assert "ecords (the steps&#x27; totals)" in text
    assert "owner recorded" in text or "no owner" in text
    for step in models.StepExecution.objects.filter(job_execution_id=crashed.pk):
        assert reverse("admin:oxide_batch_stepexecution_change", args=[step.pk]) in text


def test_instance_page_lists_attempts_and_hold(admin_client, demo):
    instance = models.JobInstance.objects.get(job_name="billing_export")
    page = admin_client.get(reverse("admin:oxide_batch_jobinstance_change", args=[instance.pk]))
    text = page.content.decode()
    assert "no hold" in text
    for execution in models.JobExecution.objects.filter(job_instance_id=instance.pk):
        assert reverse("admin:oxide_batch_jobexecution_change", args=[execution.pk]) in text


def _checkpointed_step() -> models.StepExecution:
    return models.StepExecution.objects.exclude(checkpoint=None).order_by("pk")[0]


def test_checkpoint_payload_only_with_view_batch_payload(admin_client, viewer_client, demo):
    step = _checkpointed_step()
    url = reverse("admin:oxide_batch_stepexecution_change", args=[step.pk])
    admin_text = admin_client.get(url).content.decode()
    viewer_text = viewer_client.get(url).content.decode()
    assert 'class="ob-payload"' in admin_text
    assert "verified" in admin_text
    assert 'class="ob-payload"' not in viewer_text
    assert "only with view_batch_payload" in viewer_text


def test_a_corrupt_checkpoint_says_corrupt(admin_client, demo):
    step = _checkpointed_step()
    models.StepExecution.objects.filter(pk=step.pk).update(checkpoint_checksum="0" * 64)
    page = admin_client.get(reverse("admin:oxide_batch_stepexecution_change", args=[step.pk]))
    assert page.status_code == 200
    assert b">corrupt<" in page.content


def _result_rows(page: str) -> str:
    """The changelist's result table (the filter sidebar lists every job name)."""
    return page[page.index('id="result_list"') :].split("</table>", 1)[0]


def test_search_by_id_and_job_name(admin_client, demo):
    url = reverse("admin:oxide_batch_jobexecution_changelist")
    execution = models.JobExecution.objects.get(job_name="ledger_post")
    by_id = _result_rows(admin_client.get(url, {"q": str(execution.pk)}).content.decode())
    by_name = _result_rows(admin_client.get(url, {"q": "nightly_import"}).content.decode())
    assert "ledger_post" in by_id
    assert "nightly_import" not in by_id
    assert "nightly_import" in by_name
    assert "ledger_post" not in by_name


def test_dashboard_pictures_have_text_alternatives(admin_client, demo):
    page = admin_client.get(reverse("admin:oxide_batch_dashboard"))
    text = page.content.decode()
    assert page.status_code == 200
    assert 'aria-label="Executions created per day by status' in text
    assert 'aria-label="Step timeline' in text
    assert 'aria-label="Partition grid' in text
    assert "<title>step " in text
    unknown = models.JobExecution.objects.get(status="UNKNOWN")
    assert (
        reverse("admin:oxide_batch_jobexecution_act", args=["recover"]) + f"?ids={unknown.pk}"
        in text
    )


def test_dashboard_for_a_viewer_has_no_recover_links(viewer_client, demo):
    page = viewer_client.get(reverse("admin:oxide_batch_dashboard"))
    assert page.status_code == 200
    assert b"ob-recover" not in page.content


def test_admin_index_links_the_dashboard(admin_client):
    page = admin_client.get(reverse("admin:index"))
    assert reverse("admin:oxide_batch_dashboard").encode() in page.content
