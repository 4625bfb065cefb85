"""The console leads from a redacted failure to its text (contract §5.5): every
category in words, the failure id as a link when OXIDE_BATCH_FAILURE_URL_TEMPLATE
is set, and a page that says nothing else is stored."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import override_settings
from django.urls import reverse

from oxide_batch import models
from oxide_batch.domain.failures import FAILURE_HELP
from oxide_batch.domain.status import FailureCategory

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = (
    "https://logs.example.com/search?q=failure_id:{failure_id}&job={job_name}&e={execution_id}"
)


def failed_execution() -> models.JobExecution:
    found = (
        models.JobExecution.objects.filter(failure_category__isnull=False).order_by("id").first()
    )
    assert found is not None, "the demo has a failed execution"
    return found


def page(client, model: str, pk: int) -> str:
    response = client.get(reverse(f"admin:oxide_batch_{model}_change", args=[pk]))
    assert response.status_code == 200
    return str(response.content.decode())


def test_an_execution_page_explains_the_failure_and_links_its_id(admin_client, demo):
    execution = failed_execution()
    assert execution is not None
    help_ = FAILURE_HELP[FailureCategory(execution.failure_category)]
    with override_settings(OXIDE_BATCH_FAILURE_URL_TEMPLATE=TEMPLATE):
        html = page(admin_client, "jobexecution", execution.pk)
    expected = TEMPLATE.format(
        failure_id=execution.failure_id, job_name=execution.job_name, execution_id=execution.pk
    ).replace("&", "&amp;")
    assert f'href="{expected}"' in html
    assert help_.meaning in html
    assert help_.action in html
    assert "Only the category and the id are stored" in html


def test_without_a_template_the_page_says_where_to_look(admin_client, demo):
    execution = failed_execution()
    html = page(admin_client, "jobexecution", execution.pk)
    assert f"failure id <code>{execution.failure_id}</code>" in html
    assert "OXIDE_BATCH_FAILURE_URL_TEMPLATE" in html
    assert "logs.example.com" not in html


def test_a_step_page_links_with_its_execution_and_job(admin_client, demo):
    step = models.StepExecution.objects.filter(failure_category__isnull=False).first()
    if step is None:
        pytest.skip("the demo has no failed step")
    with override_settings(OXIDE_BATCH_FAILURE_URL_TEMPLATE=TEMPLATE):
        html = page(admin_client, "stepexecution", step.pk)
    job_name = models.JobExecution.objects.get(pk=step.job_execution_id).job_name
    assert f"failure_id:{step.failure_id}&amp;job={job_name}&amp;e={step.job_execution_id}" in html


def test_the_dashboard_says_what_each_failure_category_means(admin_client, demo):
    html = admin_client.get(reverse("admin:oxide_batch_dashboard")).content.decode()
    execution = failed_execution()
    assert FAILURE_HELP[FailureCategory(execution.failure_category)].meaning in html


@pytest.mark.standalone
def test_a_bad_template_stops_the_app_with_a_clear_message():
    environment = {**os.environ, "OXIDE_BATCH_FAILURE_URL_TEMPLATE": "https://x.example/{oops}"}
    environment.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**environment, "SQLITE_PATH": os.devnull},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "OXIDE_BATCH_FAILURE_URL_TEMPLATE: unknown placeholder(s) {oops}" in result.stderr
