"""The job-name filter (contract §5.1): every job name of the
page's table — jobs launched on the legacy definition included — from one
bounded index walk, never a DISTINCT or COUNT over the table."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from oxide_batch.admin.pages import JobNameFilter
from oxide_batch.demo.workload import Workload

pytestmark = pytest.mark.django_db

LISTS = ("jobinstance", "jobexecution")
FILTER_LINK = re.compile(r'<a href="\?job_name=([^"&]+)[^"]*">')


def _page(client, name: str, **query: str) -> str:
    response = client.get(reverse(f"admin:oxide_batch_{name}_changelist"), query)
    assert response.status_code == 200
    return str(response.content.decode())


def _offered(page: str) -> list[str]:
    section = page[page.index('data-filter-title="job name"') :].split("</details>", 1)[0]
    return FILTER_LINK.findall(section)


def _launch(names: list[str]) -> None:
    work = Workload(datetime.now(UTC) - timedelta(hours=1))
    for name in names:
        work.complete(name, ["only"], n=1)


@pytest.mark.parametrize("name", LISTS)
def test_every_job_name_is_offered_whatever_its_definition(admin_client, demo, name):
    launched = set(models.JobExecution.objects.values_list("job_name", flat=True))
    on_legacy = set(
        models.JobExecution.objects.filter(definition__job_name=None).values_list(
            "job_name", flat=True
        )
    )
    assert on_legacy, "the demo launches jobs on the legacy definition"
    assert sorted(_offered(_page(admin_client, name))) == sorted(launched)


@pytest.mark.parametrize("name", LISTS)
def test_a_name_filters_the_list(admin_client, demo, name):
    page = _page(admin_client, name, job_name="report_build")
    rows = page[page.index('id="result_list"') :].split("</table>", 1)[0]
    assert "report_build" in rows
    assert "nightly_import" not in rows


@pytest.mark.parametrize("name", LISTS)
def test_the_filter_is_one_query_however_many_job_names(admin_client, demo, name):
    def queries() -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            _page(admin_client, name)
        return [q["sql"] for q in captured.captured_queries]

    _page(admin_client, name)  # warm process-wide caches first (test order)
    before = queries()
    _launch([f"more_{n:02}" for n in range(12)])
    after = queries()
    assert len(after) == len(before)
    walks = [sql for sql in after if "WITH RECURSIVE" in sql]
    assert len(walks) == 1
    assert not any("DISTINCT" in sql.upper() for sql in after)


def test_beyond_the_cap_the_list_says_so_and_a_typed_name_still_filters(
    admin_client, demo, monkeypatch
):
    monkeypatch.setattr(JobNameFilter, "cap", 3)
    page = _page(admin_client, "jobexecution")
    first = sorted(set(models.JobExecution.objects.values_list("job_name", flat=True)))
    assert _offered(page) == first[:3]
    assert "Only the first 3 job names are listed" in page
    # A name past the cap: the filter applies it and shows it as the selection.
    chosen = first[-1]
    page = _page(admin_client, "jobexecution", job_name=chosen)
    assert chosen in _offered(page)
    assert re.search(rf'<li class="selected">\s*<a href="\?job_name={chosen}"', page)
    rows = page[page.index('id="result_list"') :].split("</table>", 1)[0]
    assert chosen in rows
    assert first[0] not in rows


def test_facets_are_off(admin_client, demo):
    """``?_facets`` would count every filter choice over the whole table."""
    with CaptureQueriesContext(connection) as captured:
        _page(admin_client, "jobexecution", _facets="True")
    for sql in (q["sql"] for q in captured.captured_queries):
        if re.search(r"COUNT\(", sql, re.IGNORECASE):
            assert "LIMIT" in sql.upper(), sql
