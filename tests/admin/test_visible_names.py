"""A name stored before names refused invisible characters, and a partition key
(which may hold them, contract §2.4.1), show what they hold in the console: each
Unicode format character or line/paragraph separator is written as its escape
(``job\\u202eevil``) in lists, detail pages and titles (decision 201)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from oxide_batch import models
from tests.admin.test_actions import _confirm, _url

DISGUISED = "job\u202eevil"
SHOWN = "job\\u202eevil"
KEY = "eu\u200bwest\u2028"
KEY_SHOWN = "eu\\u200bwest\\u2028"


@pytest.fixture
def disguised(demo):
    """A partition, its step, execution and instance, renamed in place as rows
    written before the rule would be."""
    partition = models.StepPartition.objects.select_related("step_execution").first()
    assert partition is not None
    step = partition.step_execution
    models.JobInstance.objects.filter(pk=step.job_instance_id).update(job_name=DISGUISED)
    models.JobExecution.objects.filter(pk=step.job_execution_id).update(job_name=DISGUISED)
    models.StepExecution.objects.filter(pk=step.pk).update(step_name=f"load\u2029{DISGUISED}")
    models.StepPartition.objects.filter(pk=partition.pk).update(partition_key=KEY)
    return {
        "instance": step.job_instance_id,
        "execution": step.job_execution_id,
        "step": step.pk,
        "partition": partition.pk,
    }


def _pages(ids: dict[str, int]) -> list[str]:
    return [
        reverse("admin:oxide_batch_jobinstance_changelist"),
        reverse("admin:oxide_batch_jobinstance_change", args=[ids["instance"]]),
        reverse("admin:oxide_batch_jobexecution_changelist"),
        reverse("admin:oxide_batch_jobexecution_changelist") + "?q=" + "job%E2%80%AEevil",
        reverse("admin:oxide_batch_jobexecution_change", args=[ids["execution"]]),
        reverse("admin:oxide_batch_stepexecution_changelist"),
        reverse("admin:oxide_batch_stepexecution_change", args=[ids["step"]]),
        reverse("admin:oxide_batch_steppartition_changelist"),
        reverse("admin:oxide_batch_steppartition_change", args=[ids["partition"]]),
        reverse("admin:oxide_batch_dashboard"),
    ]


def test_a_stored_invisible_character_is_shown_escaped_on_every_page(viewer_client, disguised):
    for page in _pages(disguised):
        response = viewer_client.get(page)
        assert response.status_code == 200, page
        text = response.content.decode()
        for character in ("\u202e", "\u200b", "\u2028", "\u2029"):
            assert character not in text, (page, hex(ord(character)))
    execution = viewer_client.get(_pages(disguised)[4]).content.decode()
    assert SHOWN in execution
    title = execution.split("<title>", 1)[1].split("</title>", 1)[0]
    assert "\u202e" not in title
    partition = viewer_client.get(_pages(disguised)[8]).content.decode()
    assert KEY_SHOWN in partition
    listed = viewer_client.get(_pages(disguised)[2]).content.decode()
    assert SHOWN in listed


def test_a_page_without_such_characters_is_unchanged(viewer_client, demo):
    page = reverse("admin:oxide_batch_jobexecution_changelist")
    text = viewer_client.get(page).content.decode()
    assert "\\u" not in text


def test_a_console_form_refuses_an_invisible_reason_code(operator_client, demo):
    stopped = models.JobExecution.objects.filter(status="STOPPED").order_by("pk").first()
    assert stopped is not None
    url = _url("jobexecution", "abandon", stopped.pk)
    _, form = _confirm(operator_client, url, reason_code="NOT\u202eNEEDED")
    response = operator_client.post(url, form)
    assert response.status_code == 200
    text = response.content.decode()
    assert "Nothing was applied" in text
    assert "Use only A-Z 0-9 _" in text
    assert models.JobExecution.objects.get(pk=stopped.pk).status == "STOPPED"
