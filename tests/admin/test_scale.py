"""Every console page runs a constant number of queries and never counts a
whole table (contract §5.1 at 10^6 executions)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from oxide_batch import models
from tests.admin.conftest import business_day

pytestmark = pytest.mark.django_db

MODELS: dict[str, Any] = {
    "jobinstance": models.JobInstance,
    "jobexecution": models.JobExecution,
    "stepexecution": models.StepExecution,
    "steppartition": models.StepPartition,
    "flowdecision": models.FlowDecision,
    "jobdefinition": models.JobDefinition,
    "definitionupgrade": models.DefinitionUpgrade,
    "recoverydecision": models.RecoveryDecision,
    "operatorrequest": models.OperatorRequest,
    "retentionrecord": models.RetentionRecord,
}


def _queries(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return [q["sql"] for q in captured.captured_queries]


def _pages(name: str) -> list[str]:
    urls = [reverse(f"admin:oxide_batch_{name}_changelist")]
    row = MODELS[name].objects.order_by("pk").first()
    if row is not None:
        urls.append(reverse(f"admin:oxide_batch_{name}_change", args=[row.pk]))
    return urls


def _warm_up(client, urls: list[str]) -> None:
    """One request first: process-wide caches (content types) are then filled
    whatever ran before in this process, so the count does not depend on test order."""
    for url in urls:
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize("name", MODELS)
def test_query_count_is_constant_when_rows_are_added(admin_client, demo, more_rows, name):
    _warm_up(admin_client, _pages(name))
    before = {url: len(_queries(admin_client, url)) for url in _pages(name)}
    more_rows(6)
    after = {url: len(_queries(admin_client, url)) for url in _pages(name)}
    assert after == before


def test_dashboard_query_count_is_constant(admin_client, demo, more_rows):
    url = reverse("admin:oxide_batch_dashboard")
    _warm_up(admin_client, [url])
    before = len(_queries(admin_client, url))
    more_rows(6)
    assert len(_queries(admin_client, url)) == before


UNBOUNDED_COUNT = re.compile(r"COUNT\(\*\)", re.IGNORECASE)


@pytest.mark.parametrize(
    "query",
    [
        "",
        "?status__exact=FAILED",
        "?job_name=nightly_import",
        "?q=nightly_import",
        "?p=2",
        "?triage=unresolved",
        "?triage=failed24h",
        "?triage=failed24h&failure_category=USER_COMPONENT",
        "?q=business_date%3D{yesterday}",
    ],
)
def test_the_execution_changelist_never_counts_a_whole_table(admin_client, demo, query):
    query = query.format(yesterday=business_day(demo, 1))  # a value the demo holds
    url = reverse("admin:oxide_batch_jobexecution_changelist") + query
    for sql in _queries(admin_client, url):
        if UNBOUNDED_COUNT.search(sql):
            # Only the paginator's bounded count: COUNT(*) over a LIMITed subquery.
            assert "LIMIT" in sql.upper(), sql


def test_the_paginator_says_more_than_the_cap(admin_client, demo, monkeypatch):
    from oxide_batch.admin.paginator import BoundedCountPaginator

    monkeypatch.setattr(BoundedCountPaginator, "cap", 3)
    page = admin_client.get(reverse("admin:oxide_batch_jobexecution_changelist"))
    assert b"More than 3 rows match" in page.content


@pytest.mark.parametrize("query", ["", "?q=nightly_import"])
def test_a_capped_list_never_names_the_cap_as_its_total(admin_client, demo, monkeypatch, query):
    """Past the cap the rows were not counted: the header, the "select all"
    link and the search's count say "more than N", as the note below does."""
    from django.contrib import admin

    from oxide_batch.admin.paginator import BoundedCountPaginator

    monkeypatch.setattr(BoundedCountPaginator, "cap", 3)
    monkeypatch.setattr(admin.site._registry[models.JobExecution], "list_per_page", 2)
    url = reverse("admin:oxide_batch_jobexecution_changelist") + query
    text = admin_client.get(url).content.decode()
    assert "More than 3 rows match" in text
    assert "3 job executions" not in text.replace("more than 3 job executions", "")
    assert "Select all 3" not in text
    assert "All 3 selected" not in text
    assert "3 results" not in text.replace("more than 3 results", "")
    assert "Select all matching job executions (more than 3)" in text
    assert "more than 3 job executions" in text
    if query:
        assert "more than 3 results" in text


@pytest.mark.parametrize(
    ("name", "query"),
    [
        ("jobexecution", ""),
        ("jobexecution", "?triage=unresolved"),
        ("jobexecution", "?status__exact=FAILED"),
        ("stepexecution", ""),
    ],
)
def test_the_bounded_count_reads_only_the_key(admin_client, demo, name, query):
    """The page's annotations (the newest step write per row, the instance's
    parameters, a step's execution status) are computed for the page's rows,
    never for the 10,000 rows the paginator counts."""
    url = reverse(f"admin:oxide_batch_{name}_changelist") + query
    counts = [sql for sql in _queries(admin_client, url) if UNBOUNDED_COUNT.search(sql)]
    assert len(counts) == 1
    inner = counts[0].split("FROM", 1)[1]
    assert "ob_step_execution" not in inner.split("WHERE", 1)[0] or name == "stepexecution"
    assert "JOIN" not in inner.upper()
    assert "ORDER BY" not in inner.upper()


@pytest.mark.parametrize(
    "query", ["?triage=failed24h", "?triage=failed24h&failure_category=USER_COMPONENT"]
)
def test_the_failed_list_query_count_is_constant(admin_client, demo, more_rows, query):
    """The fate of each failure (abandoned, rerun) is read in the page's query."""
    url = reverse("admin:oxide_batch_jobexecution_changelist") + query
    _warm_up(admin_client, [url])
    before = len(_queries(admin_client, url))
    more_rows(6)
    assert len(_queries(admin_client, url)) == before
