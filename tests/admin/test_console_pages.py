"""What the inspection pages and the dashboard show."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from oxide_batch import models
from oxide_batch.services.bootstrap import operator_service, retention_service
from tests.helpers import recover_as_proposed

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


@pytest.mark.standalone
def test_admin_index_links_the_dashboard(admin_client):
    page = admin_client.get(reverse("admin:index"))
    assert reverse("admin:oxide_batch_dashboard").encode() in page.content


def _recovered() -> tuple[models.JobExecution, models.RecoveryDecision]:
    from oxide_batch.repository import DjangoJobRepository
    from oxide_batch.services.audit import Actor

    stale = models.JobExecution.objects.get(job_name="customer_sync")
    service = operator_service(DjangoJobRepository())
    recover_as_proposed(service, stale.pk, actor=Actor("opal"), operation_id="cross-links-1")
    return stale, models.RecoveryDecision.objects.get(job_execution_id=stale.pk)


def test_a_decision_and_its_request_link_each_other_and_the_execution(admin_client, demo):
    stale, decision = _recovered()
    request = models.OperatorRequest.objects.get(action="RECOVER", job_execution_id=stale.pk)
    execution_url = reverse("admin:oxide_batch_jobexecution_change", args=[stale.pk])
    decision_url = reverse("admin:oxide_batch_recoverydecision_change", args=[decision.pk])
    request_url = reverse("admin:oxide_batch_operatorrequest_change", args=[request.pk])
    page = admin_client.get(decision_url).content.decode()
    assert f'href="{request_url}"' in page
    assert f'href="{execution_url}"' in page
    page = admin_client.get(request_url).content.decode()
    assert f'href="{decision_url}"' in page
    assert f'href="{execution_url}"' in page


def test_a_partition_links_its_worker_step(admin_client, demo):
    partition = models.StepPartition.objects.exclude(worker_step_execution_id=None)[0]
    page = admin_client.get(
        reverse("admin:oxide_batch_steppartition_change", args=[partition.pk])
    ).content.decode()
    worker = reverse(
        "admin:oxide_batch_stepexecution_change", args=[partition.worker_step_execution_id]
    )
    assert f'href="{worker}"' in page
    listing = admin_client.get(reverse("admin:oxide_batch_steppartition_changelist")).content
    assert worker.encode() in listing


@pytest.mark.parametrize(
    "name", ["recoverydecision", "operatorrequest", "retentionrecord", "flowdecision"]
)
def test_audit_times_are_utc_with_a_relative_reading(admin_client, demo, name):
    from oxide_batch.services.audit import Actor

    stale, _ = _recovered()
    retention_service().place_hold(
        stale.job_instance_id, actor=Actor("opal"), reason_code="AUDIT", operation_id="hold-1"
    )
    listing = admin_client.get(reverse(f"admin:oxide_batch_{name}_changelist")).content.decode()
    row = (
        {
            "recoverydecision": models.RecoveryDecision,
            "operatorrequest": models.OperatorRequest,
            "retentionrecord": models.RetentionRecord,
            "flowdecision": models.FlowDecision,
        }[name]
        .objects.order_by("pk")
        .first()
    )
    assert row is not None
    detail = admin_client.get(
        reverse(f"admin:oxide_batch_{name}_change", args=[row.pk])
    ).content.decode()
    for html in (listing, detail):
        assert " UTC</small>" in html
        assert not re.search(r"\b(a\.m\.|p\.m\.)", html)  # Django's locale default
