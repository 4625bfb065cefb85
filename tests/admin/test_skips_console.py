"""Skipped items in the console (issue 42 point 2): the step list's `skips`
column, the step page's skipped items, the case file's (a count, the first
ones with their step, a link to all), and the skip ledger's own list — the
message to whoever may read payloads, the type alone to a viewer — each page
at a number of queries that does not grow with the skips."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch.domain import BatchStatus
from oxide_batch.domain.execution import ExecutionCounts
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.skips import SkipEntry, SkipPhase
from oxide_batch.domain.status import FailureCategory
from oxide_batch.repository import DjangoJobRepository, FixedClock
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
CHUNK = ExecutionCounts(read=10, processed=10, written=8, committed=1)


def skipping_step(run: str = "2026-07-29", items: int = 3, name: str = "load") -> tuple[int, int]:
    """A STARTED step of a running execution whose one chunk skipped ``items``
    items (a process skip with a detail, then read skips); (execution, step)."""
    repo = DjangoJobRepository(FixedClock(datetime.now(UTC) - timedelta(minutes=5)))
    execution = move(repo, launch(repo, key("skip_job", run)), S.STARTED)
    detail = FailureDetail("ValueError", "bad amount <b>7</b>: password=hunter2\nsecond line")
    skips = [SkipEntry(SkipPhase.PROCESS, "row-1", FailureCategory.USER_COMPONENT, detail)]
    skips += [
        SkipEntry(SkipPhase.READ, f"line-{n}", FailureCategory.USER_COMPONENT)
        for n in range(2, items + 1)
    ]
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, name, started=True)
        uow.commit_chunk(step.id, step.version, CHUNK, skips=skips)
        uow.commit()
    return execution.id, step.id


def get(client, name: str, *args: int, query: str = "") -> str:
    response = client.get(reverse(f"admin:oxide_batch_{name}", args=list(args)) + query)
    assert response.status_code == 200
    return str(response.content.decode())


def queries_of(client, name: str, *args: int, query: str = "") -> int:
    get(client, name, *args, query=query)  # warm
    with CaptureQueriesContext(connection) as captured:
        get(client, name, *args, query=query)
    return len(captured.captured_queries)


def test_the_step_list_has_a_skips_column(operator_client):
    skipping_step(items=3)
    html = get(operator_client, "stepexecution_changelist")
    assert 'class="column-skips"' in html
    assert "3 (read 2, process 1)" in html


def test_the_step_page_lists_its_skipped_items(operator_client):
    _, step = skipping_step(items=3)
    html = get(operator_client, "stepexecution_change", step)
    assert "Skipped items" in html
    for header in ("phase", "item", "category", "type", "message", "chunk"):
        assert f'<th scope="col">{header}</th>' in html
    assert "row-1" in html
    assert "line-3" in html
    assert "<code>ValueError</code>" in html
    assert "bad amount &lt;b&gt;7&lt;/b&gt;: password=[redacted]" in html
    assert "hunter2" not in html
    assert "second line" not in html  # a table cell shows the first line


def test_a_viewer_sees_the_type_alone(viewer_client):
    execution, step = skipping_step(items=2)
    for html in (
        get(viewer_client, "stepexecution_change", step),
        get(viewer_client, "jobexecution_change", execution),
        get(viewer_client, "skip_changelist", query=f"?step={step}"),
    ):
        assert "<code>ValueError</code>" in html
        assert "bad amount" not in html
        assert "row-1" in html


def test_the_case_file_counts_the_skips_and_links_to_all(operator_client):
    execution, _ = skipping_step(items=25)
    case = get(operator_client, "jobexecution_change", execution).split(
        '<section class="ob-case"', 1
    )[1]
    assert "<dt>Skipped items</dt>" in case
    assert "25 skipped by its steps' skip policies (the first 20 below)" in case
    every = reverse("admin:oxide_batch_skip_changelist") + f"?execution={execution}"
    assert f'href="{every}"' in case
    assert "line-20" in case
    assert "line-21" not in case  # only the first 20, oldest first


def test_a_case_file_without_skips_says_so(operator_client):
    repo = DjangoJobRepository(FixedClock(datetime.now(UTC) - timedelta(minutes=5)))
    execution = move(repo, launch(repo, key("skip_job", "2026-08-09")), S.STARTED)
    case = get(operator_client, "jobexecution_change", execution.id)
    assert "None: no step skipped an item." in case


def test_the_ledger_list_shows_the_message_to_a_payload_reader_only(operator_client, viewer_client):
    _, step = skipping_step(items=1)
    shown = get(operator_client, "skip_changelist", query=f"?step={step}")
    assert "<code>ValueError</code>: bad amount &lt;b&gt;7&lt;/b&gt;: password=[redacted]" in shown
    hidden = get(viewer_client, "skip_changelist", query=f"?step={step}")
    assert "<code>ValueError</code>" in hidden
    assert "bad amount" not in hidden


def test_the_ledger_list_filters_by_step_and_execution(operator_client):
    execution, step = skipping_step(run="2026-07-29", items=2)
    other_execution, _ = skipping_step(run="2026-07-30", items=2, name="other")
    by_step = get(operator_client, "skip_changelist", query=f"?step={step}")
    assert by_step.count("row-1") == 1
    by_execution = get(operator_client, "skip_changelist", query=f"?execution={other_execution}")
    assert "other" in by_execution
    assert f"#{execution}<" not in by_execution


def test_the_pages_cost_the_same_queries_however_many_items_were_skipped(operator_client):
    few_execution, few_step = skipping_step(run="2026-07-29", items=2)
    many_execution, many_step = skipping_step(run="2026-07-30", items=60)
    for name, few, many, query in (
        ("stepexecution_change", few_step, many_step, ""),
        ("stepexecution_changelist", None, None, ""),
        ("skip_changelist", None, None, ""),
    ):
        if few is None:
            assert queries_of(operator_client, name, query=query) <= 12
            continue
        assert queries_of(operator_client, name, few) == queries_of(operator_client, name, many)
    # The case file: one bounded query for the skips, a count only past the bound.
    few = queries_of(operator_client, "jobexecution_change", few_execution)
    many = queries_of(operator_client, "jobexecution_change", many_execution)
    assert many == few + 1


def test_the_ledger_list_costs_the_same_queries_for_a_page_of_any_size(operator_client):
    _, step = skipping_step(run="2026-07-29", items=2)
    small = queries_of(operator_client, "skip_changelist", query=f"?step={step}")
    _, big = skipping_step(run="2026-07-30", items=45)
    large = queries_of(operator_client, "skip_changelist", query=f"?step={big}")
    assert small == large
