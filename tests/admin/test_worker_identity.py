"""Who ran it, in the console (decisions 310, 311, 316): the case file's owner
line names the claimant on its host with its pid, client and worker name; the
execution list shows the host and is searched by ``host:`` and ``worker:`` on
partial indexes, its query count constant; every failure shown links "Open the
logs" with the template's fields filled in and escaped."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.failures import rfc3339
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.selectors.console import worker_search
from tests.helpers import key, move

pytestmark = pytest.mark.django_db
S = BatchStatus
TEMPLATE = (
    "https://logs.example/search?host={host}&from={started_at}&to={ended_at}"
    "&id={failure_id}&step={step_execution_id}&job={job_name}"
)


def _billing() -> models.JobExecution:
    """The demo's first billing attempt: claimed by worker-3 (pid 4122), failed."""
    return models.JobExecution.objects.get(job_name="billing_export", attempt=1)


def _case(client, execution_id: int) -> str:
    response = client.get(reverse("admin:oxide_batch_jobexecution_change", args=[execution_id]))
    assert response.status_code == 200
    page: str = response.content.decode()
    return page.split('<section class="ob-case"', 1)[1].split("</section>", 1)[0]


def test_the_case_file_names_the_owner_on_its_host_with_pid_and_client(admin_client, demo):
    billing = _billing()
    case = _case(admin_client, billing.pk)
    owner = case.split("<dt>Owner</dt><dd>", 1)[1].split("</dd>", 1)[0]
    assert 'on <strong class="ob-host">worker-3</strong>, pid <strong>4122</strong>' in owner
    assert f", oxide-batch {billing.worker_client.split()[-1]}" in owner
    assert "(worker <strong>billing-1</strong>)" in owner
    assert "Owner recorded" not in case


def test_an_owner_without_identity_keeps_the_claimant_line(admin_client, demo, repo):
    with repo.begin() as uow:
        launched = uow.launch_job_execution(key(job="plain"), bytes(16)).execution
        uow.commit()
    owner = _case(admin_client, launched.id).split("<dt>Owner</dt><dd>", 1)[1]
    assert owner.startswith("owner recorded (no runtime user), ")
    assert "ob-host" not in owner.split("</dd>", 1)[0]


def test_the_failure_links_the_logs_with_every_field_escaped(admin_client, demo):
    billing = _billing()
    models.JobExecution.objects.filter(pk=billing.pk).update(worker_host="rack 1&2")
    billing.refresh_from_db()
    with override_settings(OXIDE_BATCH_FAILURE_URL_TEMPLATE=TEMPLATE):
        case = _case(admin_client, billing.pk)
        step = models.StepExecution.objects.get(job_execution=billing, status="FAILED")
        models.StepExecution.objects.filter(pk=step.pk).update(worker_host="w/9")
        step_page = admin_client.get(
            reverse("admin:oxide_batch_stepexecution_change", args=[step.pk])
        ).content.decode()
    expected = (
        f"https://logs.example/search?host=rack%201%262"
        f"&from={quote(rfc3339(billing.started_at) or '', safe='')}"
        f"&to={quote(rfc3339(billing.ended_at) or '', safe='')}"
        f"&id={billing.failure_id}&step=&job=billing_export"
    )
    assert f'href="{html.escape(expected)}"' in case
    assert ">Open the logs</a>" in case
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", rfc3339(billing.started_at) or ""
    )
    step_url = (
        f"https://logs.example/search?host=w%2F9"
        f"&from={quote(rfc3339(step.started_at) or '', safe='')}"
        f"&to={quote(rfc3339(step.ended_at) or '', safe='')}"
        f"&id={step.failure_id}&step={step.pk}&job=billing_export"
    )
    assert f'href="{html.escape(step_url)}"' in step_page


def test_without_a_template_the_failure_says_how_to_link_it(admin_client, demo):
    case = _case(admin_client, _billing().pk)
    assert "Open the logs" not in case
    assert "set OXIDE_BATCH_FAILURE_URL_TEMPLATE to link it" in case


def _rows(client, query: dict[str, str]) -> tuple[str, int]:
    url = reverse("admin:oxide_batch_jobexecution_changelist")
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, query)
    assert response.status_code == 200
    page = response.content.decode()
    if 'id="result_list"' not in page:
        return "", len(captured)
    return page[page.index('id="result_list"') :].split("</table>", 1)[0], len(captured)


@pytest.mark.parametrize("term", ["host:worker-3", "worker:billing-1"])
def test_the_list_is_searched_by_host_and_worker_name_in_constant_queries(
    admin_client, demo, repo, term
):
    _rows(admin_client, {"q": term})  # warm the process-wide caches
    rows, queries = _rows(admin_client, {"q": term})
    assert f">{_billing().pk}</a>" in rows
    assert "on worker-3" in rows  # the owner mark names the host
    assert "nightly_import" not in rows
    # More matching executions: the same queries.
    for index in range(4):
        with repo.begin() as uow:
            uow.launch_job_execution(
                key(job=f"more_{index}"),
                bytes(16),
                worker=WorkerIdentity(host="worker-3", name="billing-1"),
            )
            uow.commit()
    more, again = _rows(admin_client, {"q": term})
    assert again == queries
    assert more.count("on worker-3") == 5
    nothing, _ = _rows(admin_client, {"q": "host:nowhere"})
    assert "worker-3" not in nothing


def test_an_empty_worker_search_finds_nothing(demo):
    queryset = models.JobExecution.objects.all()
    assert not worker_search(queryset, "host:").exists()
    assert worker_search(queryset, "billing_export") is None


@pytest.mark.postgres
def test_the_host_and_worker_searches_read_their_partial_indexes(repo, clock):
    instance_rows = []
    with repo.begin() as uow:
        for index in range(3):
            instance_rows.append(
                uow.launch_job_execution(
                    key(job=f"job_{index}"),
                    bytes(16),
                    worker=WorkerIdentity(host=f"worker-{index}", name=f"w-{index}"),
                ).execution
            )
        uow.commit()
    first = instance_rows[0]
    now = clock.now()
    models.JobExecution.objects.bulk_create(
        [
            models.JobExecution(
                job_instance_id=first.job_instance_id,
                job_name=first.job_name,
                attempt=attempt,
                definition_id=first.definition_id,
                status="COMPLETED",
                exit_code="COMPLETED",
                created_at=now - timedelta(seconds=attempt),
                started_at=now - timedelta(seconds=attempt),
                ended_at=now,
                updated_at=now,
                last_activity_at=now,
            )
            for attempt in range(2, 3002)
        ],
        batch_size=500,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE ob_job_execution")
    base = models.JobExecution.objects.order_by("-created_at", "-id")
    for term, index in (
        ("host:worker-1", "ob_execution_worker_host"),
        ("worker:w-1", "ob_execution_worker_name"),
    ):
        found = worker_search(base, term)
        assert found is not None
        plan = found[:100].explain()
        assert index in plan, plan
        assert "Seq Scan on ob_job_execution" not in plan, plan


def test_the_failed_list_shows_the_host_and_the_log_link_in_constant_queries(
    admin_client, demo, more_rows, repo
):
    billing = _billing()
    query = {"status__exact": "FAILED"}
    with override_settings(OXIDE_BATCH_FAILURE_URL_TEMPLATE=TEMPLATE):
        _rows(admin_client, query)  # warm the process-wide caches
        rows, queries = _rows(admin_client, query)
        row = rows.split(f">{billing.pk}</a>", 1)[1].split("</tr>", 1)[0]
        assert "on worker-3" in row
        assert "Open the logs</a>" in row
        assert "host=worker-3" in row
        more_rows(3)
        with repo.begin() as uow:
            failed = uow.launch_job_execution(
                key(job="more_failed"), bytes(16), worker=WorkerIdentity(host="worker-4")
            ).execution
            uow.commit()
        move(repo, failed, S.FAILED)
        more, again = _rows(admin_client, query)
        assert again == queries
        assert more.count("Open the logs</a>") == rows.count("Open the logs</a>") + 1
