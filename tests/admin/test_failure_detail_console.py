"""A failure's detail in the console (issue 40 points 1, 5): the case file shows
the type, the scrubbed message and the traceback (collapsed, escaped) to
whoever may read payloads and the type alone to a viewer; the execution list
and the dashboard's newest failures show the type and the message's first
line, the list filters by exception type — each page at a constant number of
queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.status import FailureCategory
from oxide_batch.repository import DjangoJobRepository, FixedClock
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
TRACEBACK = (
    'Traceback (most recent call last):\n  File "job.py", line 9, in <module>\n'
    "ValueError: bad row 17: password=hunter2 <script>alert(1)</script>"
)


def failed(type_: str = "ValueError", run: str = "2026-07-29", detail: bool = True) -> int:
    repo = DjangoJobRepository(FixedClock(datetime.now(UTC) - timedelta(minutes=5)))
    execution = move(repo, launch(repo, key("detail_job", run)), S.STARTED)
    sent = FailureDetail(type_, "bad row 17: password=hunter2\nsecond line", TRACEBACK)
    failure = FailureSummary(FailureCategory.USER_COMPONENT, 17, sent if detail else None)
    with repo.begin() as uow:
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.FAILED, failure=failure)
        )
        uow.commit()
    return execution.id


def page(client, execution_id: int) -> str:
    response = client.get(reverse("admin:oxide_batch_jobexecution_change", args=[execution_id]))
    assert response.status_code == 200
    return str(response.content.decode()).split('<section class="ob-case"', 1)[1]


def test_the_case_file_shows_the_scrubbed_detail_and_the_traceback_collapsed(
    operator_client, settings
):
    settings.OXIDE_BATCH_FAILURE_DETAIL = "traceback"
    html = page(operator_client, failed())
    assert "<dt>Why it failed</dt>" in html
    assert "<code>ValueError</code>" in html
    assert "bad row 17: password=[redacted]\nsecond line" in html
    assert "hunter2" not in html
    assert '<details class="ob-traceback"><summary>Traceback</summary>' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)" not in html


def test_a_viewer_sees_the_type_alone(viewer_client, settings):
    settings.OXIDE_BATCH_FAILURE_DETAIL = "traceback"
    html = page(viewer_client, failed())
    assert "<code>ValueError</code>" in html
    assert "bad row 17" not in html
    assert "Traceback" not in html
    assert "shown only with view_batch_payload" in html


def test_without_a_kept_detail_there_is_no_why_and_no_more_queries(operator_client):
    bare, detailed = failed(run="2026-07-30", detail=False), failed(run="2026-07-31")
    counts = []
    for execution_id in (bare, detailed):
        page(operator_client, execution_id)  # warm
        with CaptureQueriesContext(connection) as queries:
            html = page(operator_client, execution_id)
        counts.append(len(queries.captured_queries))
        assert ("<dt>Why it failed</dt>" in html) is (execution_id == detailed)
    assert counts[0] == counts[1]


def changelist(client, **query: str) -> tuple[str, int]:
    url = reverse("admin:oxide_batch_jobexecution_changelist")
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url, query)
    assert response.status_code == 200
    return response.content.decode(), len(queries.captured_queries)


def test_the_list_shows_the_type_and_first_line_and_filters_by_type(operator_client, viewer_client):
    failed("ValueError", "2026-08-01")
    key_error = failed("KeyError", "2026-08-02")
    html, _ = changelist(operator_client)
    assert "<code>ValueError</code>: bad row 17: password=[redacted]" in html
    assert "second line" not in html
    assert 'title="exception type"' in html or "By exception type" in html
    only, _ = changelist(operator_client, failure_type="KeyError")
    assert f"/{key_error}/change/" in only
    assert "<code>ValueError</code>" not in only
    viewer_html, _ = changelist(viewer_client)
    assert "<code>ValueError</code>" in viewer_html
    assert "bad row 17" not in viewer_html


def test_the_list_reads_a_constant_number_of_queries(operator_client):
    failed("ValueError", "2026-08-03")
    changelist(operator_client)
    _, before = changelist(operator_client)
    for index in range(4):
        failed(f"Error{index}", f"2026-09-0{index + 1}")
    _, after = changelist(operator_client)
    assert after == before
    _, filtered = changelist(operator_client, failure_type="Error1")
    assert filtered == before


def test_the_dashboard_shows_the_newest_failures_at_a_constant_cost(operator_client, viewer_client):
    url = reverse("admin:oxide_batch_dashboard")
    failed("ValueError", "2026-08-04")
    with CaptureQueriesContext(connection) as queries:
        html = operator_client.get(url).content.decode()
    before = len(queries.captured_queries)
    assert "The newest failures, and why" in html
    assert "<code>ValueError</code>: bad row 17: password=[redacted]" in html
    assert "bad row 17" not in viewer_client.get(url).content.decode()
    for index in range(6):
        failed("OSError", f"2026-10-0{index + 1}")
    with CaptureQueriesContext(connection) as queries:
        operator_client.get(url)
    assert len(queries.captured_queries) == before


def test_the_dashboard_names_each_newest_failure_s_host_and_links_its_logs(operator_client):
    """Issue 40 point 5: the dashboard's newest failures show the host that ran
    the execution and "Open the logs" built from the template, from the rows'
    own columns — no query more than without them."""
    url = reverse("admin:oxide_batch_dashboard")
    template = "https://logs.example.com/?q={failure_id}&host={host}&from={started_at}"
    execution_id = failed("ValueError", "2026-08-05")
    with CaptureQueriesContext(connection) as queries:
        operator_client.get(url)
    without = len(queries.captured_queries)
    models.JobExecution.objects.filter(pk=execution_id).update(worker_host="worker 3&a")
    with (
        override_settings(OXIDE_BATCH_FAILURE_URL_TEMPLATE=template),
        CaptureQueriesContext(connection) as queries,
    ):
        html = operator_client.get(url).content.decode()
    assert len(queries.captured_queries) == without
    newest = html.split('id="ob-newest-failures"', 1)[1].split("</table>", 1)[0]
    assert "<td>worker 3&amp;a</td>" in newest
    assert 'href="https://logs.example.com/?q=17&amp;host=worker%203%26a&amp;from=' in newest
    assert ">Open the logs</a>" in newest
    # Without a template the column says so, and links nothing.
    html = operator_client.get(url).content.decode()
    newest = html.split('id="ob-newest-failures"', 1)[1].split("</table>", 1)[0]
    assert "Open the logs" not in newest
