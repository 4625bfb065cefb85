"""The admin serves the metadata, read-only."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from oxide_batch import models

pytestmark = pytest.mark.django_db

MODELS = {
    "jobinstance": models.JobInstance,
    "jobexecution": models.JobExecution,
    "stepexecution": models.StepExecution,
    "recoverydecision": models.RecoveryDecision,
    "jobdefinition": models.JobDefinition,
    "definitionupgrade": models.DefinitionUpgrade,
    "steppartition": models.StepPartition,
    "flowdecision": models.FlowDecision,
}


@pytest.fixture
def demo():
    call_command("demo_workload", stdout=io.StringIO())


@pytest.mark.parametrize("name", MODELS)
def test_changelists_and_detail_pages_render(admin_client, demo, name):
    changelist = admin_client.get(reverse(f"admin:oxide_batch_{name}_changelist"))
    row = MODELS[name].objects.order_by("pk").first()
    detail = admin_client.get(reverse(f"admin:oxide_batch_{name}_change", args=[row.pk]))
    assert changelist.status_code == 200
    assert detail.status_code == 200


@pytest.mark.parametrize("name", MODELS)
def test_batch_rows_cannot_be_added_or_deleted_in_the_admin(admin_client, demo, name):
    row = MODELS[name].objects.order_by("pk").first()
    added = admin_client.get(reverse(f"admin:oxide_batch_{name}_add"))
    deleted = admin_client.post(
        reverse(f"admin:oxide_batch_{name}_delete", args=[row.pk]), {"post": "yes"}
    )
    assert (added.status_code, deleted.status_code) == (403, 403)
    assert MODELS[name].objects.filter(pk=row.pk).exists()


def test_parameter_values_and_evidence_digests_are_not_shown(admin_client, demo):
    instance = models.JobInstance.objects.get(job_name="billing_export")
    page = admin_client.get(reverse("admin:oxide_batch_jobinstance_change", args=[instance.pk]))
    assert b'"value"' not in page.content
    decision = models.RecoveryDecision.objects.get()
    page = admin_client.get(
        reverse("admin:oxide_batch_recoverydecision_change", args=[decision.pk])
    )
    assert decision.evidence_digest.encode() not in page.content


@pytest.mark.standalone
def test_the_admin_needs_a_login(client):
    assert client.get("/admin/").status_code == 302
